import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Job } from 'kubernetes-models/batch/v1';
import { Service } from 'kubernetes-models/v1';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { parseArgs } from './parse-args.js';

/*
 * The README's Kubernetes manifests: each document valid for the kind it claims (the Kubernetes
 * OpenAPI schemas as kubernetes-models compiles them: types, required fields, enums, formats;
 * not unknown fields, which those schemas allow), and the environment the Job gives each pod
 * replayed against webshard-run's argument parsing. No cluster ran them (the README says so).
 */

const README = readFileSync(join(import.meta.dirname, '..', '..', 'README.md'), 'utf8');

function manifests(): Record<string, unknown>[] {
  const blocks = [...README.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]!);
  expect(blocks.length).toBeGreaterThan(0);
  return blocks.flatMap((block) =>
    parseAllDocuments(block).map((doc) => {
      expect(doc.errors, block).toEqual([]);
      return doc.toJS() as Record<string, unknown>;
    }),
  );
}

const KINDS: Record<string, (doc: object) => { validate(): void }> = {
  'v1/Service': (doc) => new Service(doc as never),
  'batch/v1/Job': (doc) => new Job(doc as never),
};

interface Container {
  command: string[];
  args: string[];
  env: { name: string; value?: string; valueFrom?: { fieldRef?: { fieldPath: string } } }[];
}

describe("the collectives README's Kubernetes manifests", () => {
  it('are each valid for the kind they claim: a headless Service and an Indexed Job', () => {
    const docs = manifests();
    expect(docs.map((d) => `${d.apiVersion}/${d.kind}`)).toEqual(['v1/Service', 'batch/v1/Job']);
    for (const doc of docs) {
      const make = KINDS[`${doc.apiVersion}/${doc.kind}`]!;
      expect(() => make(doc).validate()).not.toThrow();
    }
    // The checks bite: the same Job with a string where the schema wants an integer fails.
    const job = structuredClone(docs[1]!) as { spec: { completions: unknown } };
    job.spec.completions = '2';
    expect(() => new Job(job as never).validate()).toThrow(/completions must be integer/);
  });

  it("gives each pod the launcher's place: node rank from the completion index, 2 nodes of 2 ranks, the store on pod 0", () => {
    const job = manifests()[1] as {
      spec: { completions: number; template: { spec: { containers: Container[] } } };
    };
    const [container] = job.spec.template.spec.containers;
    expect(container!.command[0]).toBe('node_modules/.bin/webshard-run');
    for (let index = 0; index < job.spec.completions; index++) {
      // What the pod sees: literal values, and the completion index where the manifest asks for
      // the Job's annotation (the secret is any token).
      const env: Record<string, string> = {};
      for (const variable of container!.env) {
        if (variable.value !== undefined) env[variable.name] = variable.value;
        else if (
          variable.valueFrom?.fieldRef?.fieldPath ===
          "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        ) {
          env[variable.name] = `${index}`;
        } else env[variable.name] = 'a-secret-token';
      }
      const options = parseArgs([...container!.command.slice(1), ...container!.args], env);
      expect(options).toMatchObject({
        nnodes: 2,
        nodeRank: index,
        nprocPerNode: 2,
        masterAddr: 'webshard-fsdp-0.webshard-fsdp',
        masterPort: 29500,
        noNode: true,
        script: 'node_modules/.bin/webshard-train',
        args: container!.args,
      });
    }
  });
});

// Test helper: several simulated nodes on this machine, each a `launch` of threads in this process
// (two launchers, one shm world each, tcp between them), as `webshard-run --nnodes M --node-rank K`
// runs them.
import { dirname, join } from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { freePort, launch } from '../../launcher/launcher.js';
import type { LaunchResult } from '../../launcher/supervise.js';
import type { RankReport, SuiteJob } from '../../suites/suite.js';

const here = dirname(fileURLToPath(import.meta.url));
const REPORT = /^\[rank (\d+)\] @@report (.*)$/;

/** Collects what a launcher prints. */
export class Collect extends Writable {
  text = '';
  override _write(chunk: Buffer, _: BufferEncoding, done: () => void): void {
    this.text += chunk.toString();
    done();
  }
}

/** Runs `script` on `nodes` launchers of `perNode` threads each; resolves with their output. */
export async function runNodes(
  nodes: number,
  perNode: number,
  script: string,
  env: Record<string, string>,
  args: readonly string[] = [],
): Promise<{ results: LaunchResult[]; out: string; err: string }> {
  const port = await freePort();
  const out = new Collect();
  const err = new Collect();
  const results = await Promise.all(
    Array.from({ length: nodes }, (_, node) =>
      launch({
        nprocPerNode: perNode,
        nnodes: nodes,
        nodeRank: node,
        masterPort: port,
        token: 'two-level-test',
        script,
        args,
        ranksAs: 'threads',
        execArgv: ['--conditions=@webshard/source'],
        env,
        stdout: out,
        stderr: err,
        forwardSignals: false,
        // Small arena slots: the suite's sizes take several rounds of the node's phases.
        shm: { slotBytes: 256, capacity: 4096 },
      }),
    ),
  );
  return { results, out: out.text, err: err.text };
}

/** Runs a suite job on `nodes` x `perNode` thread ranks; a rank that died reports null. */
export async function runTwoLevelJob(
  nodes: number,
  perNode: number,
  job: SuiteJob,
): Promise<(RankReport | null)[]> {
  const { out, err } = await runNodes(nodes, perNode, join(here, 'suite-rank.ts'), {
    WEBSHARD_SUITE_JOB: JSON.stringify(job),
  });
  const reports: (RankReport | null)[] = Array.from({ length: nodes * perNode }, () => null);
  for (const line of out.split('\n')) {
    const match = REPORT.exec(line);
    if (match !== null) reports[Number(match[1])] = JSON.parse(match[2]!) as RankReport;
  }
  if (process.env.WEBSHARD_DEBUG_TWO_LEVEL) console.log(out, err);
  if (job.kind === 'cases' && reports.some((r) => r === null)) {
    throw new Error(`a rank did not report:\n${out}\n${err}`);
  }
  return reports;
}

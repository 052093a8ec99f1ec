import { type ChildProcess, spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it, onTestFinished } from 'vitest';
import { freePort } from '../launcher/launcher.js';

const here = dirname(fileURLToPath(import.meta.url));
const cli = join(here, '..', 'cli', 'webshard-run.ts');
const script = join(here, '..', 'test-support', 'two-level', 'loss-rank.ts');

/** One node: `webshard-run --nnodes 2 --node-rank K` as its own process (threads over shm). */
function startNode(node: number, port: number): { child: ChildProcess; out: () => string } {
  const child = spawn(
    process.execPath,
    [
      '--conditions=@webshard/source',
      '--import',
      'tsx',
      cli,
      '--nproc-per-node',
      '2',
      '--nnodes',
      '2',
      '--node-rank',
      String(node),
      '--master-port',
      String(port),
      '--token',
      'node-loss',
      script,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  return { child, out: () => out };
}

async function until(check: () => boolean, what: () => string, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting: ${what()}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('two-level world: a node killed', () => {
  it('fails every rank of the other node within the deadline, naming a rank of the dead node', async () => {
    const port = await freePort();
    const nodes = [startNode(0, port), startNode(1, port)];
    // A failed run must not leave a node behind: a hung launcher spins on the machine's cores
    // for every later test (one did, for half an hour, after this test timed out once).
    onTestFinished(() => {
      for (const node of nodes) if (node.child.exitCode === null) node.child.kill('SIGKILL');
    });
    const ready = () => nodes.every((n) => (n.out().match(/\] ready/g) ?? []).length === 2);
    await until(ready, () => nodes.map((n) => n.out()).join('\n'), 60_000);
    // Let the all-reduce loop run, then kill node 1's launcher and its threads at once.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const killedAt = Date.now();
    nodes[1]!.child.kill('SIGKILL');
    const code = await new Promise<number | null>((resolve) =>
      nodes[0]!.child.on('close', resolve),
    );
    const errors = nodes[0]!
      .out()
      .split('\n')
      .filter((line) => line.includes('@@error '))
      .map(
        (line) =>
          JSON.parse(line.slice(line.indexOf('@@error ') + 8)) as {
            name: string;
            message: string;
            peer?: number;
            at: number;
          },
      );
    expect(errors, nodes[0]!.out()).toHaveLength(2);
    for (const error of errors) {
      expect(error.name, error.message).toBe('PeerLostError');
      expect([2, 3]).toContain(error.peer);
      expect(error.message).toContain(`rank ${error.peer}`);
      // Far inside the ops' 20 s deadline: the closed sockets tell, not the deadline.
      expect(error.at - killedAt).toBeLessThan(5000);
    }
    expect(code).toBe(0);
  });
});

import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '@webshard/collectives/node';
import { afterAll, describe, expect, it } from 'vitest';

/*
 * The collectives README's Slurm examples, run as written on a one-machine Slurm cluster
 * (tooling/slurm/start-cluster.sh: two node entries on this host), with fewer steps: their losses
 * against the same run started by hand, and scancel leaving no rank behind. CI installs slurm-wlm
 * and munge and sets WEBSHARD_REQUIRE_SLURM=1, so there a cluster that cannot start fails the
 * suite; elsewhere the tests skip and say why.
 */

const ROOT = join(import.meta.dirname, '..', '..', '..', '..');
const README = readFileSync(join(ROOT, 'packages', 'collectives', 'README.md'), 'utf8');
const TRAIN = join(ROOT, 'apps', 'trainer', 'bin', 'webshard-train.js');
const STEPS = 6;

/**
 * A command run to its end without blocking this thread (a job takes a minute or more: a blocked
 * test worker misses vitest's own messages, which then fails the run with an RPC timeout).
 */
function run(
  command: string,
  args: string[],
  options: { cwd: string; env?: NodeJS.ProcessEnv; timeout: number },
): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: options.cwd, env: options.env ?? process.env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeout);
    child.on('error', reject);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

function startCluster(): string | null {
  const started = spawnSync('bash', [join(ROOT, 'tooling', 'slurm', 'start-cluster.sh')], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  if (started.status === 0) return null;
  return (started.stderr || started.stdout || `exit ${started.status}`).trim();
}

const unavailable = process.platform === 'linux' ? startCluster() : 'not Linux';
if (unavailable !== null) {
  if (process.env.WEBSHARD_REQUIRE_SLURM === '1') {
    throw new Error(`WEBSHARD_REQUIRE_SLURM=1 but no Slurm cluster: ${unavailable}`);
  }
  console.log(`skipping the Slurm tests: ${unavailable}`);
}

/** The README's sh block that contains `marker`, with `--steps 200` made `--steps <steps>`. */
function readmeBlock(marker: string, steps: number): string {
  const blocks = [...README.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!);
  const found = blocks.filter((b) => b.includes(marker));
  expect(found, `one README block with ${marker}`).toHaveLength(1);
  expect(found[0]).toContain('--steps 200');
  return found[0]!.replace('--steps 200', `--steps ${steps}`);
}

/** A directory like a project's: node_modules with the bins, where the job writes its log. */
function project(): string {
  const dir = mkdtempSync(join(tmpdir(), 'webshard-slurm-'));
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
  return dir;
}

function losses(file: string): number[] {
  return readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line).loss as number);
}

/** The same run by hand: one trainer, 4 ranks over tcp, the backend the job chose. */
async function byHand(dir: string, strategy: string, backend: string): Promise<number[]> {
  const log = join(dir, `hand-${strategy}.jsonl`);
  const hand = await run(
    process.execPath,
    [TRAIN, '--strategy', strategy, '--transport', 'tcp', '--world-size', '4', '--steps', `${STEPS}`,
      '--backend', backend, '--log-jsonl', log],
    { cwd: dir, timeout: 120_000 },
  ); // biome-ignore format: one command
  expect(hand.status, hand.stderr).toBe(0);
  return losses(log);
}

function backendOf(output: string): string {
  const match = /^(?:\[rank 0\] )?backend: (cpu|webgpu) on all 4 ranks/m.exec(output);
  expect(match, output).not.toBeNull();
  return match![1]!;
}

/**
 * The environment a user's shell would give sbatch and srun (which pass it to the job): this
 * process's, with a free store port, without pnpm's INIT_CWD (under `pnpm test` it names the
 * package, and webshard-train reads relative paths against it: the logs would land there).
 */
async function jobEnv(): Promise<NodeJS.ProcessEnv> {
  const env: NodeJS.ProcessEnv = { ...process.env, MASTER_PORT: `${await freePort()}` };
  delete env.INIT_CWD;
  return env;
}

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  if (unavailable === null) {
    spawnSync('bash', [join(ROOT, 'tooling', 'slurm', 'stop-cluster.sh')], { timeout: 30_000 });
  }
});

describe.skipIf(unavailable !== null)('Slurm (a one-machine cluster of two nodes)', () => {
  it("the README's sbatch script trains fsdp on 2 nodes x 2 ranks with the losses of the run by hand", async () => {
    const dir = project();
    dirs.push(dir);
    writeFileSync(join(dir, 'fsdp.sbatch'), readmeBlock('#SBATCH', STEPS));
    const env = await jobEnv();
    const job = await run('sbatch', ['--wait', '-o', 'job.out', 'fsdp.sbatch'], {
      cwd: dir,
      env,
      timeout: 240_000,
    });
    const output = readFileSync(join(dir, 'job.out'), 'utf8');
    expect(job.status, `${job.stderr}\n${output}`).toBe(0);
    const ours = losses(join(dir, 'fsdp.jsonl'));
    expect(ours).toHaveLength(STEPS);
    const hand = await byHand(dir, 'fsdp', backendOf(output));
    for (const [i, loss] of ours.entries()) expect(loss).toBeCloseTo(hand[i]!, 5);
  }, 400_000);

  it("the README's srun command trains ddp on 2 nodes x 2 ranks with the losses of the run by hand", async () => {
    const dir = project();
    dirs.push(dir);
    const env = await jobEnv();
    const srun = await run('bash', ['-ec', readmeBlock('srun --nodes=2', STEPS)], {
      cwd: dir,
      env,
      timeout: 240_000,
    });
    expect(srun.status, `${srun.stderr}\n${srun.stdout}`).toBe(0);
    const ours = losses(join(dir, 'ddp.jsonl'));
    expect(ours).toHaveLength(STEPS);
    const hand = await byHand(dir, 'ddp', backendOf(srun.stdout));
    for (const [i, loss] of ours.entries()) expect(loss).toBeCloseTo(hand[i]!, 5);
  }, 400_000);

  it('scancel of a running job leaves no rank running', async () => {
    const dir = project();
    dirs.push(dir);
    writeFileSync(join(dir, 'fsdp.sbatch'), readmeBlock('#SBATCH', 100_000));
    const env = await jobEnv();
    const submitted = execFileSync('sbatch', ['--parsable', '-o', 'job.out', 'fsdp.sbatch'], {
      cwd: dir,
      env,
      encoding: 'utf8',
    }).trim();
    const jobId = submitted.split(';')[0]!;
    // Every rank runs `webshard-train ... --log-jsonl fsdp.jsonl` with this job's directory as cwd:
    // wait until the log has a step (every rank is training), then cancel.
    const ranks = () => {
      const found = spawnSync('pgrep', ['-f', 'webshard-train.*--log-jsonl fsdp.jsonl'], {
        encoding: 'utf8',
      });
      return found.stdout
        .trim()
        .split('\n')
        .filter((pid) => pid !== '')
        .filter((pid) => {
          try {
            return (
              execFileSync('readlink', [`/proc/${pid}/cwd`], { encoding: 'utf8' }).trim() === dir
            );
          } catch {
            return false;
          }
        });
    };
    const deadline = Date.now() + 180_000;
    let stepped = false;
    while (!stepped && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 500));
      try {
        stepped = readFileSync(join(dir, 'fsdp.jsonl'), 'utf8').includes('"step"');
      } catch {}
    }
    expect(stepped, readFileSync(join(dir, 'job.out'), 'utf8')).toBe(true);
    expect(ranks().length).toBeGreaterThanOrEqual(4);
    execFileSync('scancel', [jobId]);
    const gone = Date.now() + 60_000;
    while (ranks().length > 0 && Date.now() < gone) await new Promise((r) => setTimeout(r, 500));
    expect(ranks()).toEqual([]);
  }, 400_000);
});

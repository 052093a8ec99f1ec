// Starts the ranks of one step-job.ts job as processes over tcp (tcp-rank.ts), each with its
// communication on its thread or on its worker, and reduces their results to the slowest rank's.
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { slowestRank } from './shm-launch.js';
import type { StepJob, StepResult } from './step-job.js';

const rankScript = fileURLToPath(new URL('./tcp-rank.ts', import.meta.url));

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        resolve(typeof address === 'object' && address !== null ? address.port : 0),
      );
    });
  });
}

/** Run `job` on `world` processes over tcp; `progress` as `initProcessGroup`'s. */
export async function runTcpStep(
  world: number,
  job: StepJob,
  progress: 'thread' | 'worker',
): Promise<StepResult> {
  const port = await freePort();
  const results = await Promise.all(
    Array.from(
      { length: world },
      (_, rank) =>
        new Promise<StepResult>((resolve, reject) => {
          const child = spawn(
            process.execPath,
            [
              '--conditions=@webshard/source',
              '--import',
              'tsx',
              rankScript,
              JSON.stringify(job),
              progress,
            ],
            {
              stdio: ['ignore', 'pipe', 'inherit'],
              env: {
                ...process.env,
                RANK: String(rank),
                LOCAL_RANK: String(rank),
                // As webshard-run sets it: each rank's matmul takes its share of the cores.
                LOCAL_WORLD_SIZE: String(world),
                WORLD_SIZE: String(world),
                MASTER_ADDR: '127.0.0.1',
                MASTER_PORT: String(port),
                WEBSHARD_TOKEN: 'fsdp-bench',
              },
            },
          );
          let out = '';
          child.stdout.on('data', (chunk: Buffer) => {
            out += chunk.toString();
          });
          child.on('exit', (code) => {
            const line = out.split('\n').find((l) => l.startsWith('@@result '));
            if (code !== 0 || line === undefined)
              reject(new Error(`tcp rank ${rank} exited ${code}`));
            else resolve(JSON.parse(line.slice('@@result '.length)) as StepResult);
          });
        }),
    ),
  );
  return slowestRank(results);
}

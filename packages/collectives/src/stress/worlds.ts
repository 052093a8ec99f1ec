import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { freePort, launch } from '../launcher/launcher.js';
import { ProcessGroup } from '../process-group.js';
import type { NetworkBackend } from '../connect-transport.js';
import { createCommWorkerWorld } from '../test-support/comm-worker-world.js';
import { createNetworkWorld } from '../test-support/network-world.js';
import { createLocalGroups } from '../transports/local/local-transport.js';
import { JOB_VARIABLE, REPORT_MARK, type StressJob } from './job.js';
import { generateProgram } from './program.js';
import { type RankReport, runStressRank } from './run-rank.js';

/** What a world's ranks reported, and what else they printed (for a rank with no report). */
export interface WorldOutcome {
  /** By world rank; null for a rank that printed no report (it crashed or hung). */
  readonly reports: (RankReport | null)[];
  readonly output: string;
  readonly wallMs: number;
}

class Collect extends Writable {
  text = '';
  override _write(chunk: Buffer, _: BufferEncoding, done: () => void): void {
    this.text += chunk.toString();
    done();
  }
}

/**
 * Every rank's budget for messages that arrived before their receive: ranks drift apart by
 * seconds (the pauses) while up to 4 ops of up to 256 MiB are in flight, so sends may arrive ahead
 * of their receives by more than the default 256 MiB per peer.
 */
const UNEXPECTED_BYTES = 2 ** 31;

const RANK_SCRIPT = fileURLToPath(new URL('./stress-rank.ts', import.meta.url));
const REPORT_LINE = /^\[rank (\d+)\] @@stress (.*)$/;

/**
 * Runs `job` on a world of its transport: `local` in this thread, `shm` as threads of this process
 * (`launch` with `ranksAs: 'threads'`), `tcp` and `ws` as child processes, `two-level` as two
 * simulated nodes of threads in this process joined over tcp (as `webshard-run --nnodes 2` runs
 * them on one machine); with `inProcess`, tcp and ws ranks in this thread too, over real sockets
(the CI test: no process to start). Every rank in a thread or process of its own runs
`stress-rank.ts`.
 */
export async function runStressWorld(job: StressJob): Promise<WorldOutcome> {
  const started = performance.now();
  const inThread =
    job.transport === 'local' ||
    (job.inProcess && job.transport !== 'shm' && job.transport !== 'two-level');
  if (inThread) {
    const options = { timeoutMs: job.rank.timeoutMs };
    const networked = job.transport === 'tcp' || job.transport === 'ws';
    const onWorkers =
      networked && job.progress === 'worker'
        ? await createCommWorkerWorld(job.worldSize, options, job.transport as NetworkBackend, {
            maxUnexpectedBytes: UNEXPECTED_BYTES,
          })
        : null;
    const network =
      networked && onWorkers === null
        ? await createNetworkWorld(job.transport as NetworkBackend, job.worldSize, 'stress', {
            maxUnexpectedBytes: UNEXPECTED_BYTES,
          })
        : null;
    const groups: ProcessGroup[] =
      onWorkers !== null
        ? onWorkers.ranks
        : network === null
          ? createLocalGroups(job.worldSize, options)
          : network.transports.map((t) => ProcessGroup.fromTransport(t, options));
    const program = generateProgram(job.seed, job.worldSize, job.program);
    const rank = { ...job.rank, pauseScale: 1 / job.worldSize };
    const reports = await Promise.all(groups.map((g) => runStressRank(g, program, rank)));
    await Promise.allSettled(groups.map((g) => g.close()));
    await network?.close().catch(() => {});
    await onWorkers?.close().catch(() => {});
    return { reports, output: '', wallMs: performance.now() - started };
  }
  const out = new Collect();
  const err = new Collect();
  const env = {
    [JOB_VARIABLE]: JSON.stringify(job),
    WEBSHARD_MAX_UNEXPECTED_BYTES: String(UNEXPECTED_BYTES),
    NODE_OPTIONS: [process.env.NODE_OPTIONS ?? '', '--conditions=@webshard/source']
      .join(' ')
      .trim(),
  };
  const common = {
    script: RANK_SCRIPT,
    env,
    stdout: out,
    stderr: err,
    forwardSignals: false,
    execArgv: ['--conditions=@webshard/source'],
    shm: { slotBytes: job.slotBytes },
    graceMs: 2000,
  };
  if (job.transport === 'two-level') {
    const nodes = 2;
    const port = await freePort();
    await Promise.all(
      Array.from({ length: nodes }, (_, node) =>
        launch({
          ...common,
          nprocPerNode: job.worldSize / nodes,
          nnodes: nodes,
          nodeRank: node,
          masterPort: port,
          token: 'stress',
          ranksAs: 'threads',
        }),
      ),
    );
  } else {
    await launch({
      ...common,
      nprocPerNode: job.worldSize,
      ranksAs: job.transport === 'shm' ? 'threads' : 'processes',
    });
  }
  const reports: (RankReport | null)[] = Array.from({ length: job.worldSize }, () => null);
  const other: string[] = [];
  for (const line of out.text.split('\n')) {
    const match = REPORT_LINE.exec(line);
    if (match !== null) reports[Number(match[1])] = JSON.parse(match[2]!) as RankReport;
    else if (line !== '' && !line.includes(REPORT_MARK)) other.push(line);
  }
  return {
    reports,
    output: [...other, err.text].join('\n').trim(),
    wallMs: performance.now() - started,
  };
}

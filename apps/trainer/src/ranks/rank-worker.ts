// One rank of a `--transport shm` run, in a worker thread started by `runRanks` (start-ranks.ts).
import { runShmWorker } from '@webshard/collectives/node';
import { StopFlag } from '../interrupt.js';
import { train } from '../train.js';
import type { RankJob, WorkerLine } from './start-ranks.js';

void runShmWorker<RankJob, number>(async (group, job) => {
  const channel = new BroadcastChannel(job.channel);
  const post = (message: WorkerLine) => channel.postMessage(message);
  const io = {
    stdout: (text: string) => post({ kind: 'stdout', text }),
    stderr: (text: string) => post({ kind: 'stderr', text }),
    isTTY: job.isTTY,
    terminal: { columns: () => Atomics.load(new Int32Array(job.columns), 0) },
    ...(job.stop === undefined ? {} : { stop: new StopFlag(job.stop) }),
  };
  try {
    const summary = await train(job.config, io, group);
    return summary.records.length;
  } finally {
    if (group.rank === 0) post({ kind: 'end' });
    channel.close();
  }
});

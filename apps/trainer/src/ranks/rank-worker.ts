// One rank of a `--transport shm` run, in a worker thread started by `runRanks` (start-ranks.ts).
import { runShmWorker } from '@webshard/collectives/node';
import type { TrainConfig } from '../cli/options.js';
import { train } from '../train.js';

interface Job {
  readonly config: TrainConfig;
  readonly isTTY: boolean;
}

void runShmWorker<Job, number>(async (group, job) => {
  const io = {
    stdout: (text: string) => process.stdout.write(text),
    stderr: (text: string) => process.stderr.write(text),
    isTTY: job.isTTY,
  };
  const summary = await train(job.config, io, group);
  return summary.records.length;
});

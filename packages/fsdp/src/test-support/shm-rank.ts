// One rank of an FSDP parity run over shm, in a worker thread started by `trainShm`.
import { runShmWorker } from '@webshard/collectives/node';
import { createCpuBackend } from '@webshard/tensor-core';
import type { FsdpOptions } from '../api.js';
import { type ParityResult, type ParityRun, trainRank } from './parity.js';

interface Job {
  readonly run: ParityRun;
  readonly options: Omit<FsdpOptions, 'group'>;
}

void runShmWorker<Job, ParityResult>((group, job) =>
  trainRank(group, createCpuBackend(), job.run, job.options),
);

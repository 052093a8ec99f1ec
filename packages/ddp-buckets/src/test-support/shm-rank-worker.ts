// A rank of the shm parity tests: trains through DistributedDataParallel on its own thread.
import { runShmWorker } from '@webshard/collectives/node';
import { createCpuBackend } from '@webshard/tensor-core';
import { type ParityJob, trainRank } from './parity.js';

void runShmWorker((group, job: ParityJob) => trainRank(group, job, createCpuBackend()));

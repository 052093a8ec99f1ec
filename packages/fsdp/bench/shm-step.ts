// One rank of the FSDP benchmark over shm, in a worker thread started by shm-launch.ts.
import { runShmWorker } from '@webshard/collectives/node';
import { runStepJob, type StepJob, type StepResult } from './step-job.js';

void runShmWorker<StepJob, StepResult>(runStepJob);

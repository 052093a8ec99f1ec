// A rank of the shm averaging test: one compressed average on its own thread.
import { runShmWorker } from '@webshard/collectives/node';
import { type AverageJob, runAverage } from './average-case.js';

void runShmWorker((group, job: AverageJob) => runAverage(group, job));

// A rank of registered-churn.test.ts over shm: runs the churn job on its world group.
import { runShmWorker } from '../../transports/shm/launch-threads.js';
import { type ChurnJob, type ChurnReport, runChurn } from '../registered-churn.js';

void runShmWorker<ChurnJob, ChurnReport>(runChurn);

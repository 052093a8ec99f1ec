// One rank of the shm benchmark, as a worker thread started by launchThreads.
import { runShmWorker } from '@webshard/collectives/node';
import { runPlan, type StepPlan } from './step.js';

void runShmWorker((group, plan: StepPlan) => runPlan(group, plan));

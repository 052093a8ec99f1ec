// One rank of the shared-memory benchmark, as a worker thread started by launchThreads.
import { runShmWorker } from '../src/transports/shm/launch-threads.js';
import { type BenchPlan, runBenchPlan } from './plan.js';

void runShmWorker((group, plan: BenchPlan) => runBenchPlan(group, plan));

// A worker of autograd-interleaving.test.ts over shm.
import { runShmWorker } from '../transports/shm/launch-threads.js';
import { interleavedGradients, type RankGradients } from './interleaving.js';

void runShmWorker<null, RankGradients>((group) => interleavedGradients(group.rank, group));

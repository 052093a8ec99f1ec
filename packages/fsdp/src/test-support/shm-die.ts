// A rank of the failure test: rank 1 dies in the middle of its first backward.
import { runShmWorker } from '@webshard/collectives/node';
import { AdamW, createCpuBackend } from '@webshard/tensor-core';
import { makeBatches, Net, SMALL, slice } from './models.js';
import { wrapNet } from './parity.js';

void runShmWorker<null, string>(async (group) => {
  const backend = createCpuBackend();
  const net = new Net(SMALL, backend);
  const model = wrapNet(net, group, {}, true);
  const optimizer = new AdamW(model.parameters());
  if (group.rank === 1) {
    net.head.weight.registerPostAccumulateGradHook(() => process.exit(1));
  }
  const [batch] = makeBatches(backend, SMALL, 1, 8);
  const [x, y] = slice(backend, batch!, group.rank * 4, group.rank * 4 + 4);
  const loss = await model.call(x, y);
  await loss.backward();
  optimizer.step();
  return 'finished';
});

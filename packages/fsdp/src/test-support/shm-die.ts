// A rank of the failure test: rank 1 dies in the middle of its first backward. `rank0BlocksMs`:
// rank 0 blocks its thread that long at the same point (a slower rank), so it reaches its next
// collective after rank 1's death was published.
import { runShmWorker } from '@webshard/collectives/node';
import { AdamW, createCpuBackend } from '@webshard/tensor-core';
import { makeBatches, Net, SMALL, slice } from './models.js';
import { wrapNet } from './parity.js';

void runShmWorker<number, string>(async (group, rank0BlocksMs) => {
  const backend = createCpuBackend();
  const net = new Net(SMALL, backend);
  const model = wrapNet(net, group, {}, true);
  const optimizer = new AdamW(model.parameters());
  if (group.rank === 0 && rank0BlocksMs > 0) {
    net.head.weight.registerPostAccumulateGradHook(() => {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, rank0BlocksMs);
    });
  }
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

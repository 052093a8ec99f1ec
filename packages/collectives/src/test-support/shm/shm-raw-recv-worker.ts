// A rank whose only work is a receive straight on the transport (for shm-transport.test.ts):
// rank 0 sends only after 300 ms, so rank 1's thread has nothing else to keep it running.
import { runShmWorker } from '../../transports/shm/launch-threads.js';

void runShmWorker(async (group) => {
  const { transport } = group;
  if (group.rank === 0) {
    await new Promise((resolve) => setTimeout(resolve, 300));
    await transport.send(1, 0x7ffffffe, Uint8Array.from([7, 8, 9]));
    return 'sent';
  }
  const into = new Uint8Array(3);
  await transport.recv(0, 0x7ffffffe, into);
  return `received ${into.join(',')}`;
});

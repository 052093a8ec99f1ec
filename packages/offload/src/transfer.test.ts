import { createCpuBackend, tensor } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { TransferQueue } from './transfer.js';

describe('TransferQueue', () => {
  it('runs one slice transfers in order and counts the bytes each way', async () => {
    const host = createCpuBackend();
    const device = createCpuBackend();
    const queue = new TransferQueue(device, host);
    const t = tensor(
      [
        [1, 2],
        [3, 4],
      ],
      { backend: host },
    );
    const seen: string[] = [];
    queue.upload(
      0,
      () => [t],
      () => seen.push(`up ${t.backend === device}`),
    );
    queue.download(
      0,
      () => [t],
      () => seen.push(`down ${t.backend === host}`),
    );
    await queue.drain();
    expect(seen).toEqual(['up true', 'down true']);
    expect(queue.stats).toEqual({
      uploadedBytes: 16,
      downloadedBytes: 16,
      uploads: 1,
      downloads: 1,
    });
    expect(Array.from(await t.read())).toEqual([1, 2, 3, 4]);
  });

  it('a failed transfer rejects where its slice is waited for', async () => {
    const queue = new TransferQueue(createCpuBackend({ memoryLimit: 0 }), createCpuBackend());
    const t = tensor([1], { backend: createCpuBackend() });
    queue.upload(3, () => [t]);
    await expect(queue.wait(3)).rejects.toThrow(/out of memory/);
  });
});

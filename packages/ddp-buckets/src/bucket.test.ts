import { createLocalGroups } from '@webshard/collectives';
import { type Backend, type Tensor, tensor } from '@webshard/tensor-core';
import { describeBackends } from '@webshard/tensor-core/testing';
import { expect, it } from 'vitest';
import { Bucket } from './bucket.js';

/** Two ranks' parameters with gradients: rank r's gradient element i is (r + 1) * (i + 1). */
function rankParams(backend: Backend, rank: number, dtype: 'f32' | 'f16'): Tensor[] {
  return [[2, 3], [4], [5]].map((shape, k) => {
    const size = shape.reduce((a, b) => a * b, 1);
    const p = tensor(new Array(size).fill(0), { backend, dtype, shape });
    p.grad = tensor(
      Array.from({ length: size }, (_, i) => (rank + 1) * (i + 1 + k)),
      { backend, dtype, shape },
    );
    return p;
  });
}

describeBackends('Bucket', (ctx) => {
  for (const [dtype, comm] of [
    ['f32', 'f32'],
    ['f16', 'f16'],
    ['f16', 'f32'],
  ] as const) {
    it(`averages ${dtype} gradients over two ranks in a ${comm} buffer, reading and writing the device once per bucket`, async () => {
      const { backend } = ctx;
      const groups = createLocalGroups(2);
      const params = groups.map((_, r) => rankParams(backend, r, dtype));
      const read = backend.read.bind(backend);
      const write = backend.write.bind(backend);
      let reads = 0;
      let writes = 0;
      backend.read = (t, into) => {
        reads++;
        return read(t, into);
      };
      backend.write = (t, data, done) => {
        writes++;
        write(t, data, done);
      };
      try {
        const buckets = groups.map((g, r) => new Bucket(g, params[r]!, dtype, comm));
        await Promise.all(buckets.map((b) => b.pack(1)));
        await Promise.all(buckets.map((b) => b.allReduce().wait()));
        for (const b of buckets) b.unpack(0.5, false);
      } finally {
        backend.read = read;
        backend.write = write;
      }
      // Host memory is used in place on the CPU; a device is read and written once per bucket and
      // rank (two ranks here), not once per parameter.
      expect([reads, writes]).toEqual(backend.kind === 'cpu' ? [0, 0] : [2, 2]);
      for (const rankParamsOf of params) {
        for (const [k, p] of rankParamsOf.entries()) {
          const expected = Array.from({ length: p.size }, (_, i) => 1.5 * (i + 1 + k));
          expect([...(await p.grad!.read())]).toEqual(expected);
        }
      }
    });
  }

  it('retainAllreduceBuffers: the gradients become views of one flat tensor', async () => {
    const { backend } = ctx;
    const [group] = createLocalGroups(1);
    const params = rankParams(backend, 0, 'f32');
    const bucket = new Bucket(group!, params, 'f32', 'f32');
    await bucket.pack(1);
    await bucket.allReduce().wait();
    bucket.unpack(1, true);
    expect(new Set(params.map((p) => p.grad!.storage())).size).toBe(1);
    expect([...(await params[1]!.grad!.read())]).toEqual([2, 3, 4, 5]);
  });
});

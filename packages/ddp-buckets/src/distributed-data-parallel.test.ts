import { createLocalGroups } from '@webshard/collectives';
import {
  createCpuBackend,
  Linear,
  mseLoss,
  type Module,
  Sequential,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { Bucket } from './bucket.js';
import { DistributedDataParallel } from './distributed-data-parallel.js';
import {
  DdpArgumentError,
  DdpError,
  DdpGroupAbortedError,
  DdpParameterMismatchError,
  DdpStateError,
} from './errors.js';

const backend = createCpuBackend();

class Empty extends (Sequential as unknown as new () => Module<[Tensor], Tensor>) {
  override forward(x: Tensor): Tensor {
    return x;
  }
}

function model(hidden = 3): Sequential {
  const m = new Sequential(new Linear(2, hidden, { backend }), new Linear(hidden, 1, { backend }));
  m.nameTensors();
  return m;
}

async function step(ddp: DistributedDataParallel<[Tensor], Tensor>): Promise<Tensor> {
  const x = tensor([1, 2, 3, 4], { backend, shape: [2, 2] });
  const y = tensor([1, 0], { backend, shape: [2, 1] });
  const loss = mseLoss(await ddp.call(x), y);
  await loss.backward(null, { retainGraph: true });
  return loss;
}

describe('bad input', () => {
  const [group] = createLocalGroups(1);

  it('a module with no parameters', () => {
    expect(() => new DistributedDataParallel(new Empty(), { group: group! })).toThrow(
      new DdpArgumentError(
        { op: 'DistributedDataParallel', rank: 0 },
        'module',
        'Empty has no parameters to train',
      ),
    );
  });

  it('messageSize <= 0', () => {
    for (const messageSize of [0, -5, 1.5]) {
      const error = (() => {
        try {
          new DistributedDataParallel(model(), { group: group!, messageSize });
        } catch (e) {
          return e;
        }
      })() as DdpArgumentError;
      expect(DdpArgumentError.isInstance(error)).toBe(true);
      expect(error.option).toBe('messageSize');
      expect(error.message).toBe(
        `[DistributedDataParallel] rank 0: messageSize must be a positive integer (elements), got ${messageSize}`,
      );
    }
  });

  it('no group, or a group that cannot train', () => {
    expect(() => new DistributedDataParallel(model(), {} as never)).toThrow(
      '[DistributedDataParallel] rank -1: options.group must be a ProcessGroup',
    );
    const broken = Object.create(group!, { size: { value: 0 } });
    expect(() => new DistributedDataParallel(model(), { group: broken })).toThrow(
      'a group of size 0 with rank 0 cannot train',
    );
  });

  it('backward twice without a forward', async () => {
    const ddp = new DistributedDataParallel<[Tensor], Tensor>(model(), { group: group! });
    const loss = await step(ddp);
    const error = await loss.backward().catch((e: unknown) => e);
    expect(DdpStateError.isInstance(error)).toBe(true);
    expect((error as Error).message).toBe(
      '[backward] rank 0: backward ran twice without a forward in between (each backward needs its own forward)',
    );
  });
});

describe('construction', () => {
  it('broadcasts rank 0 parameters', async () => {
    const groups = createLocalGroups(2);
    const models = [model(), model()];
    const ddps = groups.map((group, r) => new DistributedDataParallel(models[r]!, { group }));
    await Promise.all(ddps.map((d) => d.ready));
    const [a, b] = await Promise.all(
      models.map((m) => Promise.all(m.parameters().map((p) => p.read()))),
    );
    expect(b).toEqual(a);
  });

  it('different parameters on two ranks fail both, naming the first differing one', async () => {
    const groups = createLocalGroups(2);
    const ddps = groups.map(
      (group, r) => new DistributedDataParallel(model(r === 0 ? 3 : 4), { group }),
    );
    const errors = await Promise.all(ddps.map((d) => d.ready.catch((e: unknown) => e)));
    for (const error of errors) {
      expect(DdpParameterMismatchError.isInstance(error)).toBe(true);
      expect((error as DdpParameterMismatchError).parameter).toBe('0.weight');
      expect((error as DdpParameterMismatchError).differingRank).toBe(1);
    }
    expect((errors[0] as Error).message).toBe(
      '[DistributedDataParallel] rank 0: ranks wrap different parameters: entry #0 is parameter 0.weight [3, 2] f32 on rank 0 but differs on rank 1',
    );
    expect((errors[1] as Error).message).toBe(
      '[DistributedDataParallel] rank 1: ranks wrap different parameters: entry #0 is parameter 0.weight [3, 2] f32 on rank 0 but differs on rank 1; this rank has parameter 0.weight [4, 2] f32',
    );
    // The forward reports it too.
    await expect(ddps[0]!.call(tensor([1, 2], { backend, shape: [1, 2] }))).rejects.toThrow(
      DdpParameterMismatchError,
    );
  });

  it('a wrapper used after its group aborted', async () => {
    const [group] = createLocalGroups(1);
    const ddp = new DistributedDataParallel<[Tensor], Tensor>(model(), { group: group! });
    await ddp.ready;
    group!.abort('lost the cluster');
    const error = await ddp
      .call(tensor([1, 2], { backend, shape: [1, 2] }))
      .catch((e: unknown) => e);
    expect(DdpGroupAbortedError.isInstance(error)).toBe(true);
    expect(DdpError.isInstance(error)).toBe(true);
    // It says why, though no op of the wrapper's saw the abort (CI once lost the cause this way:
    // a rank killed while its peer computed, shm-parity.test.ts).
    expect((error as Error).message).toBe(
      '[forward] rank 0: the process group was aborted: lost the cluster',
    );
  });
});

describe('allreduceAlwaysFp32', () => {
  for (const always of [false, true]) {
    it(`f16 gradients travel as ${always ? 'f32' : 'f16'}`, async () => {
      const [group] = createLocalGroups(1);
      const m = new Sequential(new Linear(2, 1, { backend, dtype: 'f16' }));
      const sent: string[] = [];
      const allReduce = group!.allReduce.bind(group!);
      group!.allReduce = (data, options) => {
        sent.push(data.constructor.name);
        return allReduce(data, options);
      };
      const ddp = new DistributedDataParallel<[Tensor], Tensor>(m, {
        group: group!,
        allreduceAlwaysFp32: always,
      });
      const x = tensor([1, 2], { backend, dtype: 'f16', shape: [1, 2] });
      await mseLoss(
        await ddp.call(x),
        tensor([1], { backend, dtype: 'f16', shape: [1, 1] }),
      ).backward();
      // The construction check (an Int32Array), then the gradients.
      expect(sent).toEqual(['Int32Array', always ? 'Float32Array' : 'Uint16Array']);
    });
  }
});

describe('Bucket', () => {
  it('retainAllreduceBuffers makes the gradients views of one flat tensor', async () => {
    const [group] = createLocalGroups(1);
    const m = model();
    const ddp = new DistributedDataParallel<[Tensor], Tensor>(m, {
      group: group!,
      retainAllreduceBuffers: true,
    });
    for (let i = 0; i < 2; i++) {
      await step(ddp);
      m.zeroGrad({ setToNone: true });
    }
    await step(ddp);
    const storages = new Set(m.parameters().map((p) => p.grad!.storage()));
    expect(storages.size).toBe(1);
  });

  it('reduces 16-bit gradients in an f32 buffer only with allreduceAlwaysFp32', () => {
    const [group] = createLocalGroups(1);
    const p = tensor([1, 2], { backend, dtype: 'f16' });
    expect(new Bucket(group!, [p], 'f16', 'f32').host).toBeInstanceOf(Float32Array);
    expect(new Bucket(group!, [p], 'f16', 'f16').host).toBeInstanceOf(Uint16Array);
  });
});

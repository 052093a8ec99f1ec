import { createLocalGroups } from '@webshard/collectives';
import {
  AdamW,
  cast,
  createCpuBackend,
  DTypeError,
  Linear,
  Module,
  sum,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { defaultPredivideFactor, resolveOptions } from './api.js';
import { FsdpConfigError } from './errors.js';
import { FullyShardedDataParallel } from './fully-sharded.js';
import { onLocalRanks } from './test-support/ranks.js';

describe('options', () => {
  it("default pre-divide factors are fairscale's", () => {
    expect([1, 2, 4, 8, 16, 6].map(defaultPredivideFactor)).toEqual([1, 2, 2, 4, 4, 4]);
  });

  it('rejects bad values with the option named', () => {
    const [group] = createLocalGroups(1);
    const bad: [Record<string, unknown>, RegExp][] = [
      [{ gradientPredivideFactor: 0 }, /gradientPredivideFactor must be a finite number > 0/],
      [{ limitAllGathers: 1.5 }, /limitAllGathers must be an integer >= 0/],
      [{ bucketCapMb: -1 }, /bucketCapMb must be a finite number >= 0/],
      [{ computeDtype: 'f16' }, /computeDtype needs mixedPrecision: true/],
      [{ mixedPrecision: true, computeDtype: 'f64' }, /computeDtype must be 'f16' or 'bf16'/],
      [{ moveGradsToCpu: true }, /moveGradsToCpu \(true\) must equal moveParamsToCpu \(false\)/],
    ];
    for (const [options, message] of bad) {
      expect(() => resolveOptions({ group: group!, ...options })).toThrow(message);
      expect(() => resolveOptions({ group: group!, ...options })).toThrow(FsdpConfigError);
    }
    expect(() => resolveOptions({} as never)).toThrow('options.group must be a ProcessGroup');
  });
});

describe('gradientPredivideFactor', () => {
  /**
   * Rank 0's shard gradient of w in loss = sum(w * x), x = 30000 on each of 4 ranks, computed in
   * f16: each rank's gradient fits f16 (max 65504), their sum of 120000 does not.
   */
  async function reducedGradient(factor: number): Promise<number> {
    const [grad] = await onLocalRanks(4, async (group, backend) => {
      const layer = new Linear(1, 1, { backend, bias: false });
      const model = new FullyShardedDataParallel(layer, {
        group,
        mixedPrecision: true,
        gradientPredivideFactor: factor,
      });
      const y = await model.call(tensor([[30000]], { backend }));
      const loss = sum(y);
      await loss.backward();
      return (await model.parameters()[0]!.grad!.read())[0]!;
    });
    return grad!;
  }

  it('keeps the 16-bit sum over 4 ranks in range: pre-divided it is the mean, not inf', async () => {
    expect(await reducedGradient(4)).toBe(30000);
    expect(await reducedGradient(1)).toBe(Number.POSITIVE_INFINITY);
  });
});

class TakesInput extends Module<[Tensor], Tensor> {
  readonly fc: Linear;
  constructor() {
    super();
    this.fc = this.registerModule('fc', new Linear(2, 1, { backend: createCpuBackend() }));
  }
  forward(x: Tensor): Tensor {
    return this.fc.call(x);
  }
}

describe('inputs and buffers', () => {
  it('forceInputToFp32 casts floating inputs of the root to f32', async () => {
    await onLocalRanks(1, async (group) => {
      const plain = new FullyShardedDataParallel(new TakesInput(), { group });
      const forced = new FullyShardedDataParallel(new TakesInput(), {
        group,
        forceInputToFp32: true,
      });
      const input = (model: FullyShardedDataParallel<[Tensor], Tensor>) =>
        cast(tensor([[1, 2]], { backend: (model.module as TakesInput).fc.bias!.backend }), 'f16');
      await expect(plain.call(input(plain))).rejects.toThrow(DTypeError);
      const y = await forced.call(input(forced));
      expect(y.dtype).toBe('f32');
    });
  });

  it('mixed precision casts floating buffers to bufferDtype (default: the compute dtype)', async () => {
    class WithBuffer extends TakesInput {
      constructor() {
        super();
        this.registerBuffer('scale', tensor([2], { backend: this.fc.bias!.backend }));
      }
    }
    await onLocalRanks(1, async (group) => {
      const byDefault = new FullyShardedDataParallel(new WithBuffer(), {
        group,
        mixedPrecision: true,
      });
      const kept = new FullyShardedDataParallel(new WithBuffer(), {
        group,
        mixedPrecision: true,
        bufferDtype: 'f32',
      });
      for (const [model, dtype] of [
        [byDefault, 'f16'],
        [kept, 'f32'],
      ] as const) {
        const inner = model.module as WithBuffer;
        const x = tensor([[1, 2]], { backend: inner.getBuffer('scale').backend });
        await model.call(x);
        expect(inner.getBuffer('scale').dtype).toBe(dtype);
      }
      void AdamW;
    });
  });
});

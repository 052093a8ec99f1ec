import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import type { Backend } from '../backend/backend.js';
import type { DType } from '../dtype.js';
import {
  add,
  crossEntropy,
  gelu,
  layerNorm,
  linear,
  matmul,
  mul,
  softmax,
  tensor,
} from '../ops/index.js';
import type { Tensor } from '../tensor.js';
import { describeBackends } from '../testing/describe-backends.js';
import { expectClose, toleranceFor } from '../testing/tolerance.js';
import { autocast } from './autocast.js';

/**
 * [Note: autocast parity with PyTorch]
 * `__fixtures__/make_autocast_fixtures.py` runs a small block (layer norm, linear, GELU, linear,
 * softmax(h h^T / sqrt(d)) v with v a layer norm of the 16-bit h, an f32 + 16-bit residual, a linear head, cross entropy) under
 * PyTorch 2.13's `torch.autocast('cpu')` in bf16 and f16, and under PyTorch's CUDA lists applied
 * by hand (no CUDA device there: the casts are the script's, the kernels PyTorch's). This test
 * runs the same block under `autocast` with `deviceType` 'cpu' and 'cuda' on each backend: every
 * intermediate must have PyTorch's dtype exactly, and its values must agree within the 16-bit
 * format's rounding, compounded over the ops before it (webshard rounds a linear's matmul before
 * adding the bias, PyTorch's fused kernels once). The f32 parameters' gradients, which flowed back
 * through the 16-bit casts, must be f32 and agree within a few roundings of each gradient's
 * largest element.
 */

interface Stored {
  readonly shape: number[];
  readonly values: number[];
}
interface Case {
  readonly outputs: Record<string, Stored & { readonly dtype: DType }>;
  readonly grads: Record<string, number[]>;
}
interface Fixture {
  readonly torch: string;
  readonly params: Record<string, Stored>;
  readonly x: Stored;
  readonly targets: number[];
  readonly cases: Record<string, Case>;
}

const fixture = JSON.parse(
  readFileSync(
    join(dirname(fileURLToPath(import.meta.url)), '__fixtures__', 'autocast-reference.json'),
    'utf8',
  ),
) as Fixture;

function block(backend: Backend, params: Record<string, Tensor>): Record<string, Tensor> {
  const x = tensor(fixture.x.values, { backend, shape: fixture.x.shape });
  const targets = tensor(fixture.targets, { backend, dtype: 'i32' });
  const p = (name: string): Tensor => params[name]!;
  const out: Record<string, Tensor> = {};
  out.ln = layerNorm(x, { weight: p('ln.weight'), bias: p('ln.bias') });
  out.fc1 = linear(out.ln, p('fc1.weight'), p('fc1.bias'));
  out.gelu = gelu(out.fc1);
  out.fc2 = linear(out.gelu, p('fc2.weight'), p('fc2.bias'));
  out.scores = mul(matmul(out.fc2, out.fc2, { transposeB: true }), 1 / Math.sqrt(8));
  out.att = softmax(out.scores);
  out.ln2 = layerNorm(out.fc2, { weight: p('ln2.weight'), bias: p('ln2.bias') });
  out.mixed = matmul(out.att, out.ln2);
  out.residual = add(x, out.mixed);
  out.logits = linear(out.residual, p('head.weight'), p('head.bias'));
  out.loss = crossEntropy(out.logits, targets);
  return out;
}

/**
 * Units of the 16-bit format's rounding allowed (`toleranceFor`), compounded over the block's
 * ops: for values, relative to the block's largest (worst seen, bf16: 0.012 at 2.25, f16: 0.002);
 * for gradients, which pass back through more 16-bit ops, relative to each gradient's largest
 * element (worst seen: 2.7 % in bf16, 0.39 % in f16).
 */
const ROUNDINGS = 2;
const GRADIENT_ROUNDINGS = 4;

describeBackends('autocast against PyTorch', (ctx) => {
  for (const [name, expected] of Object.entries(fixture.cases)) {
    const [deviceType, dtype] = name.split('-') as ['cuda' | 'cpu', 'bf16' | 'f16'];
    it(`${name}: PyTorch ${fixture.torch}'s dtypes, values and f32 gradients`, async () => {
      const { backend } = ctx;
      const params: Record<string, Tensor> = {};
      for (const [key, stored] of Object.entries(fixture.params)) {
        params[key] = tensor(stored.values, { backend, shape: stored.shape });
        params[key].requiresGrad = true;
      }
      const out = autocast({ deviceType, dtype }, () => block(backend, params));
      const low = toleranceFor(dtype);
      for (const [key, want] of Object.entries(expected.outputs)) {
        const got = out[key]!;
        expect(`${key}: ${got.dtype}`).toBe(`${key}: ${want.dtype}`);
        expect(got.shape).toEqual(want.shape);
        const values = [...(await got.read())];
        const scale = Math.max(1, ...want.values.map(Math.abs));
        expectClose(values, want.values, {
          rtol: ROUNDINGS * low.rtol,
          atol: ROUNDINGS * low.atol * scale,
        });
      }
      await out.loss!.backward();
      for (const [key, want] of Object.entries(expected.grads)) {
        const grad = params[key]!.grad!;
        expect(grad.dtype).toBe('f32');
        const values = [...(await grad.read())];
        const scale = Math.max(...want.map(Math.abs));
        expectClose(values, want, {
          rtol: GRADIENT_ROUNDINGS * low.rtol,
          atol: GRADIENT_ROUNDINGS * low.rtol * scale,
        });
      }
    });
  }
});

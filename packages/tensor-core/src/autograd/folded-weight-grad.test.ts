import { expect, it } from 'vitest';
import { matmul, mul, sum } from '../ops/index.js';
import { Tensor } from '../tensor.js';
import { describeBackends } from '../testing/describe-backends.js';

/**
 * [Note: folded weight gradient] in folded-weight-grad.ts: a 2-D weight's gradient under a batched input is
 * one matmul over the folded [B*T, .] rows, so backward never holds a [B, C, V] intermediate.
 */
const [B, T, C, V] = [4, 8, 32, 256];

function randomValues(n: number, seed: number): Float32Array {
  let s = seed >>> 0 || 1;
  return Float32Array.from({ length: n }, () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return ((s >>> 0) / 2 ** 32) * 2 - 1;
  });
}

/** dW[c, v] = sum over (b, t) of x[b, t, c] * g[b, t, v], in f64 (g the weights of the loss). */
function referenceGrad(x: Float32Array, g: Float32Array, transposed: boolean): Float64Array {
  const out = new Float64Array(C * V);
  for (let r = 0; r < B * T; r++) {
    for (let c = 0; c < C; c++) {
      const xv = x[r * C + c]!;
      for (let v = 0; v < V; v++) {
        out[transposed ? v * C + c : c * V + v]! += xv * g[r * V + v]!;
      }
    }
  }
  return out;
}

// The WebGPU suite is skipped only where no WebGPU adapter is likely (no `webgpu` package, no
// Vulkan driver, no SwiftShader: testing/describe-backends.ts prints which); CI sets
// WEBSHARD_REQUIRE_WEBGPU=1, which turns that skip into an error, so CI always runs it.
describeBackends('linear weight gradient over [B, T, C] (folded)', (ctx) => {
  for (const transposed of [false, true]) {
    it(`is one matmul: no [B, C, V] buffer in peak memory, values match (transposeB ${transposed})`, async () => {
      const seed = (Math.random() * 2 ** 31) >>> 0;
      console.log(`folded-weight-grad seed ${seed}`);
      const own = ctx.backend;
      const xv = randomValues(B * T * C, seed);
      const wv = randomValues(C * V, seed + 1);
      const gv = randomValues(B * T * V, seed + 2);
      const x = Tensor.empty(own, [B, T, C]).write(xv);
      const w = Tensor.empty(own, transposed ? [V, C] : [C, V]).write(wv);
      w.requiresGrad = true;
      const g = Tensor.empty(own, [B, T, V]).write(gv);
      const loss = sum(mul(matmul(x, w, { transposeB: transposed }), g));
      own.resetPeakMemoryStats();
      const before = own.memoryStats().allocated;
      await loss.backward();
      const peak = own.memoryStats().peakAllocated - before;
      // Backward holds d(out) = g's copy [B, T, V] and dW [C, V]; the old batched path added a
      // [B, C, V] product (4x dW here) before summing it.
      const bytes = 4;
      expect(peak).toBeLessThan(B * C * V * bytes);
      expect(peak).toBeGreaterThanOrEqual(C * V * bytes);
      const got = await w.grad!.read();
      const want = referenceGrad(xv, gv, transposed);
      let worst = 0;
      for (let i = 0; i < want.length; i++) {
        worst = Math.max(worst, Math.abs(got[i]! - want[i]!) / (1 + Math.abs(want[i]!)));
      }
      expect(worst).toBeLessThan(1e-5);
      for (const t of [x, w, g, loss, w.grad!]) t.free();
    });
  }
});

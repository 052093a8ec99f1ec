import { readFileSync } from 'node:fs';
import wabtInit from 'wabt';
import { describe, expect, it } from 'vitest';
import { seededValues } from '../../testing/reference.js';
import { matmulScratchBytes, matmulTile, matmulWasmBase64 } from './matmul-wasm.generated.js';
import type { MatmulExports } from './matmul-wasm.js';
import {
  assembleMatmul,
  MATMUL_DEFAULTS,
  type MatmulWatOptions,
  matmulWat,
} from './matmul-wat.mjs';

interface Module {
  exports: MatmulExports;
  mr: number;
  nr: number;
  scratch: number;
}

const wabt = await wabtInit();

function assemble(options: MatmulWatOptions): Module {
  const { bytes, mr, nr, scratchBytes } = assembleMatmul(wabt, options);
  const instance = new WebAssembly.Instance(new WebAssembly.Module(bytes), {});
  return { exports: instance.exports as unknown as MatmulExports, mr, nr, scratch: scratchBytes };
}

function shipped(): Module {
  const bytes = Uint8Array.from(atob(matmulWasmBase64.simd), (ch) => ch.charCodeAt(0));
  const instance = new WebAssembly.Instance(new WebAssembly.Module(bytes), {});
  return {
    exports: instance.exports as unknown as MatmulExports,
    mr: matmulTile.rows,
    nr: matmulTile.columns,
    scratch: matmulScratchBytes,
  };
}

/** C's bits from packing A [m, k] (or [k, m]) and B [k, n] (or [n, k]) and running gemm. */
function product(
  mod: Module,
  a: Float32Array,
  b: Float32Array,
  [m, k, n]: [number, number, number],
  transposeA: boolean,
  transposeB: boolean,
): Uint32Array {
  const { memory, pack, gemm } = mod.exports;
  const aRaw = mod.scratch;
  const bRaw = aRaw + m * k * 4;
  const aPack = bRaw + k * n * 4;
  const bPack = aPack + Math.ceil(m / mod.mr) * mod.mr * k * 4;
  const c = bPack + Math.ceil(n / mod.nr) * mod.nr * k * 4;
  const need = c + m * n * 4;
  if (memory.buffer.byteLength < need)
    memory.grow(Math.ceil((need - memory.buffer.byteLength) / 65536));
  new Float32Array(memory.buffer, aRaw, m * k).set(a);
  new Float32Array(memory.buffer, bRaw, k * n).set(b);
  pack(aRaw, aPack, m, k, mod.mr, transposeA ? 1 : k, transposeA ? m : 1);
  pack(bRaw, bPack, n, k, mod.nr, transposeB ? k : 1, transposeB ? 1 : n);
  gemm(aPack, bPack, c, m, k, n, 0);
  return new Uint32Array(memory.buffer.slice(c, c + m * n * 4));
}

// Odd sizes on every axis: partial panels, k past the 256-deep blocks and not a multiple of 4
// (the transposing pack's remainder), rows past the 64-row blocks; and for the copying pack (A
// transposed, B as stored) groups of 16 lanes followed by a full panel and a partial one (m = 70:
// 4 groups, a panel of 4, 2 lanes; n = 41: 2 groups, a panel of 8, 1 lane).
const SHAPES: [number, number, number][] = [
  [1, 1, 1],
  [5, 7, 9],
  [17, 33, 31],
  [67, 65, 5],
  [70, 513, 19],
  [131, 262, 41],
  [8, 300, 16],
];

describe('the WASM matmul module generator', () => {
  it('wrote the checked-in matmul.wat from its defaults (run generate-matmul-wasm.mjs after a change)', () => {
    const checkedIn = readFileSync(new URL('./matmul.wat', import.meta.url), 'utf8');
    expect(checkedIn).toBe(matmulWat(MATMUL_DEFAULTS).wat);
    expect(matmulTile).toEqual({ rows: MATMUL_DEFAULTS.mr, columns: MATMUL_DEFAULTS.nr });
  });

  // The module before the tile loop lost its 4x unroll and pack its SIMD paths, and tiles and
  // row blocks the bench compares: every one sums each element by the same k blocks, in k order
  // within them, so the bits agree (the k block is part of the numbers: see the next test).
  const variants: [string, MatmulWatOptions][] = [
    ['the module as it was (k unrolled 4, scalar pack)', { unroll: 4, simdPack: false }],
    ['a 2x16 tile, row blocks of 8', { mr: 2, nr: 16, mc: 8 }],
    ['a 6x8 tile', { mr: 6, mc: 60 }],
    ['splats by shuffles', { splat: 'shuffle' }],
  ];
  for (const [name, options] of variants) {
    it(`gives the shipped module's bits on odd shapes and every transpose: ${name}`, () => {
      const ours = shipped();
      const other = assemble(options);
      for (const [m, k, n] of SHAPES) {
        const a = Float32Array.from(seededValues(m * k, m + 3 * k, -1, 1));
        const b = Float32Array.from(seededValues(k * n, n + 5 * k, -1, 1));
        for (const transposeA of [false, true]) {
          for (const transposeB of [false, true]) {
            const got = product(ours, a, b, [m, k, n], transposeA, transposeB);
            const expected = product(other, a, b, [m, k, n], transposeA, transposeB);
            expect(got, `${m}x${k}x${n} ${transposeA} ${transposeB}`).toEqual(expected);
          }
        }
      }
    });
  }
});

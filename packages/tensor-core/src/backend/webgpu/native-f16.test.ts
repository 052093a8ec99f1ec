import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { bytesPerElement, type DType, type HostArray } from '../../dtype.js';
import { f16BitsToF32 } from '../../dtype-convert.js';
import { ArgumentError } from '../../errors.js';
import { createCpuBackend } from '../../runtime.js';
import { webGpuTestsEnabled } from '../../testing/backends.js';
import type { Backend, KernelTensor } from '../backend.js';
import { copyLaunch, scatterAddLaunch } from './kernels.js';
import { elementwiseProgram } from './program.js';
import { isCpuAdapter } from './gpu-runtime.js';
import { createWebGpuBackend, f16Layout, type WebGpuBackend } from './webgpu-backend.js';
import { withTarget } from './wgsl.js';

/**
 * Native f16 storage (see [Note: native f16 storage]) runs where the adapter has `shader-f16`:
 * lavapipe from Mesa >= 23 (CI installs it), real GPUs. `WEBSHARD_WEBGPU_F16=1` says such an
 * adapter is the default one here; the whole op suite also runs on it through `describeBackends`
 * (`[webgpu-f16]`). These tests pin what the two layouts must share: the same bits in memory and
 * the same bits out of every kernel that stores f16 in its own way.
 */
const nativeEnabled = process.env.WEBSHARD_WEBGPU_F16 === '1' && webGpuTestsEnabled();
const cpu = createCpuBackend();

function make(backend: Backend, shape: number[], dtype: DType, offset = 0): KernelTensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return { storage: backend.allocate((n + offset) * bytesPerElement(dtype)), offset, dtype, shape };
}

function put(backend: Backend, data: HostArray, shape: number[], dtype: DType, offset = 0) {
  const t = make(backend, shape, dtype, offset);
  backend.write(t, data);
  return t;
}

/** A deterministic spread of f16 bit patterns: every exponent, both signs, NaN and infinities. */
function f16Bits(n: number, seed: number): Uint16Array {
  let s = seed >>> 0;
  return Uint16Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s >>> 16;
  });
}

/** Finite f16 values of moderate size (no overflow in sums, softmax or layer norm). */
function f16Values(n: number, seed: number): Uint16Array {
  return f16Bits(n, seed).map((b) => (b & 0x8000) | (0x2c00 + (b % 0x1400)));
}

describe('WGSL generated for native f16 storage', () => {
  const program = elementwiseProgram({
    name: 'neg',
    key: 'neg',
    inputs: [{ name: 'x', dtype: 'f16' }],
    out: 'f16',
    body: 'fn outv(i: u32) -> f32 { return -ld_x(prm[2] + i); }',
  });

  it('declares array<f16> and stores elements, not packed words, 8 an invocation', () => {
    const native = withTarget({ nativeF16: true }, () => program.wgsl(['f16', 'f16']));
    expect(native).toContain('var<storage, read> x: array<f16>;');
    expect(native).toContain('var<storage, read_write> out: array<f16>;');
    expect(native).toContain('out[prm[0] + i] = bitcast<vec2<f16>>(f32_to_f16(f32(outv(i)))).x;');
    expect(native).not.toContain('out[w]');
    const packed = withTarget({ nativeF16: false }, () => program.wgsl(['f16', 'f16']));
    expect(packed).toContain('var<storage, read_write> out: array<u32>;');
    // Natively 8 elements an invocation (workgroups of 64 cover 512); packed, one word each: 5
    // elements at offset 1 span 3 words, 1536 span 769.
    const params = Uint32Array.of(1, 5);
    expect(withTarget({ nativeF16: true }, () => program.dispatch([5], params))).toEqual([1, 1, 1]);
    const big = Uint32Array.of(1, 512 * 3);
    expect(withTarget({ nativeF16: true }, () => program.dispatch([512 * 3], big))).toEqual([
      3, 1, 1,
    ]);
    expect(withTarget({ nativeF16: false }, () => program.dispatch([512 * 3], big))).toEqual([
      13, 1, 1,
    ]);
  });

  it('writes scattered f16 elements with plain stores natively and with atomics when packed', () => {
    const dense = (dtype: DType, size: number) => ({
      storage: { buffer: null, byteSize: 1024 },
      offset: 0,
      dtype,
      size,
    });
    const launch = scatterAddLaunch(dense('f16', 8), dense('i32', 2), dense('f16', 12), 2, 3, 4);
    const native = withTarget({ nativeF16: true }, () => launch.program.wgsl(launch.dtypes));
    expect(native).toContain('out: array<f16>;');
    expect(native).not.toMatch(/atomicAnd|atomicOr|atomicLoad/);
    const packed = withTarget({ nativeF16: false }, () => launch.program.wgsl(launch.dtypes));
    expect(packed).toContain('array<atomic<u32>>');
    const copy = copyLaunch(dense('f16', 5), { ...dense('f16', 5), offset: 3 });
    expect(withTarget({ nativeF16: true }, () => copy.program.wgsl(copy.dtypes))).toContain(
      'array<f16>',
    );
  });
});

describe('the f16 layout a backend chooses', () => {
  it("takes 'native' and 'packed' as given, and 'auto' as native on GPUs with shader-f16 only", () => {
    const cases: [Parameters<typeof f16Layout>, 'native' | 'packed'][] = [
      [['auto', true, false], 'native'],
      [['auto', true, true], 'packed'],
      [['auto', false, false], 'packed'],
      [['native', true, true], 'native'],
      [['packed', true, false], 'packed'],
      [['packed', false, true], 'packed'],
    ];
    for (const [args, want] of cases) expect(f16Layout(...args), args.join(',')).toBe(want);
  });

  it('refuses a WEBSHARD_F16 that is not a layout, before looking for an adapter', async () => {
    vi.stubEnv('WEBSHARD_F16', 'half');
    try {
      const error = await createWebGpuBackend().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ArgumentError);
      expect((error as Error).message).toBe(
        '[createWebGpuBackend] WEBSHARD_F16=half is not one of auto, native, packed',
      );
    } finally {
      vi.unstubAllEnvs();
    }
  });
});

describe.runIf(nativeEnabled)('native f16 storage on an adapter with shader-f16', () => {
  let native: WebGpuBackend;
  let packed: WebGpuBackend;
  beforeAll(async () => {
    native = await createWebGpuBackend({ f16: 'native' });
    packed = await createWebGpuBackend({ f16: 'packed' });
  });
  afterAll(() => {
    native?.dispose();
    packed?.dispose();
  });

  it("reports its layout; 'auto' is native on a GPU with the feature, packed on a CPU adapter", async () => {
    expect(native.capabilities).toMatchObject({ shaderF16: true, f16Storage: 'native' });
    expect(packed.capabilities).toMatchObject({ shaderF16: true, f16Storage: 'packed' });
    const auto = await createWebGpuBackend({ f16: 'auto' });
    expect(auto.capabilities.f16Storage).toBe(isCpuAdapter(auto.adapter) ? 'packed' : 'native');
    auto.dispose();
  });

  it('keeps all 65536 f16 bit patterns through a copy to an odd offset and a cast to f32', async () => {
    const all = Uint16Array.from({ length: 65536 }, (_, i) => i);
    const src = put(native, all, [65536], 'f16');
    const moved = make(native, [65536], 'f16', 3);
    native.copy(src, moved);
    const wide = make(native, [65536], 'f32');
    native.cast(moved, wide);
    expect(await native.read(moved)).toEqual(all);
    const want = new Uint32Array(Float32Array.from(all, (b) => f16BitsToF32(b)).buffer);
    const got = new Uint32Array(((await native.read(wide)) as Float32Array).buffer);
    // Every value bit for bit; NaN stays NaN, its payload unspecified ([Note: cast semantics]).
    const isNaNBits = (b: number) => (b & 0x7f800000) === 0x7f800000 && (b & 0x7fffff) !== 0;
    const mismatches = [...want.keys()].filter((i) =>
      isNaNBits(want[i]!) ? !isNaNBits(got[i]!) : got[i] !== want[i],
    );
    expect(mismatches).toEqual([]);
  });

  it('rounds f32 to f16 bit-identically to the CPU, subnormals and ties included', async () => {
    const bits = new Uint32Array(1 << 14);
    let s = 12345;
    for (let i = 0; i < bits.length; i++) {
      s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
      // Exponents around f16's range, so subnormals, ties and overflow all occur.
      bits[i] = (s & 0x807fffff) | ((((s >>> 23) % 48) + 96) << 23);
    }
    const values = new Float32Array(bits.buffer);
    const run = async (backend: Backend) => {
      const x = put(backend, values, [values.length], 'f32');
      const h = make(backend, [values.length], 'f16', 1);
      backend.cast(x, h);
      return backend.read(h);
    };
    expect(await run(native)).toEqual(await run(cpu));
  });

  it('gives the same bits as packed storage in kernels that store f16 their own way, and copies as the CPU does', async () => {
    const rows = 7;
    const cols = 33;
    const data = f16Values(rows * cols, 99);
    const ids = Int32Array.of(4, 0, 4, 2, 6, 4, 1);
    const run = async (backend: Backend) => {
      const x = put(backend, data, [rows, cols], 'f16', 1);
      const out: HostArray[] = [];
      const soft = make(backend, [rows, cols], 'f16', 1);
      backend.softmax(x, soft, false);
      out.push(await backend.read(soft));
      const norm = make(backend, [rows, cols], 'f16', 3);
      const w = put(backend, f16Values(cols, 5), [cols], 'f16');
      const b = put(backend, f16Values(cols, 6), [cols], 'f16');
      const mean = make(backend, [rows], 'f32');
      const rstd = make(backend, [rows], 'f32');
      backend.layerNorm(x, w, b, 1e-5, norm, mean, rstd);
      out.push(await backend.read(norm));
      // Transpose into an odd offset: the scattered-store copy.
      const t = make(backend, [cols, rows], 'f16', 1);
      backend.copyStrided(
        { storage: x.storage, offset: x.offset, dtype: 'f16', strides: [1, cols] },
        { storage: t.storage, offset: t.offset, dtype: 'f16', strides: [rows, 1] },
        [cols, rows],
      );
      const transposed = await backend.read(t);
      out.push(transposed);
      const acc = put(backend, f16Values(7 * cols, 7), [7, cols], 'f16', 1);
      backend.scatterAdd(x, put(backend, ids, [rows], 'i32'), acc);
      out.push(await backend.read(acc));
      const sum = make(backend, [rows, cols], 'f16', 2);
      backend.binary('add', x, soft, sum);
      out.push(await backend.read(sum));
      const red = make(backend, [rows], 'f16', 1);
      backend.reduce('sum', x, 1, red);
      out.push(await backend.read(red));
      return { out, transposed };
    };
    // The f32 math (exp, rsqrt, sums) is the adapter's, so the CPU agrees bit for bit only on the
    // copy; the two layouts on one adapter must agree everywhere.
    const viaNative = await run(native);
    expect(viaNative.out).toEqual((await run(packed)).out);
    expect(viaNative.transposed).toEqual((await run(cpu)).transposed);
  });
});

const swiftShader = '/usr/lib/chromium/vk_swiftshader_icd.json';

describe.runIf(webGpuTestsEnabled() && existsSync(swiftShader))(
  'native f16 on an adapter without shader-f16',
  () => {
    // In a child process: finding SwiftShader sets VK_ICD_FILENAMES for the rest of the process.
    it("refuses f16: 'native' with a BackendError naming the adapter; 'auto' stays packed", async () => {
      const backend = fileURLToPath(new URL('./webgpu-backend.ts', import.meta.url));
      const script = `const m = await import('${backend}');
const auto = await m.createWebGpuBackend({ adapter: 'SwiftShader', f16: 'auto' });
console.log('AUTO', auto.capabilities.shaderF16, auto.capabilities.f16Storage);
await m.createWebGpuBackend({ adapter: 'SwiftShader', f16: 'native' }).then(
  () => console.log('CREATED'),
  (e) => console.log(e.name + ': ' + e.message),
);
process.exit(0);`;
      const out = await new Promise<string>((resolve, reject) => {
        execFile(
          process.execPath,
          ['--conditions=@webshard/source', '--import', 'tsx', '--input-type=module', '-e', script],
          { timeout: 30_000 },
          (error, stdout) => (error ? reject(error) : resolve(stdout)),
        );
      });
      expect(out).toContain('AUTO false packed');
      expect(out).toMatch(
        /BackendError: \[createWebGpuBackend\] f16: 'native' needs the shader-f16 feature, which this adapter lacks \(.*SwiftShader.*\); use 'auto' or 'packed'/,
      );
    });
  },
);

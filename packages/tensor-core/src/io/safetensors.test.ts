import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Backend } from '../backend/backend.js';
import { CpuBackend } from '../backend/cpu/cpu-backend.js';
import type { DType, HostArray } from '../dtype.js';
import { FreedTensorError, OutOfMemoryError, WebshardError } from '../errors.js';
import { Tensor } from '../tensor.js';
import { decodeSafetensors, encodeSafetensors } from './safetensors.js';
import { loadSafetensors, readSafetensorsHeader, saveSafetensors } from './safetensors-file.js';
import { describeBackends } from '../testing/describe-backends.js';
import { SafetensorsError } from './safetensors-format.js';

const fixtures = join(import.meta.dirname, '__fixtures__');
let dir: string;
const backend = new CpuBackend();

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'webshard-safetensors-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function tensorOf(dtype: DType, shape: number[], raw: HostArray, on: Backend = backend): Tensor {
  const t = Tensor.empty(on, shape, dtype);
  on.write(t.kernel('test'), raw);
  return t;
}

function sample(on: Backend = backend): Record<string, Tensor> {
  const n = 37;
  const f32 = new Float32Array(n * 3).map((_, i) => Math.sin(i) * 1e3);
  const f16 = new Uint16Array(n).map((_, i) => (i * 2654435761) & 0xffff);
  const bf16 = new Uint16Array(n).map((_, i) => (i * 40503 + 7) & 0xffff);
  const i32 = new Int32Array(n).map((_, i) => (i * 2654435761) | 0);
  const f64 = new Float64Array(n).map((_, i) => Math.PI ** (i - 18));
  return {
    'layer.weight': tensorOf('f32', [n, 3], f32, on),
    half: tensorOf('f16', [n], f16, on),
    brain: tensorOf('bf16', [1, n], bf16, on),
    ids: tensorOf('i32', [n], i32, on),
    // f64 exists on the CPU backend only.
    ...(on.kind === 'cpu' ? { double: tensorOf('f64', [n], f64, on) } : {}),
    scalar: tensorOf('f32', [], new Float32Array([-0]), on),
    empty: tensorOf('f32', [0, 4], new Float32Array(0), on),
  };
}

async function expectSame(actual: Record<string, Tensor>, expected: Record<string, Tensor>) {
  expect(Object.keys(actual).sort()).toEqual(Object.keys(expected).sort());
  for (const [name, want] of Object.entries(expected)) {
    const got = actual[name]!;
    expect(got.dtype, name).toBe(want.dtype);
    expect(got.shape, name).toEqual(want.shape);
    expect(got.name).toBe(name);
    const [a, b] = [await got.readRaw(), await want.readRaw()];
    // Compare bits, so -0 and NaN payloads count.
    expect(new Uint8Array(a.buffer, a.byteOffset, a.byteLength)).toEqual(
      new Uint8Array(b.buffer, b.byteOffset, b.byteLength),
    );
  }
}

/** A file from a header object (or raw JSON text) and a data buffer, with an optional length. */
function fileBytes(header: unknown, dataBytes: number, headerLength?: bigint): Uint8Array {
  const text = new TextEncoder().encode(
    typeof header === 'string' ? header : JSON.stringify(header),
  );
  const out = new Uint8Array(8 + text.byteLength + dataBytes);
  new DataView(out.buffer).setBigUint64(0, headerLength ?? BigInt(text.byteLength), true);
  out.set(text, 8);
  return out;
}

describe('safetensors round trips', () => {
  it('saves and loads every dtype bit for bit, in chunks smaller than a tensor', async () => {
    const tensors = sample();
    const path = join(dir, 'round-trip.safetensors');
    await saveSafetensors(path, tensors, { format: 'pt', step: '12' }, { chunkBytes: 24 });
    const loaded = await loadSafetensors(path, { backend, chunkBytes: 16 });
    expect(loaded.metadata).toEqual({ format: 'pt', step: '12' });
    await expectSame(loaded.tensors, tensors);
    // No temporary file is left beside the checkpoint.
    expect((await readdir(dir)).filter((f) => f.startsWith('round-trip'))).toEqual([
      'round-trip.safetensors',
    ]);
  });

  it('encodes the same bytes as it saves, and decodes them back', async () => {
    const tensors = sample();
    const path = join(dir, 'same.safetensors');
    await saveSafetensors(path, tensors, { a: 'b' });
    const bytes = await encodeSafetensors(tensors, { a: 'b' });
    expect(bytes).toEqual(new Uint8Array(await readFile(path)));
    const decoded = decodeSafetensors(bytes, { backend });
    expect(decoded.metadata).toEqual({ a: 'b' });
    await expectSame(decoded.tensors, tensors);
    // Unaligned input (a copy at an odd offset) decodes the same.
    const shifted = new Uint8Array(bytes.byteLength + 1);
    shifted.set(bytes, 1);
    await expectSame(decodeSafetensors(shifted.subarray(1), { backend }).tensors, tensors);
  });

  it('pads the header to 8 bytes and orders data by element size, so every tensor is aligned', async () => {
    const bytes = await encodeSafetensors(sample());
    const length = Number(new DataView(bytes.buffer).getBigUint64(0, true));
    expect(length % 8).toBe(0);
    const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + length)));
    expect(header.double.data_offsets).toEqual([0, 37 * 8]);
    expect(header['layer.weight']).toEqual({
      dtype: 'F32',
      shape: [37, 3],
      data_offsets: [296, 296 + 37 * 3 * 4],
    });
    expect(header.half.dtype).toBe('F16');
    expect(header.brain.dtype).toBe('BF16');
    expect(header.ids.dtype).toBe('I32');
    for (const entry of Object.values(header) as { dtype: string; data_offsets: number[] }[]) {
      const size = { F64: 8, F32: 4, I32: 4, F16: 2, BF16: 2 }[entry.dtype]!;
      expect(entry.data_offsets[0]! % size).toBe(0);
    }
  });

  it('reads the header alone', async () => {
    const path = join(dir, 'header.safetensors');
    await saveSafetensors(path, sample(), { note: 'x' });
    const header = await readSafetensorsHeader(path);
    expect(header.metadata).toEqual({ note: 'x' });
    expect(header.tensors.get('brain')).toEqual({
      dtype: 'bf16',
      shape: [1, 37],
      // f64 first, then the 4-byte tensors in the given order, then the 2-byte ones.
      begin: 296 + 444 + 148 + 4 + 74,
      end: 296 + 444 + 148 + 4 + 74 + 74,
    });
    expect(header.dataBytes).toBe(296 + 444 + 4 + 148 + 74 + 74);
  });

  it('reads a file in PyTorch layout (written by make_fixtures.py) bit for bit', async () => {
    const reference = JSON.parse(await readFile(join(fixtures, 'io-reference.json'), 'utf8')) as {
      metadata: Record<string, string>;
      tensors: Record<
        string,
        { dtype: DType; shape: number[]; bits?: number[]; values?: (number | string)[] }
      >;
    };
    const { tensors, metadata } = await loadSafetensors(
      join(fixtures, 'io-reference.safetensors'),
      { backend },
    );
    expect(metadata).toEqual(reference.metadata);
    expect(Object.keys(tensors).sort()).toEqual(Object.keys(reference.tensors).sort());
    for (const [name, want] of Object.entries(reference.tensors)) {
      const got = tensors[name]!;
      expect([got.dtype, got.shape], name).toEqual([want.dtype, want.shape]);
      const raw = await got.readRaw();
      if (want.dtype === 'f32') expect([...new Uint32Array(raw.buffer)], name).toEqual(want.bits);
      else if (want.dtype === 'f64') expect([...raw], name).toEqual(want.values!.map(Number));
      else if (want.dtype === 'i32') expect([...raw], name).toEqual(want.values);
      else expect([...raw], name).toEqual(want.bits);
    }
    expect(await tensors.bf16!.read()).toEqual(
      new Float32Array([
        0, -0, 3.3895313892515355e38, 1.0010069081221042e-38, 0.10009765625, -1.5, 256, 2.71875,
      ]),
    );
  });
});

describeBackends('safetensors streams through device storage', (ctx) => {
  it('loads and saves in chunks that split tensors at odd 16-bit element offsets', async () => {
    // 6-byte chunks: three f16 elements, so chunk windows start at element offsets 0, 3, 6, ...
    // (byte offsets 0, 6, 12: not 4-byte aligned, which WebGPU copies must handle).
    const tensors = sample(ctx.backend);
    const path = join(dir, `device-${ctx.kind}.safetensors`);
    await saveSafetensors(path, tensors, undefined, { chunkBytes: 6 });
    const loaded = await loadSafetensors(path, { backend: ctx.backend, chunkBytes: 6 });
    await expectSame(loaded.tensors, tensors);
    const reloaded = decodeSafetensors(await encodeSafetensors(loaded.tensors), {
      backend: ctx.backend,
    });
    await expectSame(reloaded.tensors, tensors);
  });
});

describe('safetensors rejects bad files', () => {
  const f32 = (begin: number, end: number, shape = [(end - begin) / 4]) => ({
    dtype: 'F32',
    shape,
    data_offsets: [begin, end],
  });
  const cases: [string, Uint8Array, string][] = [
    [
      'a file shorter than 8 bytes',
      new Uint8Array(5),
      'truncated: 5 bytes is shorter than the 8-byte header length',
    ],
    [
      'a header length past the end',
      fileBytes({ a: f32(0, 4) }, 4, 1000n),
      'header length 1000 runs past the end of the file (66 bytes)',
    ],
    [
      'a huge header length',
      fileBytes({}, 0, 1n << 60n),
      'header length 1152921504606846976 is larger than the 100000000-byte limit',
    ],
    ['bad JSON', fileBytes('{"a": [', 0), 'header is not valid UTF-8 JSON: SyntaxError'],
    ['a JSON array', fileBytes('[1, 2]', 0), 'header is not a JSON object'],
    [
      'an unknown dtype',
      fileBytes({ a: { dtype: 'I8', shape: [4], data_offsets: [0, 4] } }, 4),
      "tensor 'a' has unsupported dtype I8 (supported: F32, F16, BF16, I32, F64)",
    ],
    [
      'a bad shape',
      fileBytes({ a: { dtype: 'F32', shape: [-1], data_offsets: [0, 4] } }, 4),
      "tensor 'a' shape [-1] is not a list of non-negative integers",
    ],
    [
      'reversed offsets',
      fileBytes({ a: f32(8, 4, [1]) }, 8),
      "tensor 'a' data_offsets [8,4] are not [begin, end] with 0 <= begin <= end",
    ],
    [
      'a size that disagrees with the shape',
      fileBytes({ a: f32(0, 12, [2, 2]) }, 12),
      "tensor 'a' of shape [2, 2] F32 needs 16 bytes but data_offsets [0, 12] hold 12",
    ],
    [
      'overlapping tensors',
      fileBytes({ a: f32(0, 8), b: f32(4, 12) }, 12),
      "tensor 'b' data_offsets [4, 12] overlap the previous tensor, which ends at 8",
    ],
    [
      'offsets out of range',
      fileBytes({ a: f32(0, 8), b: f32(8, 16) }, 12),
      "tensor 'b' data_offsets [8, 16] are out of range of the 12-byte data buffer",
    ],
    [
      'a gap between tensors',
      fileBytes({ a: f32(0, 4), b: f32(8, 12) }, 12),
      "tensor 'b' starts at 8, leaving bytes [4, 8) of the data buffer uncovered",
    ],
    [
      'bytes after the last tensor',
      fileBytes({ a: f32(0, 4) }, 8),
      'tensors cover 4 bytes but the data buffer has 8',
    ],
    [
      'non-string metadata',
      fileBytes({ __metadata__: { step: 3 } }, 0),
      '__metadata__.step is not a string',
    ],
  ];

  it.each(cases)('%s: from a file, allocating nothing', async (_, bytes, reason) => {
    const path = join(dir, 'bad.safetensors');
    await writeFile(path, bytes);
    const before = backend.memoryStats().allocations;
    const error = await loadSafetensors(path, { backend }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SafetensorsError);
    expect(WebshardError.isInstance(error)).toBe(true);
    const e = error as SafetensorsError;
    expect(e.file).toBe(path);
    expect(e.reason.startsWith(reason)).toBe(true);
    expect(e.message.startsWith(`[loadSafetensors] ${path}: ${reason}`)).toBe(true);
    expect(backend.memoryStats().allocations).toBe(before);
    await expect(readSafetensorsHeader(path)).rejects.toThrow(
      `[readSafetensorsHeader] ${path}: ${reason}`,
    );
  });

  it.each(cases)('%s: from bytes', (_, bytes, reason) => {
    expect(() => decodeSafetensors(bytes, { backend })).toThrow(
      `[decodeSafetensors] <memory>: ${reason}`,
    );
  });

  it('frees what it allocated when a later tensor fails, and returns nothing', async () => {
    const path = join(dir, 'oom.safetensors');
    const big = {
      a: tensorOf('f32', [1024], new Float32Array(1024).fill(1)),
      b: tensorOf('f32', [4096], new Float32Array(4096).fill(2)),
    };
    await saveSafetensors(path, big);
    const limited = new CpuBackend({ memoryLimit: 8192 });
    await expect(loadSafetensors(path, { backend: limited })).rejects.toBeInstanceOf(
      OutOfMemoryError,
    );
    expect(limited.memoryStats().allocated).toBe(0);
  });

  it('names a missing file', async () => {
    const path = join(dir, 'missing.safetensors');
    await expect(loadSafetensors(path, { backend })).rejects.toThrow(
      `[loadSafetensors] ${path}: cannot open: ENOENT`,
    );
  });

  it('refuses a reserved name and a freed tensor without leaving a file', async () => {
    const path = join(dir, 'refused.safetensors');
    const t = tensorOf('f32', [2], new Float32Array([1, 2]));
    await expect(saveSafetensors(path, { __metadata__: t })).rejects.toThrow(
      `[saveSafetensors] ${path}: '__metadata__' is reserved and cannot name a tensor`,
    );
    const freed = tensorOf('f32', [2], new Float32Array([1, 2]));
    freed.name = 'w';
    freed.free();
    await expect(saveSafetensors(path, { w: freed })).rejects.toBeInstanceOf(FreedTensorError);
    expect((await readdir(dir)).filter((f) => f.startsWith('refused'))).toEqual([]);
  });
});

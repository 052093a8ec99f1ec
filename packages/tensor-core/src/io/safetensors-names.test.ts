import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CpuBackend } from '../backend/cpu/cpu-backend.js';
import { Tensor } from '../tensor.js';
import { decodeSafetensors, encodeSafetensors } from './safetensors.js';
import { loadSafetensors, readSafetensorsHeader, saveSafetensors } from './safetensors-file.js';

/** Spelled through a constant: `x.__proto__` would read the prototype accessor. */
const PROTO = '__proto__';
const backend = new CpuBackend();
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'webshard-safetensors-names-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function f32(values: number[]): Tensor {
  const t = Tensor.empty(backend, [values.length], 'f32');
  backend.write(t.kernel('test'), new Float32Array(values));
  return t;
}

/** Tensors under names that a plain object would not keep as keys. */
function reserved(): Record<string, Tensor> {
  const out = Object.create(null) as Record<string, Tensor>;
  const entries: [string, Tensor][] = [
    ['__proto__', f32([1, 2])],
    ['constructor', f32([3])],
    ['toString', f32([4, 5, 6])],
    ['plain', f32([7])],
  ];
  for (const [name, t] of entries) out[name] = t;
  return out;
}

/** A hand-written file, as another writer would make it, with `__proto__` as a tensor name. */
function handWritten(): Uint8Array {
  const json =
    '{"__metadata__":{"__proto__":"meta"},"__proto__":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}';
  const text = new TextEncoder().encode(json);
  const out = new Uint8Array(8 + text.byteLength + 12);
  new DataView(out.buffer).setBigUint64(0, BigInt(text.byteLength), true);
  out.set(text, 8);
  out.set(new Uint8Array(new Float32Array([1.5, -2, 9]).buffer), 8 + text.byteLength);
  return out;
}

async function valuesOf(tensors: Record<string, Tensor>): Promise<Record<string, number[]>> {
  const out: Record<string, number[]> = {};
  for (const [name, t] of Object.entries(tensors)) {
    Object.defineProperty(out, name, { value: [...(await t.read())], enumerable: true });
  }
  return out;
}

function freeAll(tensors: Record<string, Tensor>): void {
  for (const t of Object.values(tensors)) t.free();
}

describe('safetensors names that are Object.prototype members are ordinary keys', () => {
  it('loads `__proto__` from a file as a tensor, kept and freeable (no leaked storage)', async () => {
    const before = backend.memoryStats().allocated;
    const { tensors, metadata } = decodeSafetensors(handWritten(), { backend });
    expect(Object.getPrototypeOf(tensors)).toBeNull();
    expect(Object.keys(tensors)).toEqual(['__proto__', 'b']);
    expect(tensors[PROTO]?.name).toBe('__proto__');
    expect(await valuesOf(tensors)).toEqual(
      JSON.parse('{"__proto__":[1.5,-2],"b":[9]}') as Record<string, number[]>,
    );
    expect(Object.keys(metadata)).toEqual(['__proto__']);
    expect(metadata[PROTO]).toBe('meta');
    freeAll(tensors);
    expect(backend.memoryStats().allocated).toBe(before);
  });

  it('saves and loads every such name bit for bit, from a file and from bytes', async () => {
    const path = join(dir, 'reserved.safetensors');
    const input = reserved();
    const meta = Object.create(null) as Record<string, string>;
    meta[PROTO] = 'kept';
    await saveSafetensors(path, input, meta);
    const header = await readSafetensorsHeader(path);
    expect([...header.tensors.keys()].sort()).toEqual([
      '__proto__',
      'constructor',
      'plain',
      'toString',
    ]);
    const before = backend.memoryStats().allocated;
    const loaded = await loadSafetensors(path, { backend });
    expect(await valuesOf(loaded.tensors)).toEqual(await valuesOf(input));
    expect(loaded.metadata[PROTO]).toBe('kept');
    freeAll(loaded.tensors);
    expect(backend.memoryStats().allocated).toBe(before);
    const decoded = decodeSafetensors(await encodeSafetensors(input, meta), { backend });
    expect(await valuesOf(decoded.tensors)).toEqual(await valuesOf(input));
    freeAll(decoded.tensors);
    freeAll(input);
  });
});

import type { DType } from '../../dtype.js';
import type { RawStorage } from '../backend.js';
import {
  CONVERT,
  declare,
  encode,
  errorDecl,
  fromBits,
  is16,
  linearIndex,
  loader,
  MATH,
  paramsDecl,
  rawLoader,
  storageType,
  valueType,
} from './wgsl.js';

/**
 * A compute program, as tfjs-backend-webgpu shapes it: WGSL generated per dtype, a cache key for
 * the compiled pipeline, and the workgroup counts for a launch shape.
 */
export interface Program {
  readonly name: string;
  /** Identifies the WGSL: programs with equal keys share one pipeline. */
  readonly key: string;
  readonly workgroupSize: readonly [number, number, number];
  /**
   * Workgroup counts for `shape` (invocations wanted per axis; element-wise programs read the
   * output's offset from `params[0]`). Called, like `wgsl`, under the backend's target
   * (`withTarget`).
   */
  dispatch(shape: readonly number[], params: Uint32Array): [number, number, number];
  wgsl(dtypes: readonly DType[]): string;
}

/** One storage binding of a launch, in binding order. */
export interface LaunchBinding {
  readonly storage: RawStorage;
  readonly offset: number;
  readonly dtype: DType;
  /** Elements the kernel may touch from `offset` (for de-aliasing copies). */
  readonly extent: number;
  readonly writable: boolean;
}

/** A program with its operands: what a kernel call enqueues. */
export interface Launch {
  readonly program: Program;
  readonly dtypes: readonly DType[];
  readonly bindings: readonly LaunchBinding[];
  /** u32 words, bound after the storage bindings. */
  readonly params: Uint32Array<ArrayBuffer>;
  readonly shape: readonly number[];
  /** Binds the deferred-error flag after the params. */
  readonly usesError: boolean;
}

const MAX_GROUPS = 65535;

/** Workgroups for `count` invocations of 1-D workgroups of `wg`, spilling into y past 65535. */
export function linearDispatch(count: number, wg: number): [number, number, number] {
  const groups = Math.max(1, Math.ceil(count / wg));
  if (groups <= MAX_GROUPS) return [groups, 1, 1];
  return [MAX_GROUPS, Math.ceil(groups / MAX_GROUPS), 1];
}

/** Packs parameters: u32, i32 and f32 (as bits) into one u32 array. */
export class Params {
  private readonly words: number[] = [];
  private static readonly f32 = new Float32Array(1);
  private static readonly u32 = new Uint32Array(Params.f32.buffer);

  u(value: number): this {
    this.words.push(value >>> 0);
    return this;
  }
  i(value: number): this {
    this.words.push(value | 0);
    return this;
  }
  f(value: number): this {
    Params.f32[0] = value;
    this.words.push(Params.u32[0]!);
    return this;
  }
  get length(): number {
    return this.words.length;
  }
  toArray(): Uint32Array<ArrayBuffer> {
    return Uint32Array.from(this.words.length > 0 ? this.words : [0]);
  }
}

export interface Operand {
  readonly storage: RawStorage;
  readonly offset: number;
  readonly dtype: DType;
}

export function input(t: Operand, extent: number): LaunchBinding {
  return { storage: t.storage, offset: t.offset, dtype: t.dtype, extent, writable: false };
}

export function output(t: Operand, extent: number): LaunchBinding {
  return { storage: t.storage, offset: t.offset, dtype: t.dtype, extent, writable: true };
}

const WG = 64;
/**
 * Elements one invocation of an element-wise kernel with a 32-bit output computes: its workgroup
 * covers 8 x 64 consecutive elements, pass j of 8 the j-th 64 of them (lanes read neighbours).
 * On the CPU adapters a workgroup has a fixed cost (lavapipe and SwiftShader call it as a
 * function over SIMD lanes), which one element an invocation paid 1536 times for a [16, 32, 192]
 * add; with 8, a contiguous add ran 1.4-1.6x faster on lavapipe and 2-2.7x on SwiftShader, a fill
 * 2.7-3.2x and 2.2-2.8x (2026-11-27, 200 launches each, quiet). Every element is computed as
 * before, so the bits are the same. Packed 16-bit outputs keep one word an invocation.
 */
const PER = 8;

export interface ElementwiseSpec {
  name: string;
  /** Everything the body depends on besides dtypes. */
  key: string;
  /** Read-only inputs, bindings 0..k-1, with their loader names. */
  inputs: readonly { name: string; dtype: DType }[];
  out: DType;
  /** `outv(i)` returns raw bits (u32) instead of a compute value. */
  raw?: boolean;
  /** WGSL defining `fn outv(i: u32) -> T` for logical output index i; params from prm[2]. */
  body: string;
  /**
   * Instead of `body`, WGSL defining `fn outq(q: u32) -> vec4<T>`: the logical output elements
   * 4q .. 4q + 3, for a launch whose output and inputs are 32-bit and read four elements a load
   * ([Note: element-wise kernels four elements a load] in elementwise-quads.ts). The inputs are
   * declared as arrays of vec4 with scalar loaders `ld_NAME(i)`.
   */
  quad?: string;
  usesError?: boolean;
}

/**
 * An element-wise program: one logical output element per index i in [0, size), with prm[0] the
 * output's element offset and prm[1] its size. 16-bit outputs run one invocation per word; see
 * [Note: packed 16-bit storage].
 */
export function elementwiseProgram(spec: ElementwiseSpec): Program {
  const dtypes = [...spec.inputs.map((x) => x.dtype), spec.out];
  const form = spec.quad !== undefined ? 'q' : spec.raw ? 'raw' : 'v';
  const key = `ew:${spec.name}:${spec.key}:${dtypes.join(',')}:${form}`;
  return {
    name: spec.name,
    key,
    workgroupSize: [WG, 1, 1],
    dispatch: (shape, params) =>
      linearDispatch(
        Math.ceil(
          elementwiseCount(spec.out, params[0] ?? 0, shape[0] ?? 1) / (is16(spec.out) ? 1 : PER),
        ),
        WG,
      ),
    wgsl: () => {
      if (spec.quad !== undefined) return quadWgsl(spec, spec.quad);
      const lines: string[] = [CONVERT, MATH];
      spec.inputs.forEach((x, k) => {
        lines.push(declare(k, x.name, x.dtype, 'read'));
        lines.push(loader(x.name, x.dtype));
        lines.push(rawLoader(x.name, x.dtype));
      });
      const ob = spec.inputs.length;
      // Raw bits go into a u32 view of the output, but for native f16 (no 16-bit integer type).
      const rawWords = spec.raw === true && storageType(spec.out) !== 'f16';
      const outDecl = rawWords
        ? `@group(0) @binding(${ob}) var<storage, read_write> out: array<u32>;`
        : declare(ob, 'out', spec.out, 'read_write');
      lines.push(outDecl);
      if (!spec.raw || is16(spec.out)) {
        lines.push(loader('out', spec.out));
      }
      lines.push(paramsDecl(ob + 1));
      if (spec.usesError) lines.push(errorDecl(ob + 2));
      lines.push(spec.body);
      const idx = linearIndex(WG);
      if (is16(spec.out)) {
        const h = (v: string) => (spec.raw ? v : encode(spec.out, v));
        lines.push(`@compute @workgroup_size(${WG})
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) n: vec3u) {
  let off = prm[0];
  let end = off + prm[1];
  let w = (off >> 1u) + ${idx};
  if (w > ((end - 1u) >> 1u)) { return; }
  let e0 = w << 1u;
  let old = out[w];
  var lo = old & 0xffffu;
  var hi = old >> 16u;
  if (e0 >= off) { lo = ${h('outv(e0 - off)')}; }
  if (e0 + 1u < end) { hi = ${h('outv(e0 + 1u - off)')}; }
  out[w] = lo | (hi << 16u);
}`);
      } else {
        const st = rawWords
          ? 'outv(i)'
          : spec.raw
            ? fromBits(spec.out, 'outv(i)')
            : encode(spec.out, `${valueType(spec.out)}(outv(i))`);
        lines.push(`@compute @workgroup_size(${WG})
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) n: vec3u, @builtin(local_invocation_id) l: vec3u) {
  let base = (${idx} - l.x) * ${PER}u + l.x;
  for (var j = 0u; j < ${PER}u; j++) {
    let i = base + j * ${WG}u;
    if (i >= prm[1]) { return; }
    out[prm[0] + i] = ${st};
  }
}`);
      }
      return lines.join('\n');
    },
  };
}

/**
 * The four-elements-a-load form of an element-wise program: each invocation computes `PER / 4`
 * quads, a workgroup the same `PER` x 64 consecutive elements as the scalar form (so the same
 * dispatch), pass j of the workgroup the j-th 64 quads. prm[0] and prm[1] (the output's offset
 * and size) are multiples of 4.
 */
function quadWgsl(spec: ElementwiseSpec, quad: string): string {
  const lines: string[] = [CONVERT, MATH];
  spec.inputs.forEach((x, k) => {
    const t = valueType(x.dtype);
    lines.push(`@group(0) @binding(${k}) var<storage, read> ${x.name}: array<vec4<${t}>>;`);
    lines.push(`fn ld_${x.name}(i: u32) -> ${t} { return ${x.name}[i >> 2u][i & 3u]; }`);
  });
  const ob = spec.inputs.length;
  const t = valueType(spec.out);
  lines.push(`@group(0) @binding(${ob}) var<storage, read_write> out: array<vec4<${t}>>;`);
  lines.push(paramsDecl(ob + 1));
  if (spec.usesError) lines.push(errorDecl(ob + 2));
  lines.push(quad);
  const passes = Array.from({ length: PER / 4 }, (_, j) => j)
    .map((j) => `  { let q = base + ${j * WG}u; if (q < end) { out[o + q] = outq(q); } }`)
    .join('\n');
  lines.push(`@compute @workgroup_size(${WG})
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) n: vec3u, @builtin(local_invocation_id) l: vec3u) {
  let base = (${linearIndex(WG)} - l.x) * ${PER / 4}u + l.x;
  let o = prm[0] >> 2u;
  let end = prm[1] >> 2u;
${passes}
}`);
  return lines.join('\n');
}

/**
 * Invocations an element-wise launch of `size` elements at `offset` needs in the current target:
 * one per element, or one per word for packed 16-bit outputs.
 */
export function elementwiseCount(dtype: DType, offset: number, size: number): number {
  if (!is16(dtype)) return size;
  return ((offset + size - 1) >> 1) - (offset >> 1) + 1;
}

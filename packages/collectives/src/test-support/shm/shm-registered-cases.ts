// What shm-registered.test.ts and its worker share: the job, a case's report and the inputs.

export interface RegisteredJob {
  counts: number[];
}

export interface RegisteredCase {
  count: number;
  op: 'sum' | 'avg' | 'max';
  dtype: 'f32' | 'i32';
  /** Which ranks pass a registered buffer (the others an ordinary array). */
  registered: 'all' | 'rank 0 only';
  result: Float32Array | Int32Array;
  /** The same all-reduce on ordinary arrays (the copying schedule). */
  copied: Float32Array | Int32Array;
  /** Rounds of the copying schedule the registered all-reduce started (0: it ran in place). */
  rounds: number;
}

/** Rank r's element i: awkward values, so a wrong order or a missed element shows. */
export function inputValue(dtype: 'f32' | 'i32', rank: number, i: number): number {
  return dtype === 'i32'
    ? ((i * 7919 + rank * 104729) % 2001) - 1000
    : Math.fround(Math.sin(i + rank * 1.7) * 1e3 + rank / 3);
}

/** A reduce-scatter or all-gather of registered buffers beside the same op on ordinary arrays. */
export interface RegisteredShardCase {
  op:
    | 'reduceScatter sum'
    | 'reduceScatter avg, output registered'
    | 'reduceScatter, output inside the input'
    | 'allGather f32'
    | 'allGather bf16';
  count: number;
  result: Float32Array | Int32Array | Uint16Array;
  copied: Float32Array | Int32Array | Uint16Array;
  rounds: number;
}

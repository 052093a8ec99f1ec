/**
 * What each worker thread of the WASM matmul runs ([Note: matmul threads] in matmul-threads.ts),
 * and the shared control block it and the calling thread meet in: its layout, the packing loop
 * every thread runs, and the report a worker leaves when a call fails in it.
 */

export const GENERATION = 0;
export const DONE = 1;
export const STOP = 2;
/** 0, or 1 + the index of the first worker whose call failed (its report is in the report block). */
export const FAILED = 3;
export const KIND = 4; // GEMM or PACK: what the call's chunks are
export const ARGS = 5; // GEMM: ap, bp, c, k, n, m, rows per chunk; PACK: PACK_WORDS per job, 2 jobs
export const NEXT = 21; // the next chunk to claim
export const ONLINE = 22; // workers in their loop
export const PACKED = 23; // pack chunks the workers have done, ever
/** UTF-16 code units in the failed worker's report. */
export const REPORT_LENGTH = 24;
export const CONTROL_WORDS = 25;
export const GEMM = 0;
export const PACK = 1;
/** A pack job's words: src, dst, outer, inner, width, strideOuter, strideInner, rows per chunk. */
export const PACK_WORDS = 8;
/** UTF-16 code units a report holds (longer ones are cut). */
export const REPORT_UNITS = 512;

/** The module's `pack` export. */
export type Pack = (
  src: number,
  dst: number,
  outer: number,
  inner: number,
  width: number,
  strideOuter: number,
  strideInner: number,
) => void;

/**
 * Runs in each worker, given the worker's data: waits for a generation, computes its chunks,
 * counts itself done. An expression (a function), which each platform's `spawnWorker` calls with
 * the data. What a chunk throws (a WebAssembly trap: an address out of the memory, an unreachable)
 * is written, name and message, into the report block by the first worker to fail in the call, so
 * the calling thread's error says what happened instead of only that something did (issue 46's
 * long run lost a worker at step 999 of 1000 with no message to read).
 */
export const WORKER_LOOP = `(function run({ module, memory, control, report, index, tileBytes }) {
  const { gemm, pack } = new WebAssembly.Instance(module, { env: { memory } }).exports;
  const ctl = new Int32Array(control);
  const text = new Uint16Array(report);
  const packChunks = ${packChunks.toString()};
  let seen = 0;
  Atomics.add(ctl, ${ONLINE}, 1);
  for (;;) {
    Atomics.wait(ctl, ${GENERATION}, seen);
    seen = Atomics.load(ctl, ${GENERATION});
    if (Atomics.load(ctl, ${STOP}) !== 0) break;
    try {
      if (ctl[${KIND}] === ${PACK}) Atomics.add(ctl, ${PACKED}, packChunks(pack, ctl, ${ARGS}, ${NEXT}, ${PACK_WORDS}));
      else {
        const ap = ctl[${ARGS}], bp = ctl[${ARGS + 1}], c = ctl[${ARGS + 2}], k = ctl[${ARGS + 3}], n = ctl[${ARGS + 4}];
        const m = ctl[${ARGS + 5}], chunk = ctl[${ARGS + 6}];
        for (let i = Atomics.add(ctl, ${NEXT}, 1) * chunk; i < m; i = Atomics.add(ctl, ${NEXT}, 1) * chunk)
          gemm(ap + i * k * 4, bp, c + i * n * 4, Math.min(chunk, m - i), k, n, (index + 1) * tileBytes);
      }
    } catch (e) {
      if (Atomics.compareExchange(ctl, ${FAILED}, 0, index + 1) === 0) {
        let said;
        try { said = e instanceof Error ? e.name + ': ' + e.message : String(e); } catch { said = 'an exception that cannot be printed'; }
        const length = Math.min(said.length, ${REPORT_UNITS});
        for (let u = 0; u < length; u++) text[u] = said.charCodeAt(u);
        Atomics.store(ctl, ${REPORT_LENGTH}, length);
      }
    }
    Atomics.add(ctl, ${DONE}, 1);
    Atomics.notify(ctl, ${DONE});
  }
})`;

/** The failed worker's report, once every worker has counted itself done; null when none failed. */
export function readReport(
  ctl: Int32Array,
  report: Uint16Array,
): { worker: number; said: string } | null {
  const failed = Atomics.load(ctl, FAILED);
  if (failed === 0) return null;
  const length = Atomics.load(ctl, REPORT_LENGTH);
  let said = '';
  for (let u = 0; u < length; u++) said += String.fromCharCode(report[u]!);
  return { worker: failed - 1, said: said === '' ? 'no message' : said };
}

/** The call a control block holds, in words, for an error message. */
export function describeCall(ctl: Int32Array): string {
  const a = (i: number) => ctl[ARGS + i]!;
  if (ctl[KIND] === GEMM) {
    return `a gemm of ${a(5)} x ${a(3)} x ${a(4)} (A's panels at byte ${a(0)}, B's at ${a(1)}, C at ${a(2)}, ${a(6)} rows a chunk)`;
  }
  const job = (j: number) =>
    `${a(j + 2)} x ${a(j + 3)} from byte ${a(j)} to ${a(j + 1)}, panels ${a(j + 4)} wide`;
  return `a pack of ${job(0)}${a(PACK_WORDS + 2) > 0 ? ` and of ${job(PACK_WORDS)}` : ''}`;
}

/**
 * Claims and packs chunks of the pack jobs in the control block until none is left: job 0's
 * chunks, then job 1's (`outer` 0 for none); returns how many it packed. A chunk is whole panels, so it writes the bytes one
 * `pack` of the whole operand writes there. Runs on every thread (the workers get its source), so
 * it uses nothing outside its arguments.
 */
export function packChunks(
  pack: Pack,
  ctl: Int32Array,
  args: number,
  next: number,
  words: number,
): number {
  // No inner functions: a bundler that keeps names would wrap them in a helper the worker lacks.
  const first = Math.ceil(ctl[args + 2]! / ctl[args + 7]!);
  const all = first + Math.ceil(ctl[args + words + 2]! / ctl[args + words + 7]!);
  let done = 0;
  for (let i = Atomics.add(ctl, next, 1); i < all; i = Atomics.add(ctl, next, 1)) {
    const job = i < first ? args : args + words;
    const rows = ctl[job + 7]!;
    const start = (i < first ? i : i - first) * rows;
    const [so, inner] = [ctl[job + 5]!, ctl[job + 3]!];
    const outer = Math.min(rows, ctl[job + 2]! - start);
    pack(
      ctl[job]! + start * so * 4,
      ctl[job + 1]! + start * inner * 4,
      outer,
      inner,
      ctl[job + 4]!,
      so,
      ctl[job + 6]!,
    );
    done++;
  }
  return done;
}

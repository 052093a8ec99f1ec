/**
 * What each worker thread of the WASM matmul runs ([Note: matmul threads] in matmul-threads.ts),
 * and the shared control block it and the calling thread meet in: its layout, the packing loop
 * every thread runs, and the report a worker leaves when a call fails in it.
 */

import { attentionChunks } from './attention-chunks.js';

export const GENERATION = 0;
export const DONE = 1;
export const STOP = 2;
/** 0, or 1 + the index of the first worker whose call failed (its report is in the report block). */
export const FAILED = 3;
export const KIND = 4; // GEMM, PACK, BATCH, MAP or ATTENTION: what the call's chunks are
export const ARGS = 5; // GEMM: ap, bp, c, k, n, m, rows per chunk, acc; PACK: PACK_WORDS per job, 2 jobs; BATCH: BATCH_WORDS; MAP: MAP_WORDS; ATTENTION: ATTENTION_WORDS
export const NEXT = 21; // the next chunk to claim
export const ONLINE = 22; // workers in their loop
export const PACKED = 23; // pack chunks the workers have done, ever
/** UTF-16 code units in the failed worker's report. */
export const REPORT_LENGTH = 24;
/** The call's door ([Note: joining a call]): open, with the workers that joined, or CLOSED. */
export const JOIN = 25;
export const BATCHED = 26; // batch chunks the workers have done, ever
/**
 * Microseconds a worker polls for the next call before it blocks: SPIN_MS, or 0 ([Note: polling
 * only with a core to spare]).
 */
export const SPIN_US = 27;
export const MAPPED = 28; // map chunks the workers have done, ever
export const ATTENDED = 29; // attention chunks the workers have done, ever
export const CONTROL_WORDS = 30;
/** The door of a call the calling thread has closed: no worker joins it any more. */
export const CLOSED = -1;
/**
 * How long a worker polls for the next call before it blocks, and the calling thread for the
 * workers that joined before it blocks ([Note: joining a call]), in milliseconds.
 */
export const SPIN_MS = 0.2;
export const GEMM = 0;
export const PACK = 1;
export const BATCH = 2;
export const MAP = 3;
export const ATTENTION = 4;
/**
 * A map call's words ([Note: GELU on the matmul's threads] in gelu-threads.ts), ARGS on: the map
 * (GELU_MAP or GELU_GRAD_MAP), the byte addresses of x, of dy (GELU's gradient only) and of the
 * output, the elements, and the elements a chunk (a multiple of 4).
 */
export const GELU_MAP = 0;
export const GELU_GRAD_MAP = 1;
/**
 * A batch call's words ([Note: a batch of small products on the threads]): the byte address of
 * its table (per product, the byte addresses of its A and its B in the module's memory), the
 * calling thread's A and B panels, C (the products side by side), m, k, n, the batch, the bytes
 * between two threads' panels, products a chunk, the register tile's rows and columns, and A's
 * and B's (outer, inner) strides in elements as `pack` reads them.
 */
export const BATCH_WORDS = 16;
/** A pack job's words: src, dst, outer, inner, width, strideOuter, strideInner, rows per chunk. */
export const PACK_WORDS = 8;
/** UTF-16 code units a report holds (longer ones are cut). */
export const REPORT_UNITS = 512;

/** The module's `gemm` export: C (at `c`) from the packed panels of A and B, rows by tile. */
export type Gemm = (
  ap: number,
  bp: number,
  c: number,
  m: number,
  k: number,
  n: number,
  tile: number,
  /** Nonzero: the first k block adds to C too ([Note: the WASM matmul in slices of k]). */
  acc?: number,
) => void;

/** The module's `gelu` export: o[i] = gelu(x[i]) for i < n (byte addresses). */
export type GeluMap = (x: number, o: number, n: number) => void;
/** The module's `gelu_grad` export: o[i] = dy[i] gelu'(x[i]) for i < n (byte addresses). */
export type GeluGradMap = (x: number, dy: number, o: number, n: number) => void;

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
 * Runs in each worker, given the worker's data: waits for a generation (polling for SPIN_MS, then
 * blocked), joins its call unless the door is closed, computes its chunks, counts itself done. An expression (a function), which each platform's `spawnWorker` calls with
 * the data. What a chunk throws (a WebAssembly trap: an address out of the memory, an unreachable)
 * is written, name and message, into the report block by the first worker to fail in the call, so
 * the calling thread's error says what happened instead of only that something did (issue 46's
 * long run lost a worker at step 999 of 1000 with no message to read).
 */
export const WORKER_LOOP = `(function run({ module, memory, control, report, index, tileBytes }) {
  const { gemm, pack, gelu, gelu_grad, attention_forward, attention_backward } = new WebAssembly.Instance(module, { env: { memory } }).exports;
  const ctl = new Int32Array(control);
  const text = new Uint16Array(report);
  const packChunks = ${packChunks.toString()};
  const batchChunks = ${batchChunks.toString()};
  const mapChunks = ${mapChunks.toString()};
  const attentionChunks = ${attentionChunks.toString()};
  const joinCall = ${joinCall.toString()};
  let seen = 0;
  Atomics.add(ctl, ${ONLINE}, 1);
  for (;;) {
    const until = performance.now() + Atomics.load(ctl, ${SPIN_US}) / 1000;
    while (Atomics.load(ctl, ${GENERATION}) === seen && performance.now() < until);
    Atomics.wait(ctl, ${GENERATION}, seen);
    seen = Atomics.load(ctl, ${GENERATION});
    if (Atomics.load(ctl, ${STOP}) !== 0) break;
    if (!joinCall(ctl, ${JOIN}, seen)) continue;
    try {
      if (ctl[${KIND}] === ${PACK}) Atomics.add(ctl, ${PACKED}, packChunks(pack, ctl, ${ARGS}, ${NEXT}, ${PACK_WORDS}));
      else if (ctl[${KIND}] === ${MAP}) Atomics.add(ctl, ${MAPPED}, mapChunks(gelu, gelu_grad, ctl, ${ARGS}, ${NEXT}));
      else if (ctl[${KIND}] === ${ATTENTION}) Atomics.add(ctl, ${ATTENDED}, attentionChunks(attention_forward, attention_backward, ctl, memory.buffer, ${ARGS}, ${NEXT}, index + 1));
      else if (ctl[${KIND}] === ${BATCH}) Atomics.add(ctl, ${BATCHED}, batchChunks(gemm, pack, ctl, new Int32Array(memory.buffer), ${ARGS}, ${NEXT}, index + 1, tileBytes));
      else {
        const ap = ctl[${ARGS}], bp = ctl[${ARGS + 1}], c = ctl[${ARGS + 2}], k = ctl[${ARGS + 3}], n = ctl[${ARGS + 4}];
        const m = ctl[${ARGS + 5}], chunk = ctl[${ARGS + 6}], acc = ctl[${ARGS + 7}];
        for (let i = Atomics.add(ctl, ${NEXT}, 1) * chunk; i < m; i = Atomics.add(ctl, ${NEXT}, 1) * chunk)
          gemm(ap + i * k * 4, bp, c + i * n * 4, Math.min(chunk, m - i), k, n, (index + 1) * tileBytes, acc);
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
    return `a gemm of ${a(5)} x ${a(3)} x ${a(4)} (A's panels at byte ${a(0)}, B's at ${a(1)}, C at ${a(2)}, ${a(6)} rows a chunk${a(7) ? ', added to C' : ''})`;
  }
  if (ctl[KIND] === MAP) {
    const what = a(0) === GELU_MAP ? 'GELU' : "GELU's gradient";
    return `a map (${what}) of ${a(4)} elements (x at byte ${a(1)}${a(0) === GELU_MAP ? '' : `, dy at ${a(2)}`}, the output at ${a(3)}, ${a(5)} a chunk)`;
  }
  if (ctl[KIND] === ATTENTION) {
    return `attention's ${a(0) === 0 ? 'forward' : 'gradient'} over ${a(8)} pairs of ${a(10)} x ${a(11)} heads (qkv at byte ${a(1)}, att at ${a(3)}, ${a(13)} pairs a chunk)`;
  }
  if (ctl[KIND] === BATCH) {
    return `a batch of ${a(7)} products of ${a(4)} x ${a(5)} x ${a(6)} (their table at byte ${a(0)}, C at ${a(3)}, panels from ${a(1)} and ${a(2)}, ${a(8)} bytes a thread, ${a(9)} products a chunk)`;
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

/**
 * Claims and computes chunks of a batch call in the control block until none is left ([Note: a
 * batch of small products on the threads] in matmul-wasm-batch.ts): each chunk is whole products,
 * each packed from where the call's table says into `thread`'s own panels (not again when it is
 * where this thread's previous product's was: an operand the batch shares) and multiplied into
 * its place in C with `thread`'s edge tile; returns the chunks it did. `heap` is the module's
 * memory as words. Runs on every thread (the workers get its source), so it uses nothing
 * outside its arguments.
 */
export function batchChunks(
  gemm: Gemm,
  pack: Pack,
  ctl: Int32Array,
  heap: Int32Array,
  args: number,
  next: number,
  thread: number,
  tileBytes: number,
): number {
  // No inner functions (see packChunks): the words one by one.
  const [table, c, m, k, n] = [
    ctl[args]!,
    ctl[args + 3]!,
    ctl[args + 4]!,
    ctl[args + 5]!,
    ctl[args + 6]!,
  ];
  const [batch, region, per] = [ctl[args + 7]!, ctl[args + 8]!, ctl[args + 9]!];
  const [mr, nr] = [ctl[args + 10]!, ctl[args + 11]!];
  const [aOuter, aInner, bOuter, bInner] = [
    ctl[args + 12]!,
    ctl[args + 13]!,
    ctl[args + 14]!,
    ctl[args + 15]!,
  ];
  const aPack = ctl[args + 1]! + thread * region;
  const bPack = ctl[args + 2]! + thread * region;
  let packedA = -1;
  let packedB = -1;
  let done = 0;
  for (let i = Atomics.add(ctl, next, 1) * per; i < batch; i = Atomics.add(ctl, next, 1) * per) {
    const end = Math.min(batch, i + per);
    for (let p = i; p < end; p++) {
      const aFrom = heap[table / 4 + 2 * p]!;
      const bFrom = heap[table / 4 + 2 * p + 1]!;
      if (aFrom !== packedA) pack(aFrom, aPack, m, k, mr, aOuter, aInner);
      if (bFrom !== packedB) pack(bFrom, bPack, n, k, nr, bOuter, bInner);
      packedA = aFrom;
      packedB = bFrom;
      gemm(aPack, bPack, c + p * m * n * 4, m, k, n, thread * tileBytes, 0);
    }
    done++;
  }
  return done;
}

/**
 * Claims and computes chunks of a map call in the control block until none is left ([Note: GELU
 * on the matmul's threads] in gelu-threads.ts); returns the chunks it did. Every element is
 * computed alone by the same instructions, so the bits do not depend on who computes which chunk.
 * Runs on every thread (the workers get its source), so it uses nothing outside its arguments.
 */
export function mapChunks(
  gelu: GeluMap,
  geluGrad: GeluGradMap,
  ctl: Int32Array,
  args: number,
  next: number,
): number {
  const [fn, x, dy, o, n, chunk] = [
    ctl[args]!,
    ctl[args + 1]!,
    ctl[args + 2]!,
    ctl[args + 3]!,
    ctl[args + 4]!,
    ctl[args + 5]!,
  ];
  let done = 0;
  for (let i = Atomics.add(ctl, next, 1) * chunk; i < n; i = Atomics.add(ctl, next, 1) * chunk) {
    const count = Math.min(chunk, n - i);
    if (fn === 0)
      gelu(x + i * 4, o + i * 4, count); // GELU_MAP
    else geluGrad(x + i * 4, dy + i * 4, o + i * 4, count);
    done++;
  }
  return done;
}

/**
 * [Note: joining a call]
 * A call's chunks go to whoever claims them, so a worker is needed for none of them: it helps if
 * it comes. The calling thread publishes a call with its door open (the JOIN word: the call's
 * generation and a count), a worker that wakes joins through the door (a compare-and-swap that
 * counts it) before it claims a chunk, and once the calling thread has no chunk left to claim it
 * closes the door and waits for the joined workers alone. A worker that comes later finds the
 * door closed, or another call's, and goes back to waiting. Before the door, the calling thread
 * waited for every worker to count itself done: where the system had not run a worker yet (a
 * machine whose cores are busy, processes held to fewer cores than threads) the call waited for
 * a worker that had nothing left to do.
 *
 * The door is what lets both sides poll before they block (SPIN_MS, 0.2 ms): a blocked worker
 * takes tens of microseconds to wake (40-70 us a meeting on this 2-core VM, issue 49), which a
 * product of 2^21-2^23 multiply-adds (the default GPT's, 70-300 us on one thread) cannot afford;
 * a worker that still polls when the next call comes starts at once (a meeting in 1 us), and the
 * calling thread, polling for the joined workers' last chunks, needs no wake-up either. Polling
 * for a worker that cannot run (held to the calling thread's core) would cost the whole poll on
 * every call: 2-thread calls of 160^3 took 3.9x the one-thread calls so, 1.1x with the door
 * (`matmul-threads-join.test.ts`). This is OpenMP's spin-then-sleep wait (`OMP_WAIT_POLICY`,
 * `KMP_BLOCKTIME`) with a short block time: a worker polls 0.2 ms after a call, not 200. A call
 * that will split also wakes the workers as it starts (`MatmulThreads.wake`), before its copies
 * and packing: a woken worker finds the door closed and polls, and the call comes while it does
 * (the default GPT's step 0.975-0.991 of its time without the early wake, 3 pairs of 150 steps).
 */

/**
 * [Note: polling only with a core to spare]
 *
 * Both sides poll only where the process may run each of its threads on a core of its own: a
 * pool of more threads than the cores the process may use (`os.availableParallelism()`, which
 * counts its affinity mask: `taskset`, a container's cpuset; divided among a launcher's ranks,
 * [Note: threads per process]) blocks at once, as libgomp stops spinning when it has more
 * threads than CPUs. There a poll is worse than useless: the thread it waits for can run only
 * once the poller stops, so each poll is time the call loses. The door kept the calling thread
 * from polling for a worker that never woke, but a worker still polled 0.2 ms after each call
 * (and after each early wake) while the calling thread, on the same core, waited to publish the
 * next: 2-thread calls of 160^3 on one core took 1.7-2.1x the one-thread calls on issue 49's
 * Intel VM (a fresh-clone CI failed on 2.08), 1.1x without the polls
 * (`matmul-threads-join.test.ts`). Such a pool wakes no worker ahead of a call either
 * (`MatmulThreads.wake`): it would only block again. The poll's length is a control block word
 * (SPIN_US) the pool sets before its workers start.
 */

/**
 * The door's word for the call of `generation`, open with nobody in: the generation's low 22 bits
 * above a count of joined workers in the low 8 (a worker that woke for an earlier call, and
 * reads the door of a later one, finds another generation there and does not join).
 */
export function openDoor(generation: number): number {
  return (generation & 0x3fffff) << 8;
}

/**
 * A worker's attempt to join the call of `generation` ([Note: joining a call]): true, counted in
 * the door's word, while the door is open for that call; false once the calling thread closed it
 * or published a later call. Runs on every worker (its source is copied), so it uses nothing
 * outside its arguments.
 */
export function joinCall(ctl: Int32Array, join: number, generation: number): boolean {
  for (;;) {
    const door = Atomics.load(ctl, join);
    if (door < 0 || door >>> 8 !== (generation & 0x3fffff)) return false;
    if (Atomics.compareExchange(ctl, join, door, door + 1) === door) return true;
  }
}

/** Closes the door of the call in flight; returns how many workers joined it (and count in DONE). */
export function closeCall(ctl: Int32Array, join: number): number {
  for (;;) {
    const door = Atomics.load(ctl, join);
    if (door < 0) return 0;
    if (Atomics.compareExchange(ctl, join, door, CLOSED) === door) return door & 0xff;
  }
}

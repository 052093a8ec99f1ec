import { enableRelaxedSimd } from '#platform';
import { matmulWasmBase64 } from './matmul-wasm.generated.js';
import { MAX_THREADS, type MatmulExports, MR, TILE_BYTES, WasmMatmul } from './matmul-wasm.js';
import { threadsKnownNow } from './matmul-thread-count.js';
import { MatmulThreads } from './matmul-threads.js';

// Loading the WASM SIMD matmul ([Note: the WASM SIMD matmul] in matmul-wasm.ts): which of the
// generator's four modules the engine validates, compiled once per `WebAssembly` namespace, and
// an instance with its own memory or a shared one for threads.

/**
 * [Note: a shared memory only for threads]
 * The operands go into the module's memory and the result comes out of it by `TypedArray.set`,
 * which V8 runs as a plain memcpy between ordinary buffers but as a copy of relaxed atomic words
 * where either side is shared: 512 KiB into it took 26.1 us against 16.6 (20.1 against 31.7
 * GB/s, issue 49's Intel VM, `bench/shared-copy.ts`); at 3 MiB, bound by the memory's bandwidth,
 * the two are alike. So the shared module and memory are taken only where
 * the matmul may run on several threads. `'auto'` used to take them everywhere, also where its
 * pool could only ever be the calling thread: a rank in a worker thread (webshard-run's thread
 * ranks, the shm world), a process rank whose share of the cores is one (2 ranks on 2 cores),
 * a Web Worker; there it now resolves to one thread when the matmul loads, where the platform
 * says so synchronously (`threadsKnownNow`), and takes the module with its own memory. Same
 * instructions, same bits; only the copies change.
 */

/** Pages of the shared memory's maximum (2 GiB), as the shared modules declare. */
const SHARED_MAX_PAGES = 32768;
/** The parts of the `WebAssembly` namespace the loader uses (a test passes one without SIMD). */
export type WasmApi = Pick<typeof WebAssembly, 'validate' | 'Module' | 'Instance'>;

type Variant = keyof typeof matmulWasmBase64;
const compiled = new WeakMap<WasmApi, Map<Variant, WebAssembly.Module | null>>();

function compile(wasm: WasmApi, variant: Variant): WebAssembly.Module | null {
  let modules = compiled.get(wasm);
  if (modules === undefined) {
    modules = new Map();
    compiled.set(wasm, modules);
  }
  let module = modules.get(variant);
  if (module === undefined) {
    const bytes = decodeBase64(matmulWasmBase64[variant]);
    module = wasm.validate(bytes) ? new wasm.Module(bytes) : null;
    modules.set(variant, module);
  }
  return module;
}

function decodeBase64(text: string): Uint8Array<ArrayBuffer> {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/** How `loadWasmMatmul` builds the kernel. */
export interface WasmMatmulOptions {
  /**
   * Relaxed SIMD's fused multiply-add: `'auto'` (the default) where the engine validates it,
   * `'off'` never. See [Note: the WASM SIMD matmul] on what it changes.
   */
  fma?: 'auto' | 'off';
  /**
   * Threads in all, the caller's included, or `'auto'` (the default): one per core on the main
   * thread, one in worker threads. See [Note: matmul threads].
   */
  threads?: number | 'auto';
  /**
   * The most the module's memory grows to (default 128 MiB); larger calls run in blocks of C
   * ([Note: the WASM matmul in blocks]).
   */
  maxScratchBytes?: number;
}

/**
 * An instance of the WASM SIMD matmul, or null where the engine cannot run it (no WebAssembly, or
 * no SIMD: `validate` rejects the module). `wasm` defaults to the global `WebAssembly` (null when
 * there is none).
 */
export function loadWasmMatmul(
  wasm: WasmApi | null = globalThis.WebAssembly ?? null,
  options: WasmMatmulOptions = {},
): WasmMatmul | null {
  if (wasm === null) return null;
  // Node 20 validates relaxed SIMD only behind a V8 flag ([Note: relaxed FMA, chosen once per job])
  if (options.fma !== 'off') enableRelaxedSimd();
  const relaxed = options.fma !== 'off' && compile(wasm, 'relaxedSimd') !== null;
  const threads = options.threads ?? 'auto';
  // [Note: a shared memory only for threads]
  if (threads !== 1 && threadsKnownNow(threads) !== 1 && typeof SharedArrayBuffer !== 'undefined') {
    const module = compile(wasm, relaxed ? 'sharedRelaxedSimd' : 'sharedSimd');
    if (module !== null) {
      try {
        const memory = new WebAssembly.Memory({
          initial: 1,
          maximum: SHARED_MAX_PAGES,
          shared: true,
        });
        const instance = new wasm.Instance(module, { env: { memory } });
        const pool = new MatmulThreads(module, memory, threads, MAX_THREADS, MR, TILE_BYTES);
        return new WasmMatmul(
          instance.exports as unknown as MatmulExports,
          relaxed,
          memory,
          pool,
          options.maxScratchBytes,
        );
      } catch {
        // no shared memory here (a page that is not cross-origin isolated): one thread
      }
    }
  }
  const module = compile(wasm, relaxed ? 'relaxedSimd' : 'simd');
  if (module === null) return null;
  const instance = new wasm.Instance(module, {});
  const exports = instance.exports as unknown as MatmulExports;
  return new WasmMatmul(exports, relaxed, exports.memory, null, options.maxScratchBytes);
}

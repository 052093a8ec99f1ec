import type { FileHandle } from 'node:fs/promises';
import { nodeFs } from '#platform';
import type { Backend } from '../backend/backend.js';
import { bytesPerElement } from '../dtype.js';
import { WebshardError } from '../errors.js';
import { Tensor } from '../tensor.js';
import {
  freeAll,
  headerInputs,
  hostView,
  record,
  type SafetensorsContents,
  window,
} from './safetensors.js';
import {
  buildHeader,
  parseHeader,
  parseHeaderLength,
  SafetensorsError,
  type SafetensorsHeader,
} from './safetensors-format.js';
import { writeAtomically } from './atomic-file.js';

/**
 * [Note: streaming safetensors]
 *
 * Files are read and written through a file handle in chunks of `chunkBytes` (4 MiB by default),
 * through one reused host buffer, so a checkpoint larger than any single buffer (or than host
 * memory) loads and saves. Loading writes each chunk straight into its slice of the tensor's
 * storage (`backend.write` on a window of the tensor); saving reads each chunk from its slice
 * (`backend.read` on a window), so no tensor is ever staged whole on the host. The header is
 * validated completely before the first allocation; if anything fails afterwards (a read error,
 * an out-of-memory), every tensor allocated so far is freed before the error propagates, so a load
 * either returns every tensor or none. A save goes through `writeAtomically` ([Note: atomic files]):
 * temporary file, fsync, rename, directory fsync, so a failed save never leaves a half-written
 * checkpoint at `path`, nor a temporary file.
 *
 * Every error of the file system (a directory, a missing file, a permission, a read that fails
 * half-way) becomes a `SafetensorsError` naming the op and the file, with the system error as its
 * `cause`; never a raw `EISDIR` or `ENOENT`.
 *
 * `node:fs/promises` is imported lazily, inside the file functions, and these live apart from
 * `encodeSafetensors` / `decodeSafetensors` (`safetensors.ts`, the `/io` entry), so browser bundles
 * never touch it and the `/node` entry's declarations do not reach into `/io`'s.
 */

/** Default chunk size for streamed reads and writes. */
export const DEFAULT_CHUNK_BYTES = 4 << 20;

export interface LoadSafetensorsOptions {
  /** The backend the tensors are allocated on. */
  backend: Backend;
  /** Bytes read per chunk (rounded down to a multiple of 8); 4 MiB by default. */
  chunkBytes?: number;
}

export interface SaveSafetensorsOptions {
  /** Bytes written per chunk (rounded down to a multiple of 8); 4 MiB by default. */
  chunkBytes?: number;
}

function chunkSize(chunkBytes: number | undefined): number {
  const size = Math.floor((chunkBytes ?? DEFAULT_CHUNK_BYTES) / 8) * 8;
  return Math.max(size, 8);
}

/**
 * A system error (one with a string `code`, as node:fs throws), as opposed to a program error or
 * one of ours (a `WebshardError` has a `code` too: an out-of-memory stays an `OutOfMemoryError`).
 */
function isSystemError(error: unknown): error is Error & { code: string } {
  return (
    error instanceof Error &&
    !WebshardError.isInstance(error) &&
    typeof (error as { code?: unknown }).code === 'string'
  );
}

/**
 * `error` as a `SafetensorsError` naming `file` when it is a file-system error (`what` says what
 * was being done: `cannot open`, `cannot read`); any other error unchanged.
 */
function asFileError(error: unknown, op: string, file: string, what: string): unknown {
  if (SafetensorsError.isInstance(error) || !isSystemError(error)) return error;
  return new SafetensorsError(op, file, `${what}: ${error.message}`, { cause: error });
}

/** Open `path`; a failure is a `SafetensorsError` naming `file` (the target of a save). */
async function openFile(
  path: string,
  flags: 'r' | 'w',
  op: string,
  file = path,
): Promise<{ handle: FileHandle; fs: typeof import('node:fs/promises') }> {
  const fs = await nodeFs(op);
  try {
    return { handle: await fs.open(path, flags), fs };
  } catch (error) {
    throw asFileError(error, op, file, 'cannot open');
  }
}

/** Close `handle`; a failure to close a file that was only read is reported as a read error. */
async function closeRead(handle: FileHandle, op: string, file: string): Promise<void> {
  try {
    await handle.close();
  } catch (error) {
    throw asFileError(error, op, file, 'cannot read');
  }
}

/** Read exactly `length` bytes at `position` into `target`, or throw `SafetensorsError`. */
async function readExactly(
  handle: FileHandle,
  target: Uint8Array,
  length: number,
  position: number,
  op: string,
  file: string,
): Promise<void> {
  let done = 0;
  while (done < length) {
    const { bytesRead } = await handle.read(target, done, length - done, position + done);
    if (bytesRead === 0) {
      throw new SafetensorsError(
        op,
        file,
        `truncated: expected ${length} bytes at offset ${position}, the file ended after ${done}`,
      );
    }
    done += bytesRead;
  }
}

async function readHeaderFrom(
  handle: FileHandle,
  op: string,
  file: string,
): Promise<SafetensorsHeader> {
  const { size } = await handle.stat();
  const prefix = new Uint8Array(8);
  if (size >= 8) await readExactly(handle, prefix, 8, 0, op, file);
  const headerLength = parseHeaderLength(prefix, size, op, file);
  const headerBytes = new Uint8Array(headerLength);
  await readExactly(handle, headerBytes, headerLength, 8, op, file);
  return parseHeader(headerBytes, size, op, file);
}

/**
 * The validated header of a safetensors file (names, dtypes, shapes, offsets, metadata), without
 * reading any tensor data. Throws `SafetensorsError` for a malformed file.
 */
export async function readSafetensorsHeader(path: string): Promise<SafetensorsHeader> {
  const op = 'readSafetensorsHeader';
  const { handle } = await openFile(path, 'r', op);
  try {
    return await readHeaderFrom(handle, op, path);
  } catch (error) {
    throw asFileError(error, op, path, 'cannot read');
  } finally {
    await closeRead(handle, op, path);
  }
}

/**
 * Load every tensor of a safetensors file onto `backend`, streaming each one into its storage in
 * chunks. Tensors keep the file's dtype and get their names as `tensor.name`. Throws
 * `SafetensorsError` for a malformed file, having allocated nothing (see [Note: streaming
 * safetensors]).
 */
export async function loadSafetensors(
  path: string,
  options: LoadSafetensorsOptions,
): Promise<SafetensorsContents> {
  const op = 'loadSafetensors';
  const { backend } = options;
  const chunk = chunkSize(options.chunkBytes);
  const { handle } = await openFile(path, 'r', op);
  const tensors = record<Tensor>();
  try {
    const header = await readHeaderFrom(handle, op, path);
    const buffer = new ArrayBuffer(Math.min(chunk, Math.max(header.dataBytes, 8)));
    const bytes = new Uint8Array(buffer);
    for (const [name, entry] of header.tensors) {
      const tensor = Tensor.empty(backend, entry.shape, entry.dtype);
      tensor.name = name;
      tensors[name] = tensor;
      const elementBytes = bytesPerElement(entry.dtype);
      for (let at = entry.begin; at < entry.end; at += buffer.byteLength) {
        const length = Math.min(buffer.byteLength, entry.end - at);
        await readExactly(handle, bytes, length, header.dataStart + at, op, path);
        const start = (at - entry.begin) / elementBytes;
        backend.write(
          window(tensor, op, start, length / elementBytes),
          hostView(entry.dtype, buffer, 0, length),
        );
      }
    }
    return { tensors, metadata: Object.assign(record<string>(), header.metadata) };
  } catch (error) {
    freeAll(tensors);
    throw asFileError(error, op, path, 'cannot read');
  } finally {
    await closeRead(handle, op, path);
  }
}

/**
 * Save tensors (any backends, any dtypes) and optional string metadata as a safetensors file,
 * streaming each tensor from its storage in chunks. The file appears at `path` only once complete.
 */
export async function saveSafetensors(
  path: string,
  tensors: Record<string, Tensor>,
  metadata?: Record<string, string>,
  options: SaveSafetensorsOptions = {},
): Promise<void> {
  const op = 'saveSafetensors';
  const chunk = chunkSize(options.chunkBytes);
  const header = buildHeader(headerInputs(tensors, op), metadata, op, path);
  try {
    await writeAtomically(path, async (handle) => {
      await handle.write(header.bytes, 0, header.bytes.byteLength, 0);
      let position = header.bytes.byteLength;
      for (const entry of header.layout) {
        const tensor = tensors[entry.name]!;
        const elementBytes = bytesPerElement(entry.dtype);
        const perChunk = chunk / elementBytes;
        for (let start = 0; start < tensor.size; start += perChunk) {
          const count = Math.min(perChunk, tensor.size - start);
          const host = await tensor.backend.read(window(tensor, op, start, count));
          const data = new Uint8Array(host.buffer, host.byteOffset, count * elementBytes);
          let written = 0;
          while (written < data.byteLength) {
            const { bytesWritten } = await handle.write(
              data,
              written,
              data.byteLength - written,
              position + written,
            );
            written += bytesWritten;
          }
          position += data.byteLength;
        }
      }
    });
  } catch (error) {
    const opening = (error as { syscall?: unknown } | null)?.syscall === 'open';
    throw asFileError(error, op, path, opening ? 'cannot open' : 'cannot write');
  }
}

import { attachProgressBoard, progressReportOf } from '../../progress/progress.js';
import { SharedProgressBoard } from '../../progress/shared-progress-board.js';
import { ProcessGroup, type ProcessGroupOptions } from '../../process-group.js';
import type { ShmHandle } from './shm-layout.js';
import { ShmTransport } from './shm-transport.js';

/**
 * Attach rank `rank` of a shared-memory world and return its world group. Works in any thread
 * that received the handle (a Node worker, or a browser Web Worker given the handle by
 * `postMessage` on a cross-origin-isolated page).
 */
export function joinShm(
  handle: ShmHandle,
  rank: number,
  options: ProcessGroupOptions = {},
): ProcessGroup {
  return ProcessGroup.fromTransport(shmTransport(handle, rank), options);
}

/**
 * `transport` (rank `rank`'s end of `handle`'s rings, a `ShmTransport` unless given) with the
 * world's progress board attached where it has one (what `webshard-run` reads to blame a stall).
 */
export function shmTransport(
  handle: ShmHandle,
  rank: number,
  transport: ShmTransport = new ShmTransport(handle, rank),
): ShmTransport {
  if (handle.progress !== undefined) {
    const report = () => progressReportOf(transport);
    const board = new SharedProgressBoard(handle.progress, rank, handle.size, report);
    attachProgressBoard(transport, board);
  }
  return transport;
}

/// <reference types="@webgpu/types" />
import type { RecordedWork, WorkRecorder } from '../backend.js';
import { ArgumentError } from '../../errors.js';

/**
 * [Note: a captured step on WebGPU]
 * A captured step ([Note: the captured step] in capture/captured-step.ts) replays the kernel calls
 * of one training step. On the CPU backend a call is its kernel; on WebGPU a call is host work
 * that ends in commands on the device's queue: checking operands, building the launch (its WGSL
 * key, its params), writing the params into a pooled uniform buffer, creating a bind group, and
 * only then the dispatch. A replay of the calls would do all of that again, every step, for the
 * same commands. So while a step is captured on WebGPU, the queue keeps what each top-level call
 * queued (`DeviceQueue.record`: its dispatches with their buffers and params, its copies and
 * writes), and the tape replays that instead of the call: each dispatch with a params buffer and
 * a bind group of its own, written and made once, encoded into the queue's open command encoder
 * (submitted every 64 dispatches and at every read, as eager work is). The buffers are the
 * capture's, which the tape's memory plan keeps for the step (temporaries included), so a replay
 * writes where the capture wrote; the params are the capture's, so host steps (Adam's step count
 * and learning rate, the clip's factor) stay host steps and run their kernels the eager way.
 * The commands of a replay are the capture's in the capture's order: the same bits.
 */

/** A buffer-to-buffer copy, as the queue holds it and a recording keeps it. */
export interface CopyCommand {
  kind: 'copy';
  src: GPUBuffer;
  srcOffset: number;
  dst: GPUBuffer;
  dstOffset: number;
  size: number;
}

/** What one kernel call queued, as `DeviceQueue.record` keeps it. */
export type QueuedWork =
  | {
      kind: 'dispatch';
      key: string;
      /** The storage bindings, in binding order (the params and the error flag come after). */
      buffers: GPUBuffer[];
      /** Per storage binding: whether the kernel writes it. */
      writable: boolean[];
      params: Uint32Array<ArrayBuffer>;
      usesError: boolean;
      workgroups: [number, number, number];
    }
  | CopyCommand
  | { kind: 'write'; dst: GPUBuffer; byteOffset: number; data: ArrayBuffer };

/** A recorded dispatch as a replay queues it: every binding its own, the bind group kept. */
export interface RecordedDispatch {
  readonly key: string;
  readonly buffers: readonly GPUBuffer[];
  readonly workgroups: readonly [number, number, number];
  bindGroup?: GPUBindGroup;
}

/** What a replay asks of the reads in flight ([Note: chunked reads through pooled staging]). */
interface WriteGuard {
  beforeWrite(buffer: GPUBuffer): void;
}

/** The queue's side of a replay (structural, so that this file and the queue import no circle). */
export interface RecordingQueue {
  readonly errorFlag: GPUBuffer;
  record(call: () => void): QueuedWork[];
  ownParams(params: Uint32Array<ArrayBuffer>): GPUBuffer;
  enqueueRecorded(dispatch: RecordedDispatch): void;
  copy(src: GPUBuffer, srcOffset: number, dst: GPUBuffer, dstOffset: number, size: number): void;
  write(dst: GPUBuffer, byteOffset: number, data: ArrayBuffer): void;
  destroyLater(buffer: GPUBuffer): void;
}

type Step =
  | { kind: 'dispatch'; dispatch: RecordedDispatch; params: GPUBuffer; writes: GPUBuffer[] }
  | Extract<QueuedWork, { kind: 'copy' | 'write' }>;

/** One kernel call's queued work, ready to queue again. */
class WebGpuRecordedWork implements RecordedWork {
  disposed = false;
  constructor(readonly steps: readonly Step[]) {}
  get commands(): number {
    return this.steps.length;
  }
}

/** The WebGPU backend's `workRecorder`: `live` throws once the backend is disposed. */
export function webGpuWorkRecorder(
  queue: RecordingQueue,
  readbacks: WriteGuard,
  live: () => void,
): WorkRecorder {
  return {
    record: (call) => recordWork(queue, call),
    replay: (work) => {
      live();
      replayWork(queue, readbacks, work);
    },
    dispose: (work) => disposeWork(queue, work),
  };
}

/** Runs `call` and keeps what it queued, each dispatch with its own params buffer. */
function recordWork(queue: RecordingQueue, call: () => void): RecordedWork {
  const steps = queue.record(call).map((work): Step => {
    if (work.kind !== 'dispatch') return work;
    const params = queue.ownParams(work.params);
    const buffers = [...work.buffers, params, ...(work.usesError ? [queue.errorFlag] : [])];
    const writes = work.buffers.filter((_, i) => work.writable[i]);
    const dispatch = { key: work.key, buffers, workgroups: work.workgroups };
    return { kind: 'dispatch', dispatch, params, writes };
  });
  return new WebGpuRecordedWork(steps);
}

/** Queue `work` again: the same commands, on the same buffers. */
function replayWork(queue: RecordingQueue, readbacks: WriteGuard, work: RecordedWork): void {
  const recorded = asRecorded(work);
  for (const step of recorded.steps) {
    if (step.kind === 'dispatch') {
      // A read in flight from a buffer this writes copies its range first, as in `dispatch`.
      for (const buffer of step.writes) readbacks.beforeWrite(buffer);
      queue.enqueueRecorded(step.dispatch);
    } else if (step.kind === 'copy') {
      readbacks.beforeWrite(step.dst);
      queue.copy(step.src, step.srcOffset, step.dst, step.dstOffset, step.size);
    } else {
      readbacks.beforeWrite(step.dst);
      queue.write(step.dst, step.byteOffset, step.data);
    }
  }
}

/** Destroy the params buffers `work` made (after the commands queued so far). */
function disposeWork(queue: RecordingQueue, work: RecordedWork): void {
  const recorded = asRecorded(work);
  if (recorded.disposed) return;
  recorded.disposed = true;
  for (const step of recorded.steps) if (step.kind === 'dispatch') queue.destroyLater(step.params);
}

function asRecorded(work: RecordedWork): WebGpuRecordedWork {
  if (!(work instanceof WebGpuRecordedWork)) {
    throw new ArgumentError('CapturedStep', 'recorded work from another backend');
  }
  return work;
}

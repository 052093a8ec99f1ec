/// <reference types="@webgpu/types" />
import { BackendError, IndexError } from '../../errors.js';
import { BufferUsage } from './gpu-runtime.js';
import type { Launch } from './program.js';
import type { CopyCommand, QueuedWork, RecordedDispatch } from './recorded-work.js';
import { PACKED_TARGET, preamble, type WgslTarget, withTarget } from './wgsl.js';

/**
 * [Note: the command queue]
 *
 * Kernel calls are synchronous and return at once; pipelines compile asynchronously
 * (`createComputePipelineAsync`, up to 3 s on SwiftShader). So every call appends a command to a
 * queue, and the queue is encoded into the open command encoder as far as the pipelines allow: a
 * dispatch whose pipeline is still compiling stops encoding there, and later commands wait behind it
 * (order is what matters, not when). The encoder is submitted every `SUBMIT_EVERY` dispatches and on
 * `flush`, which first awaits the pipelines the queue waits on. Host writes go through the same
 * queue (a `queue.writeBuffer` runs on the queue timeline at once, so it must not overtake kernels
 * still waiting to be encoded).
 *
 * Buffers released while commands that use them are queued may be handed out again by the
 * allocator: the new owner's commands come later in the same queue, so they see the right data.
 * Destroying one must wait until the queue has been submitted (`destroyLater`).
 *
 * Uniform params are the exception: a launch writes them at once (`queue.writeBuffer`, on the
 * queue timeline now), into a small pooled buffer the dispatch command carries. That buffer goes
 * back to the pool only when a submit has taken the dispatch's encoding with it; the params of a
 * dispatch still waiting behind a compiling pipeline stay with it through earlier submits, or a
 * later launch would overwrite them before the dispatch runs.
 *
 * [Note: deferred index errors]
 *
 * gather, scatterAdd and the cross-entropy kernels check their indices on the device: an index out
 * of range sets a small error-flag buffer ([op code, index, bound]) and the kernel carries on with a
 * clamped (in-bounds) index. Like CUDA's device-side asserts, the error surfaces later: every
 * `read` and `sync` copies the flag back with its data and throws an `IndexError` naming the op,
 * then clears the flag. Checking on the host instead would need a read-back per kernel.
 */
type PipelineEntry =
  | { state: 'compiling'; promise: Promise<void> }
  | { state: 'ready'; pipeline: GPUComputePipeline }
  | { state: 'failed'; error: Error };

type Command =
  | {
      kind: 'dispatch';
      key: string;
      name: string;
      buffers: GPUBuffer[];
      /** This dispatch's params buffer (also the last but one or last of `buffers`). */
      params: GPUBuffer;
      workgroups: [number, number, number];
    }
  | CopyCommand
  | {
      kind: 'write';
      dst: GPUBuffer;
      byteOffset: number;
      data: ArrayBuffer | ArrayBufferView<ArrayBuffer>;
      done: (() => void) | undefined;
    }
  | { kind: 'release'; action: () => void }
  | { kind: 'recorded'; dispatch: RecordedDispatch };

const SUBMIT_EVERY = 64;
const PARAM_BYTES = 256;

/** A plain copy of `data` that the caller may not change under a replay. */
function copyOf(data: ArrayBuffer | ArrayBufferView<ArrayBuffer>): ArrayBuffer {
  const bytes = ArrayBuffer.isView(data)
    ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
    : new Uint8Array(data);
  return bytes.slice().buffer;
}

export const ERROR_OPS = ['', 'gather', 'scatterAdd', 'crossEntropy', 'crossEntropyBackward'];

export class DeviceQueue {
  private readonly pipelines = new Map<string, PipelineEntry>();
  private readonly commands: Command[] = [];
  private encoder: GPUCommandEncoder | undefined;
  private pass: GPUComputePassEncoder | undefined;
  private encodedDispatches = 0;
  /**
   * Param buffers of the dispatches encoded into the open encoder, returned to `freeParams` on
   * submit (not those of dispatches still queued; see [Note: the command queue]).
   */
  private usedParams: GPUBuffer[] = [];
  private readonly freeParams: GPUBuffer[] = [];
  private readonly pendingDestroy: GPUBuffer[] = [];
  private deviceError: Error | undefined;
  /** While `record` runs a call: what the call puts on the queue, kept for a replay. */
  private recording: QueuedWork[] | undefined;
  readonly errorFlag: GPUBuffer;

  /** `target`: the storage layout kernels are generated for (see [Note: native f16 storage]). */
  constructor(
    readonly device: GPUDevice,
    readonly target: WgslTarget = PACKED_TARGET,
  ) {
    this.errorFlag = device.createBuffer({
      size: 16,
      usage: BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST,
    });
    device.addEventListener('uncapturederror', (event) => {
      const e = (event as GPUUncapturedErrorEvent).error;
      this.deviceError ??= new BackendError('webgpu', `device error: ${e.message}`);
    });
  }

  /** Enqueue a program launch. */
  launch(launch: Launch, buffers: GPUBuffer[]): void {
    const { program } = launch;
    const key = program.key;
    if (!this.pipelines.has(key)) {
      this.compile(
        key,
        preamble(this.target) + withTarget(this.target, () => program.wgsl(launch.dtypes)),
      );
    }
    const workgroups = withTarget(this.target, () => program.dispatch(launch.shape, launch.params));
    this.recording?.push({
      kind: 'dispatch',
      key,
      buffers: [...buffers],
      writable: launch.bindings.map((b) => b.writable),
      params: launch.params.slice(),
      usesError: launch.usesError,
      workgroups,
    });
    const params = this.freeParams.pop() ?? this.createParamBuffer();
    this.device.queue.writeBuffer(params, 0, launch.params);
    const all = [...buffers, params];
    if (launch.usesError) all.push(this.errorFlag);
    this.commands.push({
      kind: 'dispatch',
      key,
      name: program.name,
      buffers: all,
      params,
      workgroups,
    });
    this.pump();
  }

  copy(src: GPUBuffer, srcOffset: number, dst: GPUBuffer, dstOffset: number, size: number): void {
    this.recording?.push({ kind: 'copy', src, srcOffset, dst, dstOffset, size });
    this.commands.push({ kind: 'copy', src, srcOffset, dst, dstOffset, size });
    this.pump();
  }

  /**
   * `data` (never a view on shared memory) is the queue's until the write has run: then `done` is
   * called, and the caller may reuse it.
   */
  write(
    dst: GPUBuffer,
    byteOffset: number,
    data: ArrayBuffer | ArrayBufferView<ArrayBuffer>,
    done?: () => void,
  ): void {
    this.recording?.push({ kind: 'write', dst, byteOffset, data: copyOf(data) });
    this.commands.push({ kind: 'write', dst, byteOffset, data, done });
    this.pump();
  }

  /** True when nothing waits to be encoded, so a host write may go straight to the device queue. */
  get idle(): boolean {
    return this.commands.length === 0;
  }

  /** Writes a (non-shared) view now; only when `idle`. */
  writeNow(dst: GPUBuffer, byteOffset: number, view: ArrayBufferView<ArrayBuffer>): void {
    this.recording?.push({ kind: 'write', dst, byteOffset, data: copyOf(view) });
    this.submit();
    this.device.queue.writeBuffer(dst, byteOffset, view);
  }

  /**
   * Runs `call` (one kernel call) and returns the dispatches, copies and writes it queued, for a
   * replay that queues them again without the call ([Note: a captured step on WebGPU]). What
   * the call's queue work does to the allocator (a temporary's release) is not kept.
   */
  record(call: () => void): QueuedWork[] {
    const outer = this.recording;
    const work: QueuedWork[] = [];
    this.recording = work;
    try {
      call();
    } finally {
      this.recording = outer;
    }
    outer?.push(...work);
    return work;
  }

  /** Queue a recorded dispatch: its params and bind group are its own, made once. */
  enqueueRecorded(dispatch: RecordedDispatch): void {
    this.commands.push({ kind: 'recorded', dispatch });
    this.pump();
  }

  /** A params buffer outside the pool, for a recorded dispatch (destroy it with `destroyLater`). */
  ownParams(params: Uint32Array<ArrayBuffer>): GPUBuffer {
    const buffer = this.createParamBuffer();
    this.device.queue.writeBuffer(buffer, 0, params);
    return buffer;
  }

  /** Run `action` once every command queued so far is submitted. */
  afterSubmit(action: () => void): void {
    this.commands.push({ kind: 'release', action });
    this.pump();
  }

  destroyLater(buffer: GPUBuffer): void {
    if (this.commands.length === 0 && this.encoder === undefined) buffer.destroy();
    else this.pendingDestroy.push(buffer);
  }

  /** Encode and submit everything queued, waiting for pipelines still compiling. */
  async flush(): Promise<void> {
    for (;;) {
      const waiting = this.blockingPipeline();
      if (waiting === undefined) break;
      await waiting;
    }
    this.pump();
    this.submit();
    if (this.deviceError) {
      const error = this.deviceError;
      this.deviceError = undefined;
      throw error;
    }
  }

  /** Throws the deferred index error recorded in `flag` (4 u32 words), if any. */
  static checkErrorFlag(flag: Uint32Array): void {
    const code = flag[0] ?? 0;
    if (code === 0) return;
    const op = ERROR_OPS[code] ?? 'webgpu';
    throw new IndexError(
      op,
      flag[1]! | 0,
      flag[2] ?? 0,
      'raised on the device by an earlier kernel',
    );
  }

  clearErrorFlag(): void {
    this.write(this.errorFlag, 0, new ArrayBuffer(16));
  }

  private blockingPipeline(): Promise<void> | undefined {
    for (const c of this.commands) {
      if (c.kind !== 'dispatch' && c.kind !== 'recorded') continue;
      const entry = this.pipelines.get(c.kind === 'dispatch' ? c.key : c.dispatch.key);
      if (entry?.state === 'compiling') return entry.promise;
    }
    return undefined;
  }

  private createParamBuffer(): GPUBuffer {
    return this.device.createBuffer({
      size: PARAM_BYTES,
      usage: BufferUsage.STORAGE | BufferUsage.COPY_DST,
    });
  }

  private compile(key: string, code: string): void {
    const module = this.device.createShaderModule({ code, label: key });
    const promise = this.device
      .createComputePipelineAsync({ layout: 'auto', compute: { module, entryPoint: 'main' } })
      .then(
        (pipeline) => {
          this.pipelines.set(key, { state: 'ready', pipeline });
          this.pump();
        },
        (error: unknown) => {
          this.pipelines.set(key, {
            state: 'failed',
            error: new BackendError('webgpu', `pipeline ${key} failed to compile`, {
              cause: error,
            }),
          });
          this.pump();
        },
      );
    this.pipelines.set(key, { state: 'compiling', promise });
  }

  private pump(): void {
    while (this.commands.length > 0) {
      const c = this.commands[0]!;
      if (c.kind === 'dispatch') {
        const entry = this.pipelines.get(c.key);
        if (entry === undefined || entry.state === 'compiling') return;
        this.commands.shift();
        if (entry.state === 'failed') {
          // Never encoded: no command reads its params, and later writes come after on the queue.
          this.freeParams.push(c.params);
          this.deviceError ??= entry.error;
          continue;
        }
        this.usedParams.push(c.params);
        this.encodeDispatch(entry.pipeline, c.buffers, c.workgroups);
      } else if (c.kind === 'recorded') {
        const entry = this.pipelines.get(c.dispatch.key);
        if (entry === undefined || entry.state === 'compiling') return;
        this.commands.shift();
        if (entry.state === 'failed') {
          this.deviceError ??= entry.error;
          continue;
        }
        this.encodeDispatch(entry.pipeline, c.dispatch.buffers, c.dispatch.workgroups, c.dispatch);
      } else if (c.kind === 'copy') {
        this.commands.shift();
        this.endPass();
        this.openEncoder().copyBufferToBuffer(c.src, c.srcOffset, c.dst, c.dstOffset, c.size);
      } else if (c.kind === 'write') {
        this.commands.shift();
        this.submit();
        this.device.queue.writeBuffer(c.dst, c.byteOffset, c.data);
        c.done?.();
      } else {
        this.commands.shift();
        this.submit();
        c.action();
      }
    }
  }

  private openEncoder(): GPUCommandEncoder {
    this.encoder ??= this.device.createCommandEncoder();
    return this.encoder;
  }

  private endPass(): void {
    this.pass?.end();
    this.pass = undefined;
  }

  /** `cache`: a recorded dispatch, whose bind group is made at its first encoding and kept. */
  private encodeDispatch(
    pipeline: GPUComputePipeline,
    buffers: readonly GPUBuffer[],
    workgroups: readonly [number, number, number],
    cache?: { bindGroup?: GPUBindGroup },
  ): void {
    const bindGroup =
      cache?.bindGroup ??
      this.device.createBindGroup({
        layout: pipeline.getBindGroupLayout(0),
        entries: buffers.map((buffer, binding) => ({ binding, resource: { buffer } })),
      });
    if (cache !== undefined) cache.bindGroup = bindGroup;
    this.pass ??= this.openEncoder().beginComputePass();
    this.pass.setPipeline(pipeline);
    this.pass.setBindGroup(0, bindGroup);
    this.pass.dispatchWorkgroups(workgroups[0], workgroups[1], workgroups[2]);
    this.encodedDispatches++;
    if (this.encodedDispatches >= SUBMIT_EVERY) this.submit();
  }

  private submit(): void {
    this.endPass();
    if (this.encoder !== undefined) {
      this.device.queue.submit([this.encoder.finish()]);
      this.encoder = undefined;
    }
    this.encodedDispatches = 0;
    this.freeParams.push(...this.usedParams);
    this.usedParams = [];
    if (this.commands.length === 0) {
      for (const b of this.pendingDestroy.splice(0)) b.destroy();
    }
  }
}

import type { HostData, CommDType } from '../operand.js';
import type { ProcessGroup } from '../process-group.js';
import type { Transport } from '../transport-contract.js';
import type { Placement } from './program.js';
import type { Bits } from './reference.js';

/** The bits of a host array (the same memory). */
export function bitsOf(data: HostData): Bits {
  return data instanceof Uint16Array
    ? data
    : new Uint32Array(data.buffer, data.byteOffset, data.length);
}

/** Where operands actually landed, by place: `plain`, or `segment N` of registered memory. */
export type PlacementCounts = Record<string, number>;

/**
 * A rank's operands for one batch of a stress program ([Note: stress programs]): ordinary arrays,
 * registered buffers of the world group (freed after the batch), views at odd offsets, and views
 * at the end of the rank's big registered buffer (`ballastBytes`, allocated once), handed out
 * from its end down, so operands of one batch never overlap.
 */
export class StressOperands {
  private readonly registered: HostData[] = [];
  private ballast: Float32Array | null = null;
  private cursor = 0;
  /** Where operands landed (see `PlacementCounts`), for the report. */
  readonly counts: PlacementCounts = {};

  constructor(
    private readonly world: ProcessGroup,
    private readonly ballastBytes: number,
  ) {}

  /** Allocates the big registered buffer (the ranks together push registered memory past 2 GiB). */
  start(): void {
    if (this.ballastBytes > 0 && this.world.allocatesRegistered) {
      this.ballast = this.world.allocate('f32', Math.floor(this.ballastBytes / 4));
      this.cursor = this.ballast.byteLength;
    }
  }

  /** The registered segment of the big buffer, or -1. */
  get ballastSegment(): number {
    return this.ballast === null ? -1 : this.segmentOf(this.ballast);
  }

  /** A new operand of `count` elements placed as `placement` says (`salt` varies the offsets). */
  make(placement: Placement, dtype: CommDType, count: number, salt: number): HostData {
    const Ctor = dtype === 'f32' ? Float32Array : dtype === 'i32' ? Int32Array : Uint16Array;
    const element = Ctor.BYTES_PER_ELEMENT;
    let data: HostData;
    switch (placement) {
      case 'registered':
        data = this.world.allocate(dtype, count);
        if (this.world.allocatesRegistered) this.registered.push(data);
        break;
      case 'view': {
        const skip = 1 + (salt % 7);
        data = new Ctor(count + skip + 3).subarray(skip, skip + count);
        break;
      }
      case 'registeredView': {
        const skip = 1 + (salt % 7);
        const whole = this.world.allocate(dtype, count + skip + 3);
        if (this.world.allocatesRegistered) this.registered.push(whole);
        data = whole.subarray(skip, skip + count);
        break;
      }
      case 'bigTail': {
        const bytes = Math.ceil((count * element) / 64) * 64;
        if (this.ballast !== null && bytes <= this.cursor) {
          this.cursor -= bytes;
          data = new Ctor(
            this.ballast.buffer as ArrayBuffer,
            this.ballast.byteOffset + this.cursor,
            count,
          );
        } else {
          data = new Ctor(count);
        }
        break;
      }
      default:
        data = new Ctor(count);
    }
    const place = this.segmentOf(data);
    const registered =
      placement === 'registered' || (placement === 'bigTail' && this.ballast !== null);
    const name =
      place >= 0
        ? `segment ${place}`
        : registered && this.world.allocatesRegistered
          ? 'registered'
          : 'plain';
    this.counts[name] = (this.counts[name] ?? 0) + 1;
    return data;
  }

  /** Frees the batch's registered buffers and hands the big buffer's end out again. */
  endBatch(): void {
    for (const data of this.registered.splice(0)) this.world.free(data);
    if (this.ballast !== null) this.cursor = this.ballast.byteLength;
  }

  /** Frees everything. */
  dispose(): void {
    this.endBatch();
    if (this.ballast !== null) this.world.free(this.ballast);
    this.ballast = null;
  }

  /** The registered segment `data` lies in, or -1 (ordinary memory, or a transport without). */
  segmentOf(data: HostData): number {
    // A two-level world's registered buffers live in its node's arena, that of the shm transport
    // under it (`TwoLevelTransport.local`).
    const transport = this.world.transport as Transport & { readonly local?: Transport };
    const arena = transport.sharedArena ?? transport.local?.sharedArena;
    return arena?.registered.segmentOf(data.buffer) ?? -1;
  }
}

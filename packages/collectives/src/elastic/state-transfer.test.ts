import { ArgumentError } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { createLocalGroups } from '../transports/local/local-transport.js';
import { broadcastState, type StateValue } from './state-transfer.js';

describe('broadcastState ([Note: elastic state transfer])', () => {
  it('copies every entry of rank 0 bit for bit, NaN payloads and odd byte lengths included', async () => {
    const groups = createLocalGroups(3);
    const params = new Float32Array([1.5, -0, Number.NaN, 3e-39]);
    new Uint32Array(params.buffer)[2] = 0x7fc01234; // a NaN with a payload
    const bytes = new Uint8Array([1, 2, 3, 4, 5]).subarray(1); // offset 1, length 4: a copy path
    const odd = new Uint8Array([9, 8, 7]);
    const state = new Map<string, StateValue>([
      ['params', params],
      ['moments', new Uint16Array([1, 65535, 7])],
      ['step', new Int32Array([42])],
      ['bytes', bytes],
      ['odd', odd],
      ['empty', new Float32Array(0)],
    ]);
    // Rank 1 overwrites its own arrays in place; rank 2 starts with nothing.
    const own = new Map<string, StateValue>([
      ['params', new Float32Array(4)],
      ['moments', new Uint16Array(3)],
      ['step', new Int32Array(1)],
      ['bytes', new Uint8Array(4)],
      ['odd', new Uint8Array(3)],
      ['empty', new Float32Array(0)],
    ]);
    const [r0, r1, r2] = await Promise.all([
      broadcastState(groups[0]!, state),
      broadcastState(groups[1]!, own),
      broadcastState(groups[2]!, undefined),
    ]);
    expect(r1!.get('params')).toBe(own.get('params'));
    for (const result of [r0!, r1!, r2!]) {
      expect([...result.keys()]).toEqual([...state.keys()]);
      for (const [name, value] of state) {
        const got = result.get(name)!;
        expect(got.constructor).toBe(value.constructor);
        expect(Buffer.from(got.buffer, got.byteOffset, got.byteLength)).toEqual(
          Buffer.from(value.buffer, value.byteOffset, value.byteLength),
        );
      }
    }
    await Promise.all(groups.map((g) => g.close()));
  });

  it('refuses an entry whose type or length differs from the root, and aborts the group', async () => {
    const groups = createLocalGroups(2);
    const results = await Promise.allSettled([
      broadcastState(groups[0]!, new Map([['params', new Float32Array(4)]])),
      broadcastState(groups[1]!, new Map([['params', new Float32Array(3)]])),
    ]);
    expect(results[1]).toMatchObject({ status: 'rejected' });
    const error = (results[1] as PromiseRejectedResult).reason as Error;
    expect(error).toBeInstanceOf(ArgumentError);
    expect(error.message).toBe(
      "[broadcastState] rank 1: entry 'params' is f32[3] here, f32[4] on rank 0",
    );
    expect(results[0]).toMatchObject({ status: 'rejected' });
    await Promise.all(groups.map((g) => g.close().catch(() => {})));
  });
});

import { describe, expect, it } from 'vitest';
import { RegisteredMemoryError } from './errors.js';
import { RegisteredSegments, SEGMENT_SPAN, splitAddress } from './registered-segments.js';
import { inputValue } from './test-support/shm/shm-registered-cases.js';
import type { SegmentsJob, SegmentsReport } from './test-support/shm/registered-segments-worker.js';
import { tsxBootstrap } from './test-support/shm/shm-suite-run.js';
import { launchThreads } from './transports/shm/launch-threads.js';

/** Two small segments (word 0 of each is its pointer, starting past the first line). */
function segments(pages: number[], limit: number): RegisteredSegments {
  const sources = pages.map((maximum) => {
    const memory = new WebAssembly.Memory({ initial: 1, maximum, shared: true });
    new Int32Array(memory.buffer)[0] = 1;
    return { memory, word: 0, limit: maximum * 65536 };
  });
  return new RegisteredSegments(sources, 3, limit);
}

describe('registered segments', () => {
  it('spill into the next segment when one is full, reuse freed allocations zeroed, and refuse past the last with what to do', () => {
    const memory = segments([2, 3], 32 * 2 ** 30);
    const a = memory.allocate(100_000);
    expect(splitAddress(a)).toEqual({ segment: 0, offset: 64 });
    // 100032 + 64 + 40000 > 131072: segment 0 is full for everyone from now on.
    const b = memory.allocate(40_000);
    expect(splitAddress(b)).toEqual({ segment: 1, offset: 64 });
    const c = memory.allocate(64);
    expect(splitAddress(c).segment).toBe(1);
    expect(memory.segment(1).buffer.byteLength).toBe(65536);
    const view = new Uint8Array(memory.segment(1).buffer, splitAddress(b).offset, 40_000);
    view.fill(7);
    memory.release(b, 40_000);
    expect(memory.allocate(39_990)).toBe(b);
    expect(view.every((v) => v === 0)).toBe(true);
    expect(memory.segmentOf(memory.segment(1).buffer)).toBe(1);
    expect(memory.segmentOf(new SharedArrayBuffer(8))).toBe(-1);
    const refused = (() => {
      try {
        memory.allocate(200_000);
      } catch (error) {
        return error;
      }
    })();
    expect(refused).toBeInstanceOf(RegisteredMemoryError);
    expect((refused as Error).message).toBe(
      "[allocate] rank 3: 200000 bytes of registered memory cannot be had: the world's 32 GiB of registered memory are spent (196608 bytes committed by the world). Raise the shm handle's registeredBytes (launcher option shm.registeredBytes), run fewer ranks on this machine, shard further (FSDP) or use --transport tcp",
    );
    expect(() => memory.allocate(SEGMENT_SPAN)).toThrow(/larger than one 2 GiB segment/);
  });

  // Past the old 2 GiB ceiling of the shm arena: every rank allocates its share of 2.25 GiB (left
  // unwritten but its tail, so little of it is committed), then collectives on buffers in segment
  // 1 run in place and ones spread over two segments take the copying schedules, with the same bits.
  for (const size of [2, 3]) {
    it(`collectives on registered memory past 2 GiB in all, ${size} ranks`, async () => {
      const job: SegmentsJob = {
        bigBytes: Math.ceil((2.25 * 2 ** 30) / size / 64) * 64,
        count: 70_001,
      };
      const outcomes = await launchThreads<SegmentsJob, SegmentsReport>(
        size,
        tsxBootstrap('./registered-segments-worker.ts'),
        job,
        { eval: true, execArgv: ['--conditions=@webshard/source'], group: { timeoutMs: 30_000 } },
      );
      const reports = outcomes.map((outcome) => {
        expect(outcome.status, JSON.stringify(outcome).slice(0, 2000)).toBe('fulfilled');
        return (outcome as { value: SegmentsReport }).value;
      });
      expect(reports.map((r) => r.bigSegment).sort()).toEqual(
        Array.from({ length: size }, (_, r) => (r < Math.floor(2 ** 31 / job.bigBytes) ? 0 : 1)),
      );
      const sum = (i: number) => {
        let acc = inputValue('f32', 0, i);
        for (let r = 1; r < size; r++) acc = Math.fround(acc + inputValue('f32', r, i));
        return acc;
      };
      for (const [rank, report] of reports.entries()) {
        expect(report.smallSegment).toBe(1);
        expect(report.reusedZeroed).toBe(true);
        for (const c of report.cases) {
          expect(c.result, c.op).toEqual(c.copied);
          const inPlace = c.op.endsWith('one segment') || c.op.endsWith('registered');
          if (inPlace) expect(c.rounds, c.op).toBe(0);
          else expect(c.rounds, c.op).toBeGreaterThan(0);
        }
        const [allReduce] = report.cases;
        expect(allReduce!.result.slice(0, 5)).toEqual([0, 1, 2, 3, 4].map(sum));
        expect(allReduce!.result[job.count - 1]).toBe(sum(job.count - 1));
        expect(rank).toBeGreaterThanOrEqual(0);
      }
    }, 60_000);
  }
});

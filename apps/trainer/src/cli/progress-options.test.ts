import { describe, expect, it } from 'vitest';
import type { TrainConfig } from '../config.js';
import { UsageError } from '../errors.js';
import { parseOptions } from './options.js';
import { defaultCommProgress } from './progress-options.js';

const parse = (...argv: string[]) => parseOptions(argv, '/home/user/work') as TrainConfig;
const STREAMED = ['--strategy', 'diloco', '--inner-steps', '10', '--outer-fragments', '2'];

function usageOf(fn: () => unknown): [string, string | undefined] {
  try {
    fn();
  } catch (error) {
    expect(UsageError.isInstance(error)).toBe(true);
    return [(error as UsageError).message, (error as UsageError).option];
  }
  throw new Error('no UsageError');
}

describe('--comm-progress', () => {
  it('is kept as given over tcp and ws, and absent when not given', () => {
    const ddp = ['--strategy', 'ddp'];
    expect(parse(...ddp, '--transport', 'tcp', '--comm-progress', 'worker').commProgress).toBe(
      'worker',
    );
    expect(parse(...ddp, '--transport', 'ws', '--comm-progress', 'thread').commProgress).toBe(
      'thread',
    );
    expect(parse(...ddp, '--transport', 'tcp').commProgress).toBeUndefined();
  });

  it('refuses a mode it does not know, and worker where every rank shares one thread (local)', () => {
    expect(
      usageOf(() => parse('--strategy', 'ddp', '--transport', 'tcp', '--comm-progress', 'thread2')),
    ).toEqual(['--comm-progress must be thread or worker, got thread2', '--comm-progress']);
    expect(
      usageOf(() =>
        parse('--strategy', 'ddp', '--transport', 'local', '--comm-progress', 'worker'),
      )[0],
    ).toContain('--transport local has none');
    // Thread ranks over shm hand their rings to the worker.
    expect(
      parse('--strategy', 'ddp', '--transport', 'shm', '--comm-progress', 'worker').commProgress,
    ).toBe('worker');
  });

  it('refuses worker with --elastic, whose group is built anew at each change on the thread', () => {
    const elastic = ['--transport', 'tcp', '--elastic', 'ws://127.0.0.1:1', ...STREAMED];
    expect(usageOf(() => parse(...elastic, '--comm-progress', 'worker'))).toEqual([
      "--comm-progress worker is not available with --elastic: an elastic world builds its group anew at each change, on the rank's thread",
      '--comm-progress',
    ]);
    expect(parse(...elastic, '--comm-progress', 'thread').commProgress).toBe('thread');
    expect(defaultCommProgress(parse(...elastic))).toBe('thread');
  });

  it('defaults to worker for a streamed diloco run, thread for the rest', () => {
    expect(defaultCommProgress(parse('--transport', 'tcp', ...STREAMED))).toBe('worker');
    expect(
      defaultCommProgress(
        parse('--transport', 'tcp', ...['--strategy', 'diloco', '--outer-overlap', '0']),
      ),
    ).toBe('thread');
    expect(defaultCommProgress(parse('--transport', 'tcp', '--strategy', 'ddp'))).toBe('thread');
    // Tabs train ddp or fsdp only (refused at the flags for diloco): their config, as built.
    const withTabs = { ...parse('--transport', 'ws', ...STREAMED), browserRanks: 1 };
    expect(defaultCommProgress(withTabs)).toBe('thread');
  });
});

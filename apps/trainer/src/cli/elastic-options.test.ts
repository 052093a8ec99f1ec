import { describe, expect, it } from 'vitest';
import type { TrainConfig } from '../config.js';
import { UsageError } from '../errors.js';
import { parseOptions } from './options.js';

const parse = (...argv: string[]) => parseOptions(argv, '/home/user/work') as TrainConfig;
const URL = 'ws://10.0.0.5:29400';

function expectUsage(fn: () => unknown, message: string, option: string): void {
  let thrown: unknown;
  try {
    fn();
  } catch (error) {
    thrown = error;
  }
  expect(UsageError.isInstance(thrown), message).toBe(true);
  expect((thrown as UsageError).message).toBe(message);
  expect((thrown as UsageError).option).toBe(option);
}

describe('the elastic flags', () => {
  it('--elastic joins over tcp by default, or ws; the coordinator has its bounds and wait', () => {
    expect(parse('--strategy', 'ddp', '--elastic', URL)).toMatchObject({
      elastic: URL,
      elasticCoordinator: null,
      transport: 'tcp',
    });
    expect(parse('--strategy', 'ddp', '--elastic', URL, '--transport', 'ws').transport).toBe('ws');
    expect(parse('--strategy', 'diloco', '--elastic', URL)).toMatchObject({
      strategy: 'diloco',
      elastic: URL,
    });
    expectUsage(
      () =>
        parse(
          '--strategy',
          'diloco',
          '--elastic',
          URL,
          '--checkpoint-dir',
          'c',
          '--checkpoint-every',
          '2',
        ),
      '--elastic with --strategy diloco moves the state between live members: --checkpoint-dir does not apply',
      '--checkpoint-dir',
    );
    expect(parse('--elastic-coordinator', '29400').elasticCoordinator).toEqual({
      port: 29400,
      minWorldSize: 1,
      maxWorldSize: 64,
      waitSeconds: 60,
      page: false,
      memberTimeoutSeconds: 60,
      syncTimeoutSeconds: 300,
      statePath: null,
    });
    expect(
      parse(
        '--elastic-coordinator',
        '0',
        '--min-world-size',
        '2',
        '--max-world-size',
        '3',
        '--elastic-wait-seconds',
        '5',
        '--member-timeout',
        '4',
        '--sync-timeout',
        '9',
        '--coordinator-state',
        'world.json',
      ).elasticCoordinator,
    ).toEqual({
      port: 0,
      minWorldSize: 2,
      maxWorldSize: 3,
      waitSeconds: 5,
      page: false,
      memberTimeoutSeconds: 4,
      syncTimeoutSeconds: 9,
      statePath: 'world.json',
    });
    expectUsage(
      () => parse('--member-timeout', '5'),
      '--member-timeout applies to --elastic-coordinator',
      '--member-timeout',
    );
    expectUsage(
      () => parse('--coordinator-timeout', '5'),
      '--coordinator-timeout applies to --elastic',
      '--coordinator-timeout',
    );
    expectUsage(
      () => parse('--elastic-coordinator', '0', '--member-timeout', '0'),
      '--member-timeout 0 is not an integer in 1..86400',
      '--member-timeout',
    );
  });

  it('--browser-port on the coordinator serves the tab page; --browser-host is what it binds', () => {
    const tabs = ['--elastic-coordinator', '0', '--strategy', 'ddp', '--backend', 'cpu'];
    expect(parse(...tabs, '--browser-port', '8080')).toMatchObject({
      elasticCoordinator: { page: true },
      browserPort: 8080,
    });
    expect(parse(...tabs, '--browser-port', '0').elasticCoordinator!.page).toBe(true);
    expect(parse('--elastic-coordinator', '0', '--browser-host', '10.0.0.2')).toMatchObject({
      browserHost: '10.0.0.2',
      elasticCoordinator: { page: false },
    });
    const page = '--elastic-coordinator with --browser-port:';
    expectUsage(
      () => parse('--elastic-coordinator', '0', '--browser-port', '0', '--strategy', 'fsdp'),
      `${page} tabs join as members of --strategy ddp or diloco, not fsdp`,
      '--strategy',
    );
    expectUsage(
      () => parse(...tabs, '--browser-port', '0', '--precision', 'fp16'),
      `${page} elastic members train in fp32, not fp16`,
      '--precision',
    );
    for (const flag of ['--save', '--log-jsonl', '--init', '--checkpoint-dir']) {
      const extra = flag === '--checkpoint-dir' ? ['--checkpoint-every', '2'] : [];
      expectUsage(
        () => parse(...tabs, '--browser-port', '0', flag, 'x', ...extra),
        `${page} the tabs train with these flags and a tab reads and writes no files (give ${flag} to a Node member)`,
        flag,
      );
    }
  });

  it('refuses what an elastic member cannot do, naming the flag', () => {
    expectUsage(
      () => parse('--strategy', 'fsdp', '--elastic', URL),
      '--elastic with --strategy fsdp restarts from its last sharded checkpoint after a change: give --checkpoint-dir and --checkpoint-every',
      '--strategy',
    );
    expectUsage(
      () => parse('--strategy', 'offload', '--elastic', URL),
      '--elastic trains with --strategy ddp, fsdp or diloco, not offload',
      '--strategy',
    );
    expectUsage(
      () => parse('--strategy', 'ddp', '--precision', 'bf16', '--elastic', URL),
      '--elastic trains in fp32, not bf16',
      '--precision',
    );
    expectUsage(
      () => parse('--strategy', 'ddp', '--world-size', '2', '--elastic', URL),
      '--elastic takes its world size from the coordinator: drop --world-size',
      '--world-size',
    );
    expectUsage(
      () => parse('--strategy', 'ddp', '--transport', 'shm', '--elastic', URL),
      '--elastic members are processes: --transport tcp or ws, not shm',
      '--transport',
    );
    expectUsage(
      () => parse('--strategy', 'ddp', '--elastic', '10.0.0.5:29400'),
      "--elastic 10.0.0.5:29400 is not the coordinator's ws:// URL",
      '--elastic',
    );
    expectUsage(
      () => parse('--strategy', 'ddp', '--elastic', URL, '--resume', 'ckpt'),
      '--elastic takes the state from the live members or --checkpoint-dir: --resume does not apply',
      '--resume',
    );
    expectUsage(
      () =>
        parse(
          '--strategy',
          'ddp',
          '--elastic',
          URL,
          '--checkpoint-dir',
          'c',
          '--checkpoint-every',
          '2',
        ),
      '--elastic with --strategy ddp moves the state between live members: --checkpoint-dir does not apply',
      '--checkpoint-dir',
    );
    expect(
      parse(
        '--strategy',
        'fsdp',
        '--elastic',
        URL,
        '--checkpoint-dir',
        'c',
        '--checkpoint-every',
        '2',
      ),
    ).toMatchObject({ strategy: 'fsdp', elastic: URL, checkpointEvery: 2 });
  });

  it('refuses bounds without a coordinator, and bounds that hold no world', () => {
    expectUsage(
      () => parse('--min-world-size', '2'),
      '--min-world-size applies to --elastic-coordinator',
      '--min-world-size',
    );
    expectUsage(
      () => parse('--elastic-coordinator', '0', '--min-world-size', '3', '--max-world-size', '2'),
      '--max-world-size 2 is below --min-world-size 3',
      '--max-world-size',
    );
    expectUsage(
      () => parse('--elastic-coordinator', '0', '--elastic', URL),
      '--elastic-coordinator hosts the world, --elastic joins it: give one',
      '--elastic',
    );
  });
});

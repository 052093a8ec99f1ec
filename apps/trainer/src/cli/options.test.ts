import { describe, expect, it } from 'vitest';
import { UsageError } from '../errors.js';
import type { TrainConfig } from '../config.js';
import { parseOptions } from './options.js';

const parse = (...argv: string[]) => parseOptions(argv, '/home/user/work') as TrainConfig;

/** `fn` throws a `UsageError` with exactly `message`, naming `option`. */
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

describe('parseOptions', () => {
  it('has the documented defaults: single strategy, constant lr, no outputs', () => {
    expect(parse()).toMatchObject({
      strategy: 'single',
      worldSize: 1,
      model: 'gpt',
      nLayer: 2,
      nHead: 4,
      nEmbd: 64,
      blockSize: 32,
      batchSize: 16,
      gradAccum: 1,
      seed: 1337,
      lr: 3e-3,
      lrSchedule: 'constant',
      warmupSteps: 0,
      precision: 'fp32',
      save: null,
      report: null,
    });
  });

  it('resolves relative paths against the directory the user ran the command in', () => {
    const config = parse(
      '--data',
      'in/tokens.bin',
      '--save',
      '../m.safetensors',
      '--report',
      '/abs/r.html',
    );
    expect(config.data).toBe('/home/user/work/in/tokens.bin');
    expect(config.save).toBe('/home/user/m.safetensors');
    expect(config.report).toBe('/abs/r.html');
  });

  it("drops the bare '--' that pnpm passes through, wherever it is", () => {
    expect(parse('--steps', '3', '--', '--seed', '0')).toMatchObject({ steps: 3, seed: 0 });
    expect(parseOptions(['--', '--help'], '/')).toBe('help');
  });

  it('lets a later flag override an earlier one (the default run’s flags come first)', () => {
    expect(parse('--lr-schedule', 'cosine', '--lr-schedule', 'constant').lrSchedule).toBe(
      'constant',
    );
  });

  it('accepts seed 0, ddp and fsdp on any world size, offload on one', () => {
    expect(parse('--seed', '0').seed).toBe(0);
    expect(parse('--strategy', 'fsdp', '--world-size', '4')).toMatchObject({
      strategy: 'fsdp',
      worldSize: 4,
      transport: 'shm',
      reshardAfterForward: true,
      sharding: 'full',
      autoWrap: 'block',
      prefetch: 1,
      bucketMb: null,
      moveParamsToCpu: false,
    });
    expect(
      parse('--strategy', 'ddp', '--world-size', '2', '--transport', 'tcp', '--bucket-mb', '0.5'),
    ).toMatchObject({ strategy: 'ddp', worldSize: 2, transport: 'tcp', bucketMb: 0.5 });
    expect(parse('--strategy', 'fsdp', '--world-size', '2', '--prefetch', '0').prefetch).toBe(0);
    expect(parse('--strategy', 'fsdp', '--world-size', '2', '--prefetch', '3').prefetch).toBe(3);
    expect(
      parse('--strategy', 'offload', '--num-slices', '4', '--checkpoint-activation'),
    ).toMatchObject({ numSlices: 4, numMicrobatches: 1, checkpointActivation: true });
  });

  it('refuses flags that do not apply to the strategy, naming them', () => {
    const cases: [string[], string, string][] = [
      [
        ['--world-size', '2'],
        '--strategy single trains one rank: --world-size 2 needs --strategy ddp, fsdp or diloco',
        '--world-size',
      ],
      [
        ['--strategy', 'ddp', '--auto-wrap', 'none'],
        '--auto-wrap applies to --strategy fsdp, not ddp',
        '--auto-wrap',
      ],
      [
        ['--strategy', 'ddp', '--reshard-after-forward', 'false'],
        '--reshard-after-forward applies to --strategy fsdp, not ddp',
        '--reshard-after-forward',
      ],
      [
        ['--move-params-to-cpu'],
        '--move-params-to-cpu applies to --strategy fsdp, not single',
        '--move-params-to-cpu',
      ],
      [
        ['--strategy', 'ddp', '--world-size', '2', '--prefetch', '2'],
        '--prefetch applies to --strategy fsdp, not ddp',
        '--prefetch',
      ],
      [
        ['--bucket-mb', '1'],
        '--bucket-mb applies to --strategy ddp or fsdp, not single',
        '--bucket-mb',
      ],
      [
        ['--transport', 'tcp'],
        '--transport applies to --strategy ddp or fsdp, not single',
        '--transport',
      ],
      [
        ['--strategy', 'ddp', '--transport', 'udp'],
        '--transport udp is not one of local, shm, tcp, ws',
        '--transport',
      ],
      [
        ['--strategy', 'ddp', '--bucket-mb', '0'],
        '--bucket-mb 0 is out of range (0, 4096]',
        '--bucket-mb',
      ],
      [
        ['--strategy', 'ddp', '--world-size', '3', '--batch-size', '16'],
        '--batch-size 16 is not divisible by the world size 3 times --grad-accum 1',
        '--batch-size',
      ],
      [
        ['--strategy', 'ddp', '--world-size', '65'],
        '--world-size 65 is out of range [1, 64]',
        '--world-size',
      ],
      [
        ['--strategy', 'fsdp', '--world-size', '2', '--prefetch', '65'],
        '--prefetch 65 is out of range [0, 64]',
        '--prefetch',
      ],
      [
        ['--strategy', 'fsdp', '--world-size', '2', '--prefetch', '1.5'],
        '--prefetch 1.5 is not an integer',
        '--prefetch',
      ],
      [
        ['--strategy', 'offload', '--world-size', '2'],
        '--strategy offload trains one rank: --world-size 2 needs --strategy ddp, fsdp or diloco',
        '--world-size',
      ],
      [
        ['--num-slices', '2'],
        '--num-slices applies to --strategy offload, not single',
        '--num-slices',
      ],
      [
        ['--strategy', 'fsdp', '--checkpoint-activation'],
        '--checkpoint-activation applies to --strategy offload, not fsdp',
        '--checkpoint-activation',
      ],
      [
        ['--strategy', 'offload', '--precision', 'bf16'],
        '--precision bf16 is not available with --strategy offload: it trains in fp32',
        '--precision',
      ],
    ];
    for (const [argv, message, option] of cases) expectUsage(() => parse(...argv), message, option);
  });

  it('takes the diloco flags with the paper defaults, and refuses them elsewhere by name', () => {
    expect(parse('--strategy', 'diloco', '--world-size', '4')).toMatchObject({
      strategy: 'diloco',
      worldSize: 4,
      innerSteps: 50,
      outerLr: 0.7,
      outerMomentum: 0.9,
      outerCompression: 'f32',
    });
    expect(
      parse(
        ...['--strategy', 'diloco', '--world-size', '2', '--inner-steps', '1', '--outer-lr', '1'],
        ...['--outer-momentum', '0', '--outer-compression', 'int8'],
      ),
    ).toMatchObject({ innerSteps: 1, outerLr: 1, outerMomentum: 0, outerCompression: 'int8' });
    // topk: SparseLoCo's outer step (lr 1, no momentum) and density unless given.
    expect(
      parse('--strategy', 'diloco', '--world-size', '2', '--outer-compression', 'topk'),
    ).toMatchObject({
      outerCompression: 'topk',
      outerLr: 1,
      outerMomentum: 0,
      outerDensity: 3 / 128,
      outerErrorDecay: null,
      outerLevels: 'tile',
    });
    expect(
      parse(
        ...['--strategy', 'diloco', '--world-size', '2', '--outer-compression', 'topk'],
        ...['--outer-levels', 'tensor'],
      ),
    ).toMatchObject({ outerLevels: 'tensor' });
    // The error feedback's decay, for topk or any compression with feedback; null: the library's.
    expect(
      parse(
        ...['--strategy', 'diloco', '--world-size', '2', '--outer-compression', 'topk'],
        ...['--outer-error-decay', '0.9'],
      ),
    ).toMatchObject({ outerErrorDecay: 0.9 });
    expect(
      parse(
        ...['--strategy', 'diloco', '--world-size', '2', '--outer-compression', 'int8'],
        ...['--outer-error-decay', '1'],
      ),
    ).toMatchObject({ outerErrorDecay: 1 });
    expect(
      parse(
        ...['--strategy', 'diloco', '--world-size', '2', '--outer-compression', 'topk'],
        ...['--outer-density', '0.03', '--outer-lr', '0.7', '--outer-momentum', '0.9'],
      ),
    ).toMatchObject({ outerDensity: 0.03, outerLr: 0.7, outerMomentum: 0.9 });
    expect(
      parse('--strategy', 'diloco', '--world-size', '2', '--outer-compression', 'int4'),
    ).toMatchObject({
      outerCompression: 'int4',
      outerLr: 0.7,
      outerMomentum: 0.9,
    });
    const diloco = ['--strategy', 'diloco', '--world-size', '2'];
    const cases: [string[], string, string][] = [
      [
        [...diloco, '--inner-steps', '0'],
        '--inner-steps 0 is out of range [1, inf)',
        '--inner-steps',
      ],
      [[...diloco, '--inner-steps', '2.5'], '--inner-steps 2.5 is not an integer', '--inner-steps'],
      [
        [...diloco, '--outer-compression', 'fp8'],
        '--outer-compression fp8 is not one of f32, bf16, int8, int4, topk',
        '--outer-compression',
      ],
      [
        [...diloco, '--outer-compression', 'topk', '--outer-error-decay', '1.5'],
        '--outer-error-decay 1.5 is out of range [0, 1]',
        '--outer-error-decay',
      ],
      [
        [...diloco, '--outer-compression', 'topk', '--outer-levels', 'chunk'],
        '--outer-levels chunk is not one of tile, tensor',
        '--outer-levels',
      ],
      [
        [...diloco, '--outer-compression', 'int8', '--outer-levels', 'tensor'],
        '--outer-levels applies to --outer-compression topk, not int8',
        '--outer-levels',
      ],
      [
        [...diloco, '--outer-error-decay', '0.9'],
        '--outer-error-decay applies to a compression with error feedback (bf16, int8, int4, topk), not f32',
        '--outer-error-decay',
      ],
      [
        ['--strategy', 'ddp', '--world-size', '2', '--outer-error-decay', '0.9'],
        '--outer-error-decay applies to --strategy diloco, not ddp',
        '--outer-error-decay',
      ],
      [
        [...diloco, '--outer-compression', 'topk', '--outer-density', '0'],
        '--outer-density 0 is out of range (0, 1]',
        '--outer-density',
      ],
      [
        [...diloco, '--outer-compression', 'topk', '--outer-density', '1.5'],
        '--outer-density 1.5 is out of range (0, 1]',
        '--outer-density',
      ],
      [
        [...diloco, '--outer-compression', 'topk', '--outer-density', 'dense'],
        '--outer-density dense is not a finite number',
        '--outer-density',
      ],
      [
        [...diloco, '--outer-compression', 'int8', '--outer-density', '0.02'],
        '--outer-density applies to --outer-compression topk, not int8',
        '--outer-density',
      ],
      [
        [...diloco, '--outer-density', '0.02'],
        '--outer-density applies to --outer-compression topk, not f32',
        '--outer-density',
      ],
      [
        ['--strategy', 'ddp', '--world-size', '2', '--outer-density', '0.02'],
        '--outer-density applies to --strategy diloco, not ddp',
        '--outer-density',
      ],
      [
        [...diloco, '--outer-momentum', '1'],
        '--outer-momentum 1 is out of range [0, 0.999999]',
        '--outer-momentum',
      ],
      [[...diloco, '--outer-lr', '0'], '--outer-lr 0 is out of range (0, 10]', '--outer-lr'],
      [
        ['--strategy', 'ddp', '--world-size', '2', '--inner-steps', '5'],
        '--inner-steps applies to --strategy diloco, not ddp',
        '--inner-steps',
      ],
      [
        ['--outer-compression', 'int8'],
        '--outer-compression applies to --strategy diloco, not single',
        '--outer-compression',
      ],
      [
        [...diloco, '--precision', 'bf16'],
        '--precision bf16 is not available with --strategy diloco yet: it trains in fp32',
        '--precision',
      ],
      [
        [...diloco, '--checkpoint-every', '5', '--checkpoint-dir', 'c'],
        '--checkpoint-every is not available with --strategy diloco yet',
        '--checkpoint-every',
      ],
      [
        [...diloco, '--bucket-mb', '1'],
        '--bucket-mb applies to --strategy ddp or fsdp, not diloco',
        '--bucket-mb',
      ],
    ];
    for (const [argv, message, option] of cases) expectUsage(() => parse(...argv), message, option);
  });

  it('takes the streamed-sync flags (Streaming DiLoCo: F, tau, alpha) and refuses what cannot stream, by name', () => {
    const diloco = ['--strategy', 'diloco', '--world-size', '4', '--inner-steps', '12'];
    expect(parse(...diloco)).toMatchObject({ outerFragments: 1, outerOverlap: 0, outerMixing: 0 });
    // The paper's mixing 0.5 once a fragment overlaps inner steps.
    expect(parse(...diloco, '--outer-fragments', '3', '--outer-overlap', '4')).toMatchObject({
      outerFragments: 3,
      outerOverlap: 4,
      outerMixing: 0.5,
    });
    expect(
      parse(...diloco, '--outer-fragments', '4', '--outer-overlap', '1', '--outer-mixing', '0'),
    ).toMatchObject({ outerFragments: 4, outerOverlap: 1, outerMixing: 0 });
    expect(parse(...diloco, '--outer-fragments', '3', '--outer-overlap', '4')).toMatchObject({
      outerMerge: 'mix',
    });
    // topk: carry, its error feedback keeps what the local parameters did beyond the sync, unless
    // a mixing asks for the paper's merge.
    const topk = [...diloco, '--outer-fragments', '3', '--outer-overlap', '4'];
    topk.push('--outer-compression', 'topk');
    expect(parse(...topk)).toMatchObject({ outerMerge: 'carry', outerMixing: 0 });
    expect(parse(...topk, '--outer-mixing', '0.5')).toMatchObject({
      outerMerge: 'mix',
      outerMixing: 0.5,
    });
    expect(parse(...diloco, '--outer-overlap', '2', '--outer-merge', 'carry')).toMatchObject({
      outerMerge: 'carry',
      outerMixing: 0,
    });
    expectUsage(
      () => parse(...topk, '--outer-merge', 'carry', '--outer-mixing', '0.5'),
      '--outer-mixing is the alpha of --outer-merge mix, not carry',
      '--outer-mixing',
    );
    expectUsage(
      () => parse(...topk, '--outer-merge', 'blend'),
      '--outer-merge blend is not one of mix, carry',
      '--outer-merge',
    );
    expect(parse(...diloco, '--outer-fragments', '2')).toMatchObject({
      outerOverlap: 0,
      outerMixing: 0,
    });
    // With --elastic, for every compression: [Note: streamed syncs in an elastic world].
    const elastic = [
      '--strategy',
      'diloco',
      '--inner-steps',
      '12',
      '--elastic',
      'ws://127.0.0.1:1',
    ];
    for (const compression of ['f32', 'bf16', 'int8', 'int4', 'topk']) {
      expect(
        parse(
          ...elastic,
          ...['--outer-fragments', '3', '--outer-overlap', '4'],
          ...['--outer-compression', compression],
        ),
      ).toMatchObject({ outerFragments: 3, outerOverlap: 4, outerCompression: compression });
    }
    const cases: [string[], string, string][] = [
      [
        [...diloco, '--outer-fragments', '0'],
        '--outer-fragments 0 is out of range [1, inf)',
        '--outer-fragments',
      ],
      [
        [...diloco, '--outer-fragments', '13'],
        '--outer-fragments 13 is more than --inner-steps 12: each fragment syncs once every --inner-steps steps, at its own step',
        '--outer-fragments',
      ],
      [
        [...diloco, '--outer-fragments', '3', '--outer-overlap', '5'],
        '--outer-overlap 5 is more than --inner-steps / --outer-fragments (4): one fragment is on the wire at a time',
        '--outer-overlap',
      ],
      [
        [...diloco, '--outer-overlap', '1.5'],
        '--outer-overlap 1.5 is not an integer',
        '--outer-overlap',
      ],
      [
        [...diloco, '--outer-mixing', '1'],
        '--outer-mixing 1 is out of range [0, 0.999999]',
        '--outer-mixing',
      ],
      [
        ['--strategy', 'ddp', '--world-size', '2', '--outer-fragments', '2'],
        '--outer-fragments applies to --strategy diloco, not ddp',
        '--outer-fragments',
      ],
    ];
    for (const [argv, message, option] of cases) expectUsage(() => parse(...argv), message, option);
  });

  it('takes --browser-ranks for ddp and fsdp over ws with a Node rank 0, and refuses the rest by name', () => {
    const tabs = ['--world-size', '3', '--transport', 'ws', '--batch-size', '12'];
    expect(parse('--strategy', 'fsdp', ...tabs, '--browser-ranks', '2')).toMatchObject({
      browserRanks: 2,
      browserPort: 0,
    });
    expect(
      parse('--strategy', 'ddp', ...tabs, '--browser-ranks', '1', '--browser-port', '8123'),
    ).toMatchObject({
      browserRanks: 1,
      browserPort: 8123,
    });
    expect(parse()).toMatchObject({ browserRanks: 0, browserPort: 0 });
    const cases: [string[], string, string][] = [
      [
        ['--strategy', 'fsdp', '--world-size', '3', '--batch-size', '12', '--browser-ranks', '1'],
        '--browser-ranks 1: browser tabs join over --transport ws, not shm',
        '--transport',
      ],
      [
        ['--strategy', 'fsdp', ...tabs, '--browser-ranks', '3'],
        '--browser-ranks 3: --world-size 3 leaves no Node rank, and rank 0 must be one: it hosts the rendezvous store',
        '--world-size',
      ],
      [
        ['--strategy', 'fsdp', ...tabs, '--browser-ranks', '1', '--init', 'w.safetensors'],
        '--browser-ranks 1: --init needs files on every rank, and a browser tab reads and writes none',
        '--init',
      ],
      [
        ['--strategy', 'ddp', ...tabs, '--browser-ranks', '1', '--resume', 'ckpt'],
        '--browser-ranks 1: --resume needs files on every rank, and a browser tab reads and writes none',
        '--resume',
      ],
      [
        [
          '--strategy',
          'fsdp',
          ...tabs,
          '--browser-ranks',
          '1',
          '--checkpoint-every',
          '5',
          '--checkpoint-dir',
          'c',
        ],
        '--browser-ranks 1: --checkpoint-every needs files on every rank, and a browser tab reads and writes none',
        '--checkpoint-every',
      ],
      [
        ['--browser-port', '8123'],
        '--browser-port applies with --browser-ranks or --elastic-coordinator',
        '--browser-port',
      ],
    ];
    for (const [argv, message, option] of cases) expectUsage(() => parse(...argv), message, option);
  });

  it('takes --browser-host, the address tabs reach this machine at, and refuses what tabs cannot dial', () => {
    const tabs = ['--strategy', 'ddp', '--world-size', '2', '--transport', 'ws'];
    expect(parse(...tabs, '--browser-ranks', '1')).toMatchObject({ browserHost: '127.0.0.1' });
    for (const host of ['192.168.1.20', 'trainer.lan', '::1', 'fe80::1']) {
      expect(parse(...tabs, '--browser-ranks', '1', '--browser-host', host)).toMatchObject({
        browserHost: host,
      });
    }
    const every = (host: string) =>
      `--browser-host ${JSON.stringify(host)}: give the address tabs reach this machine at (its IP or host name on their network), not one that means every interface: the job listens on it and tells the tabs to dial it`;
    const cases: [string[], string, string][] = [
      [
        [...tabs, '--browser-ranks', '1', '--browser-host', '0.0.0.0'],
        every('0.0.0.0'),
        '--browser-host',
      ],
      [[...tabs, '--browser-ranks', '1', '--browser-host', '::'], every('::'), '--browser-host'],
      [
        [...tabs, '--browser-ranks', '1', '--browser-host', 'http://x'],
        '--browser-host "http://x": not a host name or address',
        '--browser-host',
      ],
      [
        [...tabs, '--browser-host', '10.0.0.2'],
        '--browser-host applies with --browser-ranks or --elastic-coordinator',
        '--browser-host',
      ],
    ];
    for (const [argv, message, option] of cases) expectUsage(() => parse(...argv), message, option);
  });

  it('rejects non-finite and out-of-range numbers naming the flag', () => {
    const cases: [string[], string][] = [
      [['--lr', 'Infinity'], '--lr Infinity is not a finite number'],
      [['--lr', '0'], '--lr 0 is out of range (0, 10]'],
      [['--eps=-1e-8'], '--eps -1e-8 is out of range (0, 1]'],
      [['--grad-clip', 'NaN'], '--grad-clip NaN is not a finite number'],
      [['--weight-decay', '2'], '--weight-decay 2 is out of range [0, 1]'],
      [['--memory-limit', '1e400'], '--memory-limit 1e400 is not a finite number'],
      [['--batch-size', ''], '--batch-size  is not a finite number'],
      [['--n-embd', '30', '--n-head', '4'], '--n-embd 30 is not divisible by --n-head 4'],
      [['--warmup-steps', '5'], '--warmup-steps needs --lr-schedule cosine'],
      [
        ['--model', 'mlp', '--data', 'x.txt'],
        '--model mlp trains on synthetic data from --seed: --data does not apply',
      ],
    ];
    for (const [argv, message] of cases) {
      const option = message.split(' ')[0]!;
      expectUsage(() => parse(...argv), message, option === '--model' ? '--data' : option);
    }
  });
});

import type { FragmentMerge, OuterCompression, TopkLevels } from '@webshard/diloco';
import type { TokenizerName } from './data/dataset.js';
import { UsageError } from './errors.js';
import type { Sharding } from './strategy/sharding.js';

/*
 * A run's configuration: what `train()`, the ranks and the strategies read. The CLI
 * (cli/options.ts) parses flags into it; a program may build one itself.
 */

/** The strategies `--strategy` accepts. */
export const STRATEGIES = ['single', 'ddp', 'fsdp', 'offload', 'diloco'] as const;
export type Strategy = (typeof STRATEGIES)[number];

/** Where the ranks run: this thread, worker threads, or processes (see [Note: how ranks start]). */
export const TRANSPORTS = ['local', 'shm', 'tcp', 'ws'] as const;
export type TransportName = (typeof TRANSPORTS)[number];

/**
 * Everything one run needs, as plain values (nanoGPT's configuration style). Paths are absolute,
 * resolved against the directory the user ran the command in. `null` means "not given".
 */
/** Where a rank's communication progresses: see `TrainConfig.commProgress`. */
export type CommProgress = 'thread' | 'worker';

export interface TrainConfig {
  strategy: Strategy;
  /** Ranks that share the batch. */
  worldSize: number;
  transport: TransportName;
  /** Ranks `worldSize - browserRanks ..` are browser tabs (ws only; see ranks/browser-ranks.ts). */
  browserRanks: number;
  /** Port of the page that adds a tab as a rank (0: a free one). */
  browserPort: number;
  /**
   * The address tabs reach this machine at: the page, the store and the Node ranks listen there
   * and advertise it (default `127.0.0.1`: tabs of this machine only).
   */
  browserHost: string;
  /** FSDP: free each unit's full parameters after forward (fairscale's default). */
  reshardAfterForward: boolean;
  /** FSDP: PyTorch's sharding strategy (`--sharding`; see strategy/sharding.ts). */
  sharding: Sharding;
  /** FSDP: one unit per transformer block (`block`), or the root only (`none`). */
  autoWrap: 'block' | 'none';
  /**
   * FSDP: units whose gathers a unit issues ahead of their use (`limitAllGathers`: [Note:
   * prefetching several units ahead] in fsdp). Default 1; 0 turns prefetching off.
   */
  prefetch: number;
  /** DDP: bucket size; FSDP: the reduce-scatter bucket (MiB). Null: the package's default. */
  bucketMb: number | null;
  /**
   * ddp: when the gradient all-reduce runs: `'auto'` times both and keeps the faster ([Note:
   * choosing overlap by measurement] in ddp-buckets), `'overlap'` with backward, `'delay'` at its end.
   */
  ddpAllreduce: 'auto' | 'overlap' | 'delay';
  /** FSDP: keep the shards (and the optimizer step) on the CPU, compute on the device. */
  moveParamsToCpu: boolean;
  /** Offload: slices the model streams through the device in. */
  numSlices: number;
  /** Offload: chunks of the batch each slice runs on while it is on the device. */
  numMicrobatches: number;
  /** Offload: keep only slice inputs between forward and backward, recompute the rest. */
  checkpointActivation: boolean;
  /** DiLoCo: inner steps between outer syncs (H). */
  innerSteps: number;
  /** DiLoCo: the outer Nesterov SGD's learning rate (the paper's 0.7). */
  outerLr: number;
  /** DiLoCo: the outer momentum (the paper's 0.9; 0: plain SGD, no Nesterov). */
  outerMomentum: number;
  /**
   * DiLoCo: how pseudo-gradients travel (`f32`, `bf16`, `int8` and `int4` with error feedback,
   * `topk`: SparseLoCo's sparse 2-bit values from a decaying error-feedback buffer).
   */
  outerCompression: OuterCompression;
  /** DiLoCo `topk`: the share of each tile of at most 64 x 64 sent (default 3/128, 96 of 4096). */
  outerDensity: number;
  /** Streaming DiLoCo: the parameter tensors in this many fragments, synced in turn (F; 1: all at once). */
  outerFragments: number;
  /** Streaming DiLoCo: inner steps a fragment's average overlaps before it lands (tau; default 0). */
  outerOverlap: number;
  /** Streaming DiLoCo: how a fragment landed after an overlap meets the local parameters (topk: carry). */
  outerMerge: FragmentMerge;
  /** Streaming DiLoCo, merge `mix`: a landed fragment's local share alpha (0.5 with an overlap, else 0). */
  outerMixing: number;
  /**
   * Where a process rank's communication progresses (`--comm-progress`): on its own thread, or on
   * a communication worker ([Note: where a rank's communication progresses] in
   * cli/progress-options.ts). Absent: `defaultCommProgress` at join.
   */
  commProgress?: CommProgress;
  /**
   * DiLoCo: what the error-feedback buffer keeps of itself at each sync (e = decay x e + delta);
   * null: the library's default (topk: 0.8, measured; bf16, int8, int4: 1).
   */
  outerErrorDecay: number | null;
  /** DiLoCo `topk`: 2-bit levels per tile (ours) or per tensor (SparseLoCo's 4 bins). */
  outerLevels: TopkLevels;
  /** Write a checkpoint every this many steps into `checkpointDir` (0: never). */
  checkpointEvery: number;
  checkpointDir: string | null;
  /** A checkpoint directory (or its root, holding `latest`) to continue from. */
  resume: string | null;
  /** Replace another run's checkpoints in `checkpointDir` (else such a directory is refused). */
  overwriteCheckpoints: boolean;
  model: 'gpt' | 'mlp';
  nLayer: number;
  nHead: number;
  nEmbd: number;
  blockSize: number;
  /** From the data when null. */
  vocabSize: number | null;
  data: string | null;
  /** How text data becomes tokens, and samples text: see [Note: the GPT-2 tokenizer]. */
  tokenizer: TokenizerName;
  /** Global sequences per step, over all ranks and micro-batches. */
  batchSize: number;
  gradAccum: number;
  init: string | null;
  seed: number;
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  gradClip: number;
  steps: number;
  lrSchedule: 'constant' | 'cosine';
  warmupSteps: number;
  precision: 'fp32' | 'fp16' | 'bf16';
  backend: 'auto' | 'cpu' | 'webgpu';
  memoryLimit: number | null;
  /**
   * The CPU backend's matmul with relaxed SIMD's fused multiply-add: `'auto'` where every rank of
   * the job fuses it, `'off'` never ([Note: relaxed FMA, chosen once per job]).
   */
  matmulFma: 'auto' | 'off';
  /**
   * Record the step once and replay it (`--capture-step`; tensor-core's [Note: the captured step]):
   * one process, one micro-batch, fp32, on the CPU or WebGPU backend; the same bits as the eager
   * step. `'auto'` (the CLI's default): where the run allows it, without a word where it does not
   * ([Note: capturing the step by default] in `cli/strategy-flags.ts`); absent or false: never.
   */
  captureStep?: boolean | 'auto';
  maxSeconds: number;
  logJsonl: string | null;
  save: string | null;
  samples: string | null;
  report: string | null;
  evalEvery: number;
  sampleLength: number;
  /** Train as one member of the elastic world whose coordinator is at this URL (`--elastic`). */
  elastic?: string | null;
  /** Host an elastic world's coordinator instead of training (`--elastic-coordinator`). */
  elasticCoordinator?: ElasticCoordinatorSettings | null;
  /**
   * `--elastic`: how long a member trains on without its coordinator before it exits
   * (`--coordinator-timeout`, seconds; [Note: liveness in an elastic world] in collectives).
   */
  coordinatorTimeoutSeconds?: number;
  /**
   * `--tls-cert`, `--tls-key`, `--tls-ca` (PEM paths): the coordinator, its page and the stores
   * serve `https`/`wss`; a member trusts `ca` and serves its listener over `wss` ([Note: an
   * elastic job over the internet]). Null or absent: plain `http`/`ws`.
   */
  tls?: TlsPaths | null;
  /** `--no-listen`: this member opens no listening socket; peers that cannot dial it relay. */
  noListen?: boolean;
}

/** The PEM files of `--tls-cert`, `--tls-key` and `--tls-ca` (null: not given). */
export interface TlsPaths {
  cert: string | null;
  key: string | null;
  ca: string | null;
}

/** `--elastic-coordinator PORT` and its bounds ([Note: elastic training in the trainer]). */
export interface ElasticCoordinatorSettings {
  /** 0: a free port (printed). */
  port: number;
  minWorldSize: number;
  maxWorldSize: number;
  /** How long to wait for members below the minimum, and for more at the start. */
  waitSeconds: number;
  /** A member silent this long is dropped (`--member-timeout`, default 60). */
  memberTimeoutSeconds: number;
  /** How long the members at a sync point wait for late ones (`--sync-timeout`, default 300). */
  syncTimeoutSeconds: number;
  /** The coordinator's state file (`--coordinator-state`), to start it again on; null: none. */
  statePath: string | null;
  /**
   * `--browser-port` given: also serve the page a browser tab opens to join the world, training
   * with this command's own training flags ([Note: browser tabs in an elastic world]).
   */
  page: boolean;
}

/** The batch must split evenly over the ranks and their micro-batches. */
export function checkBatchDivides(config: TrainConfig): void {
  const ranksTimesMicro = config.worldSize * config.gradAccum;
  if (config.batchSize % ranksTimesMicro !== 0) {
    throw new UsageError(
      `--batch-size ${config.batchSize} is not divisible by the world size ${config.worldSize} times --grad-accum ${config.gradAccum}`,
      { option: '--batch-size' },
    );
  }
}

import type { ProcessGroup } from '@webshard/collectives';
import { type CodecOptions, resolveCodecOptions } from './codec-options.js';
import type { OuterCompression } from './compression.js';
import type { OuterStateStore } from './outer-state-store.js';
import { DilocoArgumentError } from './errors.js';
import type { TopkLevels } from './topk-layout.js';
import { DEFAULT_OUTER_LR, DEFAULT_OUTER_MOMENTUM } from './outer-optimizer.js';
import { FRAGMENT_MERGES, type FragmentMerge } from './fragment-merge.js';
import { DEFAULT_STREAM_MIXING } from './streamed-fragments.js';

/**
 * Options of `DiLoCo`; the defaults are the DiLoCo paper's (Douillard et al. 2023), and
 * SparseLoCo's for `topk` (outer lr 1, no outer momentum: its decayed error feedback is the
 * momentum, [Note: sparse outer gradients]).
 */
export interface DilocoOptions extends CodecOptions {
  /** The ranks (workers) that average pseudo-gradients; each runs its own inner steps. */
  group: ProcessGroup;
  /** Inner steps between outer syncs (H). The paper uses 500; at least 1. */
  innerSteps: number;
  /** Outer learning rate. Default 0.7 (1 for `topk`). */
  outerLr?: number;
  /** Outer momentum. Default 0.9 (0 for `topk`; 0: plain SGD). */
  outerMomentum?: number;
  /** Nesterov outer momentum. Default true when the momentum is above 0. */
  nesterov?: boolean;
  /** Deadline of each outer collective in ms (a sync moves the whole model). Default: the group's. */
  timeoutMs?: number;
  /**
   * `create` broadcasts rank 0's parameters so every rank starts from the same global copy.
   * Default true; false where the caller brings every rank the same state itself (an elastic
   * member admitted with rank 0's state: [Note: DiLoCo in an elastic world]).
   */
  broadcast?: boolean;
  /**
   * Keep the global copy and the outer momentum in this store between syncs instead of in memory
   * (a browser tab's origin private file system): the same bits, 8 bytes a parameter less held
   * ([Note: the outer state in a store]). Not with streamed syncs. Default: in memory.
   */
  outerState?: OuterStateStore;
  /**
   * Streaming DiLoCo's F: the parameter tensors dealt into this many fragments (tensor i in
   * fragment i mod F), fragment p synced p H / F steps after fragment 0 in every period of H
   * ([Note: streamed fragments]). Default 1; at most the number of tensors and H.
   */
  fragments?: number;
  /**
   * Streaming DiLoCo's tau: inner steps that run while a fragment's average is on the wire before
   * it is applied. Default 0 (applied at once); at most floor(H / F), so one fragment is on the
   * wire at a time.
   */
  overlap?: number;
  /**
   * How a fragment that lands after an overlap meets the local parameters ([Note: merging a
   * landed fragment]): `mix` (Streaming DiLoCo's alpha x local + (1 - alpha) x global) or `carry`
   * (the new global plus what the local parameters trained since the issue). Default `carry` with
   * `topk` (whose error feedback `mix` would count twice) unless `mixing` is given, else `mix`.
   */
  merge?: FragmentMerge;
  /**
   * Streaming DiLoCo's alpha of `merge: 'mix'`, in [0, 1): a landed fragment's local parameters
   * become alpha x local + (1 - alpha) x global. Default 0.5 with an overlap (the paper's), 0
   * without (DiLoCo's replacement). Not with `merge: 'carry'`.
   */
  mixing?: number;
}

/** The options with defaults filled in, checked. */
export interface ResolvedDilocoOptions {
  readonly group: ProcessGroup;
  readonly innerSteps: number;
  readonly outerLr: number;
  readonly outerMomentum: number;
  readonly nesterov: boolean;
  readonly compression: OuterCompression;
  readonly blockSize: number;
  readonly density: number;
  readonly errorFeedback: boolean;
  readonly errorDecay: number;
  readonly shapes: readonly (readonly number[])[] | null;
  readonly levels: TopkLevels;
  readonly timeoutMs: number | undefined;
  readonly broadcast: boolean;
  /** The store of the global copy and momentum, or null (in memory). */
  readonly outerState: OuterStateStore | null;
  /** Whether the syncs stream over fragments (`fragments`, `overlap`, `merge` or `mixing` given). */
  readonly streamed: boolean;
  readonly fragments: number;
  readonly overlap: number;
  readonly merge: FragmentMerge;
  readonly mixing: number;
}

const OP = 'DiLoCo';

/**
 * Checks the options and fills in defaults; throws `DilocoArgumentError` naming the bad option
 * before anything is allocated or sent.
 */
export function resolveDilocoOptions(options: DilocoOptions): ResolvedDilocoOptions {
  const group = options?.group;
  if (
    group === undefined ||
    group === null ||
    typeof group.allReduce !== 'function' ||
    typeof group.allGather !== 'function'
  ) {
    throw new DilocoArgumentError(
      { op: OP, rank: -1 },
      'group',
      'options.group must be a ProcessGroup',
    );
  }
  const rank = group.rank;
  const fail = (option: string, detail: string): never => {
    throw new DilocoArgumentError({ op: OP, rank }, option, detail);
  };
  const innerSteps = options.innerSteps;
  if (!Number.isSafeInteger(innerSteps) || innerSteps < 1) {
    fail('innerSteps', `innerSteps (H) must be a whole number >= 1, got ${innerSteps}`);
  }
  const codec = resolveCodecOptions(options, fail);
  const topk = codec.compression === 'topk';
  const outerLr = options.outerLr ?? (topk ? 1 : DEFAULT_OUTER_LR);
  if (!Number.isFinite(outerLr) || outerLr <= 0) {
    fail('outerLr', `the outer lr must be a positive number, got ${outerLr}`);
  }
  const outerMomentum = options.outerMomentum ?? (topk ? 0 : DEFAULT_OUTER_MOMENTUM);
  if (!Number.isFinite(outerMomentum) || outerMomentum < 0 || outerMomentum >= 1) {
    fail('outerMomentum', `the outer momentum must be in [0, 1), got ${outerMomentum}`);
  }
  const nesterov = options.nesterov ?? outerMomentum > 0;
  if (nesterov && outerMomentum === 0) {
    fail('nesterov', 'Nesterov momentum needs an outer momentum above 0');
  }
  const timeoutMs = options.timeoutMs;
  if (timeoutMs !== undefined && !(Number.isFinite(timeoutMs) && timeoutMs > 0)) {
    fail('timeoutMs', `timeoutMs must be a positive number of milliseconds, got ${timeoutMs}`);
  }
  const fragments = options.fragments ?? 1;
  if (!Number.isSafeInteger(fragments) || fragments < 1 || fragments > innerSteps) {
    fail(
      'fragments',
      `fragments must be a whole number from 1 to innerSteps (${innerSteps}), got ${fragments}`,
    );
  }
  const overlap = options.overlap ?? 0;
  const most = Math.floor(innerSteps / fragments);
  if (!Number.isSafeInteger(overlap) || overlap < 0 || overlap > most) {
    fail(
      'overlap',
      `overlap must be a whole number from 0 to innerSteps / fragments (${most}), so that one fragment is on the wire at a time, got ${overlap}`,
    );
  }
  // A mixing given asks for the paper's merge.
  const merge = options.merge ?? (topk && options.mixing === undefined ? 'carry' : 'mix');
  if (!FRAGMENT_MERGES.includes(merge)) {
    fail('merge', `merge must be one of ${FRAGMENT_MERGES.join(', ')}, got ${String(merge)}`);
  }
  if (merge === 'carry' && options.mixing !== undefined) {
    fail('mixing', "mixing is the alpha of merge 'mix', not of 'carry'");
  }
  const mixing = options.mixing ?? (overlap > 0 && merge === 'mix' ? DEFAULT_STREAM_MIXING : 0);
  if (!(Number.isFinite(mixing) && mixing >= 0 && mixing < 1)) {
    fail('mixing', `mixing must be in [0, 1), got ${mixing}`);
  }
  const streamed =
    options.fragments !== undefined ||
    options.overlap !== undefined ||
    options.merge !== undefined ||
    options.mixing !== undefined;
  if (streamed && options.outerState !== undefined) {
    fail(
      'outerState',
      'a store of the outer state is not for streamed syncs (fragments, overlap, merge, mixing)',
    );
  }
  return {
    group,
    innerSteps,
    outerLr,
    outerMomentum,
    nesterov,
    ...codec,
    timeoutMs,
    broadcast: options.broadcast ?? true,
    outerState: options.outerState ?? null,
    streamed,
    fragments,
    overlap,
    merge,
    mixing,
  };
}

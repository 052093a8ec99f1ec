import type { Optimizer } from '@webshard/tensor-core';

/** `idle` between steps, `syncing` during an outer sync, `failed` after a sync failed (final). */
export type DilocoState = 'idle' | 'syncing' | 'failed';

/** What one `step()` did. */
export interface DilocoStepResult {
  /** Inner steps taken so far. */
  readonly innerStep: number;
  /** Whether this step ended with an outer sync (streamed: a fragment's outer step applied). */
  readonly synced: boolean;
  /** Milliseconds from the issue of the sync that ended here to its average done (0: none). */
  readonly syncMs: number;
  /**
   * Of those, the milliseconds this step waited for the network: all of them without an overlap,
   * what the overlap did not hide with one ([Note: streamed fragments]).
   */
  readonly waitMs: number;
}

/** What an outer sync moved. */
export interface OuterSyncStats {
  /** Outer steps taken so far (this one included; streamed: fragment syncs, `DiLoCo.outerStep`). */
  readonly outerStep: number;
  /** Bytes this rank sent for this sync ([Note: compressed averaging]). */
  readonly bytesSent: number;
}

/**
 * DiLoCo's state, for checkpoints: the same on every rank except the residuals (each rank's own).
 * The inner optimizer's state is saved with the inner optimizer's `stateDict`, as without DiLoCo.
 */
export interface DilocoStateDict {
  readonly innerStep: number;
  readonly outerStep: number;
  /** The global parameters of the last sync, flat, in parameter order. */
  readonly global: Float32Array;
  readonly momentumBuffer: Float32Array | null;
  readonly residual: Float32Array | null;
  readonly shardResidual: Float32Array | null;
}

/** The inner optimizer as DiLoCo uses it: tensor-core's AdamW, SGD, or anything with `step`. */
export type InnerOptimizer = Pick<Optimizer<object, object>, 'step'>;

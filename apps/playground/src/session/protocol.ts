import type { SessionSettings } from './settings.js';
import type { StepPoint } from './training-session.js';

/** What the page asks of its training worker (./train-worker.ts). */
export type ToWorker =
  /** Train (from where it paused, or a new session on `text` when there is none). */
  | { type: 'start'; text: Uint8Array; name: string; settings: SessionSettings }
  /** Stop after the step under way; `start` goes on from there. */
  | { type: 'pause' }
  /** Drop the session (model, optimizer, backend); the next `start` begins again. */
  | { type: 'reset' };

/** What the worker tells the page. */
export type FromWorker =
  | { type: 'backend'; kind: 'cpu' | 'webgpu'; reason: string; parameters: number; vocab: number }
  | { type: 'step'; point: StepPoint }
  /** Every `EVAL_EVERY` steps and at the end: the held-out loss and a sample. */
  | { type: 'eval'; step: number; loss: number; sample: string }
  | { type: 'state'; state: 'running' | 'paused' | 'finished' | 'idle' }
  | { type: 'error'; name: string; message: string };

/** Steps between held-out evaluations and samples. */
export const EVAL_EVERY = 25;
/** Characters of each sample. */
export const SAMPLE_LENGTH = 160;

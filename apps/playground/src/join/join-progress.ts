import type { JoinProgress } from '@webshard/trainer/browser';
import { formatBytes, formatCount } from '../ui/format.js';

/** What this tab gave the job so far: its steps and the tokens it trained on. */
export interface Contribution {
  steps: number;
  tokens: number;
}

/** The tab's memory as its last step measured it. */
export interface TabMemory {
  /** The backend allocator's peak (the model, its gradients, AdamW, activations). */
  peakDeviceBytes: number;
  /** The tab's resident memory where the browser tells it (null: it does not). */
  peakHostBytes: number | null;
}

/*
 * [Note: what a volunteer's tab shows]
 * A tab of an elastic diloco world downloads the world's state before it trains ([Note: a diloco
 * join that does not stop the world] in the trainer): the page shows the bytes received of the
 * total, the seconds so far and at that pace the seconds left, and from how many members; then
 * what it gives (its share of each step's batch, its steps and tokens so far), and its memory
 * (the allocator's peak, and the resident memory where the browser reports it). The page's state
 * (`window.webshardJoin`) holds the same numbers for tests.
 */

/** The download as the page says it. */
export function describeDownload(progress: JoinProgress | null): string {
  if (progress === null) return 'none: this tab starts from the model the job gives every rank';
  const { receivedBytes, totalBytes, seconds, senders } = progress;
  if (progress.done) {
    return `the model is in: ${formatBytes(totalBytes)} from ${senders} member(s) in ${seconds.toFixed(1)} s`;
  }
  if (totalBytes === 0) return `asking ${senders} member(s) for the model...`;
  const share = receivedBytes / totalBytes;
  const rate = receivedBytes / Math.max(seconds, 1e-3);
  const left = rate > 0 ? `, about ${((totalBytes - receivedBytes) / rate).toFixed(0)} s left` : '';
  return `downloading the model: ${formatBytes(receivedBytes)} of ${formatBytes(totalBytes)} (${(100 * share).toFixed(0)} %) in ${seconds.toFixed(1)} s from ${senders} member(s)${left}`;
}

/** What the tab gave so far. */
export function describeContribution(contribution: Contribution): string {
  if (contribution.steps === 0) return 'nothing yet';
  return `${contribution.steps} steps, ${formatCount(contribution.tokens)} tokens trained`;
}

/** The tab's memory. */
export function describeMemory(memory: TabMemory | null): string {
  if (memory === null) return '-';
  const host =
    memory.peakHostBytes === null
      ? ''
      : `; the tab's resident memory ${formatBytes(memory.peakHostBytes)}`;
  return `peak ${formatBytes(memory.peakDeviceBytes)} of tensors${host}`;
}

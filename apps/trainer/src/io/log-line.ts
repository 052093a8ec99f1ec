import type { StepRecord } from '../progress.js';

/** The `--log-jsonl` line of one step (no Node imports: the rank loop of a tab imports it too). */
export function logLine(record: StepRecord): string {
  const {
    step,
    loss,
    lr,
    tokensPerSecond,
    seconds,
    peakDeviceBytes,
    peakExternalBytes,
    peakHostBytes,
    hostRanksPerProcess,
    outerStep,
    outerBytesSent,
    outerSyncMs,
    outerWaitMs,
    peakDeviceBytesPerRank,
    tokensPerSecondPerRank,
    peakHostBytesPerRank,
  } = record;
  return `${JSON.stringify({ step, loss, lr, tokensPerSecond, seconds, peakDeviceBytes, peakExternalBytes, peakHostBytes, hostRanksPerProcess, outerStep, outerBytesSent, outerSyncMs, outerWaitMs, peakDeviceBytesPerRank, tokensPerSecondPerRank, peakHostBytesPerRank })}\n`;
}

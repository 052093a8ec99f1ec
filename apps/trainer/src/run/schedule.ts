/** nanoGPT's schedule: linear warm-up, then cosine decay to `lr / 10` at the last step. */
export function learningRate(step: number, steps: number, lr: number, warmup: number): number {
  const minLr = lr / 10;
  if (step < warmup) return (lr * (step + 1)) / (warmup + 1);
  const progress = steps <= warmup ? 1 : (step - warmup) / Math.max(1, steps - 1 - warmup);
  return minLr + 0.5 * (1 + Math.cos(Math.PI * Math.min(1, progress))) * (lr - minLr);
}

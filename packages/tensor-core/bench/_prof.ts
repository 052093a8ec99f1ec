import * as tc from '../src/index.js';
const BATCH = 16, BLOCK = 32, VOCAB = 65;
const backend = tc.createCpuBackend({ matmulFma: process.argv[2] === 'auto' ? 'auto' : 'off' });
await backend.startMatmulThreads();
const model = new tc.GPT({ blockSize: BLOCK, nLayer: 2, nHead: 4, nEmbd: 64, dropout: 0, bias: true, vocabSize: VOCAB }, { backend, generator: new tc.RandomGenerator(1) });
const params = model.parameters();
const optimizer = new tc.AdamW(params, { lr: 3e-3, betas: [0.9, 0.95], weightDecay: 0.1 });
const random = tc.mulberry32(7);
const times: number[] = [];
for (let i = 0; i < Number(process.argv[3] ?? 400); i++) {
  const inputs = Int32Array.from({ length: BATCH * BLOCK }, () => Math.floor(random() * VOCAB));
  const targets = Int32Array.from({ length: BATCH * BLOCK }, () => Math.floor(random() * VOCAB));
  const t0 = performance.now();
  const x = tc.tensor(inputs, { backend, dtype: 'i32', shape: [BATCH, BLOCK] });
  const y = tc.tensor(targets, { backend, dtype: 'i32', shape: [BATCH, BLOCK] });
  const loss = tc.tidy(() => { const out = model.call(x, y); out.logits.free(); return out.loss!; });
  await loss.backward();
  await loss.item();
  await tc.clipGradNorm(params, 1);
  optimizer.step();
  optimizer.zeroGrad();
  for (const t of [loss, x, y]) t.free();
  times.push(performance.now() - t0);
}
const s = times.slice(50).sort((a, b) => a - b);
console.log('median step', s[s.length >> 1]!.toFixed(2), 'ms');
backend.dispose();

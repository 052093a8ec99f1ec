// Cross entropy over GPT-2's [1024, 50304] logits, this build (segmented on a GPU: [Note: cross entropy
// over wide rows]) against another build's dist/index.js (argv[2]), alternating in one process.
// Usage: node cross-entropy-pair.mjs /path/to/other/dist/index.js
const here = await import('@webshard/tensor-core');
const base = await import(
  process.argv[2] ?? './base/node_modules/@webshard/tensor-core/dist/index.js'
);
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const [rows, cols] = [1024, 50304];
const runs = [];
for (const [label, tc] of [
  ['here', here],
  ['before', base],
]) {
  const be = await tc.createWebGpuBackend();
  const mk = (shape, dtype = 'f32') => ({
    storage: be.allocate(shape.reduce((a, b) => a * b, 1) * 4),
    offset: 0,
    dtype,
    shape,
  });
  const x = mk([rows, cols]);
  be.write(
    x,
    Float32Array.from({ length: rows * cols }, (_, i) => Math.sin(i) * 3),
  );
  const t = mk([rows], 'i32');
  be.write(
    t,
    Int32Array.from({ length: rows }, (_, i) => (i * 997) % cols),
  );
  const l = mk([rows]);
  const dl = mk([rows]);
  be.write(dl, new Float32Array(rows).fill(1 / rows));
  const g = mk([rows, cols]);
  runs.push({ label, be, x, t, l, dl, g, f: [], b: [] });
}
for (let i = 0; i < 12; i++) {
  for (const r of runs) {
    let t0 = performance.now();
    for (let k = 0; k < 5; k++) r.be.crossEntropy(r.x, r.t, r.l, -100);
    await r.be.read(r.l);
    if (i >= 2) r.f.push((performance.now() - t0) / 5);
    t0 = performance.now();
    for (let k = 0; k < 5; k++) r.be.crossEntropyBackward(r.x, r.t, r.dl, r.g, -100);
    await r.be.sync();
    if (i >= 2) r.b.push((performance.now() - t0) / 5);
  }
}
const [h, b] = runs;
const [lh, lb] = [await h.be.read(h.l), await b.be.read(b.l)];
let d = 0;
for (let i = 0; i < rows; i++) d = Math.max(d, Math.abs(lh[i] - lb[i]) / Math.abs(lb[i]));
const [gh, gb] = [await h.be.read(h.g), await b.be.read(b.g)];
let dg = 0;
for (let i = 0; i < gh.length; i++) dg = Math.max(dg, Math.abs(gh[i] - gb[i]));
console.log(
  `cross entropy [${rows}, ${cols}] on ${h.be.description}: forward ${median(h.f).toFixed(2)} ms against ${median(b.f).toFixed(2)}, gradient ${median(h.b).toFixed(2)} against ${median(b.b).toFixed(2)} (a call, 5 calls a sync); losses within ${d.toExponential(2)} (relative), gradients within ${dg.toExponential(2)}`,
);
process.exit(0);

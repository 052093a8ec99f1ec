// One sum to one number on the WebGPU backend, 2^18 to 38.6 M floats (GPT-2's token embedding),
// each call timed with the read of its number ([Note: reductions in passes]). Usage: node one-sum.mjs
const tc = await import('@webshard/tensor-core');
const gpu = await tc.createWebGpuBackend();
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
for (const n of [2 ** 18, 2 ** 20, 2 ** 22, 50304 * 768]) {
  const x = tc.tensor(
    Float32Array.from({ length: n }, (_, i) => Math.sin(i)),
    { backend: gpu, shape: [n] },
  );
  const times = [];
  let v;
  for (let i = 0; i < 12; i++) {
    const t = performance.now();
    const s = tc.sum(x);
    v = await s.item();
    s.free();
    if (i >= 2) times.push(performance.now() - t);
  }
  console.log(
    `sum of ${n} floats on ${gpu.description}: ${(median(times) * 1000).toFixed(0)} us a call with its read (${v})`,
  );
  x.free();
}
process.exit(0);

// Usage: node gpu-check.mjs [all|matmul|gpt|gpt2|threads] (the log also goes to $OUT/gpu-check.log).
// tensor-core's WebGPU backend on a real GPU (Dawn over NVIDIA's Vulkan driver), from the built
// package: the adapter, matmul against the CPU backend, the default GPT's training losses against
// the CPU backend's and its step times (eager, captured), GPT-2 124M's first two losses against
// the CPU backend's and its step time; the CPU matmul's thread scaling on this many-core machine.
import { appendFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg } from 'node:os';
import { gptTrainer, randomTokens } from './gpt-train.mjs';

const OUT = process.env.OUT ?? '.';
const t0 = performance.now();
const log = (s) => {
  const line = `[${((performance.now() - t0) / 1000).toFixed(1)} s] ${s}`;
  console.log(line);
  appendFileSync(`${OUT}/gpu-check.log`, `${line}\n`);
};
const section = process.argv[2] ?? 'all';
const tc = await import('@webshard/tensor-core');
log(
  `node ${process.version}, ${availableParallelism()} cores (${cpus()[0].model}), load ${loadavg()[0].toFixed(1)}`,
);

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const relErr = (got, want) => {
  let worst = 0;
  let scale = 0;
  for (let i = 0; i < want.length; i++) {
    worst = Math.max(worst, Math.abs(got[i] - want[i]));
    scale = Math.max(scale, Math.abs(want[i]));
  }
  return worst / scale;
};

const gpu = await tc.createWebGpuBackend();
log(`webgpu: ${gpu.description}`);
const cpu = tc.createCpuBackend({ matmulFma: 'off' });
log(`cpu: ${cpu.description}, threads ${await cpu.startMatmulThreads()}`);

async function matmul(backend, m, k, n, reps, seed = 1) {
  const r = tc.mulberry32(seed);
  const a = tc.tensor(
    Float32Array.from({ length: m * k }, () => r() - 0.5),
    { backend, shape: [m, k] },
  );
  const b = tc.tensor(
    Float32Array.from({ length: k * n }, () => r() - 0.5),
    { backend, shape: [k, n] },
  );
  let c = tc.matmul(a, b);
  const first = await c.read();
  c.free();
  const times = [];
  for (let round = 0; round < 3; round++) {
    const start = performance.now();
    for (let i = 0; i < reps; i++) {
      c = tc.matmul(a, b);
      if (i < reps - 1) c.free();
    }
    // One number back (the sum), not the whole product: the time is the products'.
    const one = tc.sum(c);
    await one.item();
    one.free();
    c.free();
    times.push((performance.now() - start) / reps);
  }
  a.free();
  b.free();
  const ms = median(times);
  return { first, ms, gflops: (2 * m * k * n) / ms / 1e6 };
}

if (section === 'all' || section === 'matmul') {
  for (const [m, k, n, reps] of [
    [1024, 1024, 1024, 20],
    [4096, 4096, 4096, 5],
    [1024, 768, 50304, 5],
    [1024, 768, 2304, 20],
  ]) {
    const g = await matmul(gpu, m, k, n, reps);
    const c = await matmul(cpu, m, k, n, m * k * n > 2e10 ? 1 : 3);
    log(
      `matmul ${m}x${k}x${n}: webgpu ${g.gflops.toFixed(1)} GFLOP/s (${g.ms.toFixed(2)} ms), cpu ${c.gflops.toFixed(1)}; max |webgpu - cpu| / max |cpu| = ${relErr(g.first, c.first).toExponential(2)}`,
    );
  }
}

async function gpt(backend, config, batch, block, steps, capture, seed = 1, dataSeed = 7) {
  const { params, train } = gptTrainer(tc, backend, config, seed);
  const captured = capture ? new tc.CapturedStep(train) : null;
  const random = tc.mulberry32(dataSeed);
  const losses = [];
  const times = [];
  for (let step = 0; step < steps; step++) {
    const make = () => randomTokens(tc, backend, random, batch, block, config.vocabSize);
    const [x, y] = [make(), make()];
    const start = performance.now();
    const [loss] = captured === null ? await train([x, y]) : await captured.run([x, y]);
    losses.push(await loss.item());
    times.push(performance.now() - start);
    if (captured === null) loss.free();
    x.free();
    y.free();
  }
  for (const p of params) p.free?.();
  return { losses, times };
}

const compare = (label, a, b) => {
  let worst = 0;
  for (let i = 0; i < a.length; i++)
    worst = Math.max(worst, Math.abs(a[i] - b[i]) / Math.abs(b[i]));
  log(
    `${label}: losses ${a
      .slice(0, 3)
      .map((v) => v.toFixed(5))
      .join(
        ', ',
      )} ... ${a.at(-1).toFixed(5)}; worst relative difference from the CPU backend's ${worst.toExponential(2)}`,
  );
};

if (section === 'all' || section === 'gpt') {
  const config = { blockSize: 32, nLayer: 2, nHead: 4, nEmbd: 64, vocabSize: 65 };
  const steps = 40;
  const c = await gpt(cpu, config, 16, 32, steps, false);
  const ge = await gpt(gpu, config, 16, 32, steps, false);
  const gc = await gpt(gpu, config, 16, 32, steps, true);
  const ms = (r) => median(r.times.slice(5)).toFixed(2);
  log(
    `default GPT step (B16 T32), median of steps 5-${steps - 1}: cpu ${ms(c)} ms, webgpu eager ${ms(ge)} ms, webgpu captured ${ms(gc)} ms`,
  );
  compare('default GPT, webgpu eager', ge.losses, c.losses);
  compare('default GPT, webgpu captured', gc.losses, c.losses);
}

if (section === 'all' || section === 'gpt2') {
  const config = { blockSize: 1024, nLayer: 12, nHead: 12, nEmbd: 768, vocabSize: 50304 };
  const g = await gpt(gpu, config, 4, 256, 6, false);
  log(
    `GPT-2 124M B4 T256 webgpu eager: steps ${g.times.map((t) => t.toFixed(0)).join(', ')} ms; ${((4 * 256) / (median(g.times.slice(2)) / 1000)).toFixed(0)} tokens/s`,
  );
  const gc = await gpt(gpu, config, 4, 256, 6, true);
  log(
    `GPT-2 124M B4 T256 webgpu captured: steps ${gc.times.map((t) => t.toFixed(0)).join(', ')} ms; ${((4 * 256) / (median(gc.times.slice(2)) / 1000)).toFixed(0)} tokens/s`,
  );
  const c = await gpt(cpu, config, 4, 256, 2, false);
  log(
    `GPT-2 124M B4 T256 cpu (${cpu.description}): steps ${c.times.map((t) => t.toFixed(0)).join(', ')} ms`,
  );
  compare('GPT-2 124M, webgpu eager, first 2 steps', g.losses.slice(0, 2), c.losses);
  compare('GPT-2 124M, webgpu captured, first 2 steps', gc.losses.slice(0, 2), c.losses);
}

if (section === 'all' || section === 'threads') {
  for (const threads of [1, 2, 4, 8, 16]) {
    const backend = tc.createCpuBackend({ matmulFma: 'off', matmulThreads: threads });
    await backend.startMatmulThreads();
    const r = await matmul(backend, 1024, 1024, 1024, 5);
    const r2 = await matmul(backend, 2048, 2048, 2048, 2);
    log(
      `cpu matmul, ${threads} thread(s): n=1024 ${r.gflops.toFixed(1)} GFLOP/s, n=2048 ${r2.gflops.toFixed(1)}`,
    );
    backend.dispose();
  }
}
log('done');
process.exit(0);

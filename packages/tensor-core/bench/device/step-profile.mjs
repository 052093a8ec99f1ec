// Usage: node step-profile.mjs [gpt2|small] [R] (BUDGET_S caps the seconds; the log also goes to $OUT).
// Where a WebGPU training step's time goes, by kernel call: every backend method is wrapped; one
// step lists the calls (method and operand shapes); then, for each kind of call, a step runs it
// R extra times each time it is called, and (that step's time - the plain step's) / R is the time
// of that kind's calls in a step (its dispatch on the JS thread and its GPU time together).
import { appendFileSync } from 'node:fs';
import { gptTrainer, randomTokens } from './gpt-train.mjs';

const OUT = process.env.OUT ?? '.';
const t0 = performance.now();
const log = (s) => {
  const line = `[${((performance.now() - t0) / 1000).toFixed(1)} s] ${s}`;
  console.log(line);
  appendFileSync(`${OUT}/step-profile.log`, `${line}\n`);
};
const tc = await import('@webshard/tensor-core');
const model = process.argv[2] ?? 'gpt2';
const R = Number(process.argv[3] ?? 4);
const gpu = await tc.createWebGpuBackend();
log(`webgpu: ${gpu.description}`);

const counts = new Map();
let listing = false;
let repeated = null;
let proto = Object.getPrototypeOf(gpu);
const wrapped = new Set();
while (proto && proto !== Object.prototype) {
  for (const name of Object.getOwnPropertyNames(proto)) {
    if (name === 'constructor' || wrapped.has(name)) continue;
    const d = Object.getOwnPropertyDescriptor(proto, name);
    if (typeof d?.value !== 'function') continue;
    if (
      /^(allocate|release|read|write|readRaw|kernel|dispose|flush|run|assertLive|description)$/.test(
        name,
      )
    )
      continue;
    wrapped.add(name);
    const f = d.value;
    gpu[name] = function (...args) {
      let key = name;
      if (typeof args[0] === 'string') key += `:${args[0]}`;
      for (const a of args) if (a?.shape) key += ` ${JSON.stringify(a.shape)}`;
      if (listing) counts.set(key, (counts.get(key) ?? 0) + 1);
      const result = f.apply(this, args);
      if (repeated === key) for (let i = 0; i < R; i++) f.apply(this, args);
      return result;
    };
  }
  proto = Object.getPrototypeOf(proto);
}

const configs = {
  gpt2: [{ blockSize: 1024, nLayer: 12, nHead: 12, nEmbd: 768, vocabSize: 50304 }, 4, 256],
  small: [{ blockSize: 32, nLayer: 2, nHead: 4, nEmbd: 64, vocabSize: 65 }, 16, 32],
};
const [config, batch, block] = configs[model];
const { train } = gptTrainer(tc, gpu, config);
const random = tc.mulberry32(7);
async function step() {
  const make = () => randomTokens(tc, gpu, random, batch, block, config.vocabSize);
  const [x, y] = [make(), make()];
  const start = performance.now();
  const [loss] = await train([x, y]);
  await loss.item();
  const ms = performance.now() - start;
  loss.free();
  x.free();
  y.free();
  return ms;
}
for (let i = 0; i < 2; i++) await step();
listing = true;
const plain = [await step()];
listing = false;
plain.push(await step(), await step());
const base = [...plain].sort((a, b) => a - b)[1];
log(
  `${model}: plain step ${plain.map((t) => t.toFixed(1)).join(', ')} ms; ${counts.size} kinds of call, ${[...counts.values()].reduce((a, b) => a + b, 0)} calls a step`,
);
const rows = [];
const deadline = t0 + Number(process.env.BUDGET_S ?? 150) * 1000;
for (const [key, n] of counts) {
  if (performance.now() > deadline) {
    log('out of time');
    break;
  }
  repeated = key;
  const ms = await step();
  repeated = null;
  rows.push([key, n, (ms - base) / R]);
}
rows.sort((a, b) => b[2] - a[2]);
let sum = 0;
for (const [, , ms] of rows) sum += Math.max(0, ms);
log(`sum of the kinds' times ${sum.toFixed(1)} ms of a ${base.toFixed(1)} ms step`);
for (const [key, n, ms] of rows.slice(0, 40))
  log(`${ms.toFixed(2).padStart(8)} ms ${String(n).padStart(4)} calls  ${key}`);
process.exit(0);

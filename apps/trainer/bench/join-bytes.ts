/**
 * What a newcomer to an elastic DiLoCo world downloads at GPT-2 124M ([Note: a compressed join],
 * [Note: a join in planes] in @webshard/diloco): the global copy of GPT-2 small as the trainer
 * builds it (nanoGPT's initialization: N(0, 0.02) weights, LayerNorm's ones, zero biases, GPT-2's
 * 50257 tokens, block 256, tied embedding) and an outer momentum of N(0, 0.003) values (a trained
 * one's scale; its int8 codes spread as a Gaussian's do, a pessimistic case for the byte code),
 * encoded as the trainer's join sends it, then packed; the seconds at 20 Mbit/s, and the time to
 * pack and unpack on one thread. Run: `pnpm --filter @webshard/trainer bench:join-bytes`.
 * The global copy of a trained model has the same shape of exponents (a few powers of two); the
 * README's table says which rows are measured on what.
 */
import { loadavg } from 'node:os';
import {
  encodeJoinState,
  joinStateBytes,
  packJoinEntries,
  unpackJoinEntries,
} from '@webshard/diloco';
import { createCpuBackend, GPT, RandomGenerator, randn } from '@webshard/tensor-core';

const backend = createCpuBackend();
const model = new GPT(
  { vocabSize: 50257, blockSize: 256, nLayer: 12, nHead: 12, nEmbd: 768, dropout: 0, bias: true },
  { backend, generator: new RandomGenerator(1337) },
);
const params = model.parameters();
const count = params.reduce((sum, p) => sum + p.size, 0);
const global = new Float32Array(count);
let at = 0;
for (const p of params) {
  global.set((await p.read()) as Float32Array, at);
  at += p.size;
}
const momentum = new Float32Array(count);
const random = new RandomGenerator(7);
for (let i = 0; i < count; i += 1 << 20) {
  const n = Math.min(1 << 20, count - i);
  const values = (await randn([n], { backend, generator: random }).read()) as Float32Array;
  for (let k = 0; k < n; k++) momentum[i + k] = values[k]! * 0.003;
}
const state = {
  innerStep: 500,
  outerStep: 10,
  global,
  momentumBuffer: momentum,
  residual: null,
  shardResidual: null,
};
const entries = encodeJoinState(state);
const bytes = (e: ReadonlyMap<string, ArrayBufferView>) =>
  [...e.values()].reduce((sum, v) => sum + v.byteLength, 0);
let t = performance.now();
const packed = packJoinEntries(entries);
const packMs = performance.now() - t;
t = performance.now();
const back = unpackJoinEntries(packed);
const unpackMs = performance.now() - t;
const same = new Uint32Array(back.get('join.global')!.buffer).every(
  (w, i) => w === new Uint32Array(global.buffer)[i],
);
const mb = (b: number) => (b / 1e6).toFixed(1);
const seconds = (b: number) => (b / 2.5e6).toFixed(0);
const part = (name: string) =>
  [...packed].filter(([k]) => k.startsWith(name)).reduce((s, [, v]) => s + v.byteLength, 0);
console.log(`GPT-2 124M: ${count} parameters; load average ${loadavg()[0]!.toFixed(1)}`);
console.log(
  `int8 join as sent before: ${mb(bytes(entries))} MB (joinStateBytes ${mb(joinStateBytes(count))}), ${seconds(bytes(entries))} s at 20 Mbit/s`,
);
console.log(
  `packed: ${mb(bytes(packed))} MB (${(bytes(packed) / bytes(entries)).toFixed(3)}), ${seconds(bytes(packed))} s at 20 Mbit/s; global ${mb(part('join.global'))} MB of ${mb(4 * count)}, momentum ${mb(part('join.momentum'))} MB of ${mb(bytes(entries) - 4 * count)}`,
);
console.log(
  `pack ${packMs.toFixed(0)} ms, unpack ${unpackMs.toFixed(0)} ms (one thread); global bit for bit: ${same}`,
);

// The GPT training step the device scripts time (gpu-check.mjs, step-profile.mjs): the trainer's
// step (AdamW, clip 1, no dropout) on `backend` from `seed`, and batches of random tokens.

/** A GPT of `config` on `backend`: its parameters and one step `train([x, y]) -> [loss]`. */
export function gptTrainer(tc, backend, config, seed = 1) {
  const model = new tc.GPT(
    { ...config, dropout: 0, bias: true },
    { backend, generator: new tc.RandomGenerator(seed) },
  );
  const params = model.parameters();
  const optimizer = new tc.AdamW(params, { lr: 3e-4, betas: [0.9, 0.95], weightDecay: 0.1 });
  const train = async ([x, y]) => {
    const loss = tc.tidy(() => {
      const out = model.call(x, y);
      out.logits.free();
      return out.loss;
    });
    await loss.backward();
    await tc.clipGradNorm(params, 1);
    optimizer.step();
    optimizer.zeroGrad();
    return [loss];
  };
  return { params, train };
}

/** A [batch, block] i32 tensor of tokens below `vocab`, from `random` (a mulberry32). */
export function randomTokens(tc, backend, random, batch, block, vocab) {
  const tokens = Int32Array.from({ length: batch * block }, () => Math.floor(random() * vocab));
  return tc.tensor(tokens, { backend, dtype: 'i32', shape: [batch, block] });
}

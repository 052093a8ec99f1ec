#!/usr/bin/env python3
"""A small GPT-2 in Hugging Face transformers' layout, and its logits, for `--init` (NumPy only).

Run from anywhere:  python3 apps/trainer/__fixtures__/make_hf_gpt2.py

transformers is not installed on these machines (and no model hub is reachable), so this script
writes what `GPT2LMHeadModel(GPT2Config(...)).save_pretrained(dir, safe_serialization=True)` writes
and computes the logits with a NumPy transcription of transformers' GPT-2 forward (modeling_gpt2.py,
eval mode):

  hf-gpt2.safetensors            the weights under transformers' names, `transformer.` prefixed,
                                 Conv1D weights stored [in, out] (c_attn, attn.c_proj, c_fc,
                                 mlp.c_proj), lm_head.weight left out (tied to transformer.wte.weight,
                                 which save_pretrained drops), metadata {"format": "pt"}
  hf-gpt2.reference.safetensors  `ids` (I32 [2, 16]) and `logits` (F64 [2, 16, 101]): the forward in
                                 float64 from the stored float32 weights

The forward: wte[ids] + wpe[positions]; per block x += c_proj(attn(ln_1(x))), x += mlp(ln_2(x)) with
Conv1D y = x @ W + b, causal softmax(q k^T / sqrt(head size)), the MLP's activation gelu_new
(0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))), layer norms with eps 1e-5; then ln_f and the
tied head, logits = ln_f(x) @ wte^T. n_positions (24) is longer than the block the test uses (16),
so loading crops wpe as nanoGPT's crop_block_size does. Weights are drawn larger than GPT-2's 0.02
so that the activations reach the range where gelu_new and the exact GELU differ.
"""
import json
import os
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = dict(vocab_size=101, n_positions=24, n_embd=32, n_layer=2, n_head=4)
EPS = 1e-5


def write_safetensors(path, tensors, metadata=None):
    """safetensors' layout: 8-byte header length, JSON header padded to 8 bytes, the data."""
    names = {np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("int32"): "I32"}
    items = sorted(tensors.items(), key=lambda kv: (-kv[1].dtype.itemsize, kv[0]))
    header = {"__metadata__": metadata} if metadata else {}
    blobs, offset = [], 0
    for name, array in items:
        raw = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
        header[name] = {
            "dtype": names[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def make_weights(rng):
    c, v, p = CONFIG["n_embd"], CONFIG["vocab_size"], CONFIG["n_positions"]
    normal = lambda shape, std: (rng.standard_normal(shape) * std).astype(np.float32)
    w = {
        "transformer.wte.weight": normal((v, c), 0.5),
        "transformer.wpe.weight": normal((p, c), 0.3),
        "transformer.ln_f.weight": (1 + normal((c,), 0.1)).astype(np.float32),
        "transformer.ln_f.bias": normal((c,), 0.1),
    }
    for i in range(CONFIG["n_layer"]):
        h = f"transformer.h.{i}."
        for ln in ("ln_1", "ln_2"):
            w[h + ln + ".weight"] = (1 + normal((c,), 0.1)).astype(np.float32)
            w[h + ln + ".bias"] = normal((c,), 0.1)
        # Conv1D: weight [in, out].
        for name, n_in, n_out in (
            ("attn.c_attn", c, 3 * c),
            ("attn.c_proj", c, c),
            ("mlp.c_fc", c, 4 * c),
            ("mlp.c_proj", 4 * c, c),
        ):
            w[h + name + ".weight"] = normal((n_in, n_out), 0.6 / np.sqrt(n_in) * 2)
            w[h + name + ".bias"] = normal((n_out,), 0.2)
    return w


def layer_norm(x, weight, bias):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * weight + bias


def gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def forward(w, ids):
    w = {k: v.astype(np.float64) for k, v in w.items()}
    b, t = ids.shape
    c, nh = CONFIG["n_embd"], CONFIG["n_head"]
    hs = c // nh
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][np.arange(t)]
    causal = np.tril(np.ones((t, t), dtype=bool))
    for i in range(CONFIG["n_layer"]):
        h = f"transformer.h.{i}."
        a = layer_norm(x, w[h + "ln_1.weight"], w[h + "ln_1.bias"])
        qkv = a @ w[h + "attn.c_attn.weight"] + w[h + "attn.c_attn.bias"]
        q, k, v = np.split(qkv, 3, axis=-1)
        heads = lambda z: z.reshape(b, t, nh, hs).transpose(0, 2, 1, 3)
        q, k, v = heads(q), heads(k), heads(v)
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hs)
        scores = np.where(causal, scores, -np.inf)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        att = scores / scores.sum(-1, keepdims=True)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(b, t, c)
        x = x + y @ w[h + "attn.c_proj.weight"] + w[h + "attn.c_proj.bias"]
        m = layer_norm(x, w[h + "ln_2.weight"], w[h + "ln_2.bias"])
        m = gelu_new(m @ w[h + "mlp.c_fc.weight"] + w[h + "mlp.c_fc.bias"])
        x = x + m @ w[h + "mlp.c_proj.weight"] + w[h + "mlp.c_proj.bias"]
    x = layer_norm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"])
    return x @ w["transformer.wte.weight"].T


def main():
    rng = np.random.default_rng(20261123)
    weights = make_weights(rng)
    ids = rng.integers(0, CONFIG["vocab_size"], size=(2, 16)).astype(np.int32)
    logits = forward(weights, ids)
    write_safetensors(os.path.join(HERE, "hf-gpt2.safetensors"), weights, {"format": "pt"})
    write_safetensors(
        os.path.join(HERE, "hf-gpt2.reference.safetensors"),
        {"ids": ids, "logits": logits},
        {"config": json.dumps(CONFIG)},
    )
    print(f"logits {logits.shape}, |logits| max {np.abs(logits).max():.3f}")


if __name__ == "__main__":
    main()

"""Load a consolidated checkpoint in PyTorch and print the loss of the test GPT on given tokens.

usage: python3 torch_forward.py MODEL.safetensors CONFIG_JSON TOKENS_JSON
The model is tensor-core's GPT as packages/fsdp/src/test-support/gpt.ts trains it (nanoGPT's, with
PyTorch's names; lm_head tied to transformer.wte).
The safetensors file is read with the format's own rules (8-byte header length, JSON header, raw
little-endian data), so only torch is needed.
"""
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32", entry
        begin, end = entry["data_offsets"]
        values = torch.frombuffer(bytearray(data[base + begin : base + end]), dtype=torch.float32)
        out[name] = values.reshape(entry["shape"])
    return out


def main():
    weights = load_safetensors(sys.argv[1])
    config = json.loads(sys.argv[2])
    rows = json.loads(sys.argv[3])
    w = lambda name: weights[name]
    c, heads = config["nEmbd"], config["nHead"]
    ids = torch.tensor([r[:-1] for r in rows])
    targets = torch.tensor([r[1:] for r in rows])
    b, t = ids.shape
    x = F.embedding(ids, w("transformer.wte.weight"))
    x = x + F.embedding(torch.arange(t), w("transformer.wpe.weight"))
    for i in range(config["nLayer"]):
        p = f"transformer.h.{i}."
        h = F.layer_norm(x, (c,), w(p + "ln_1.weight"), w(p + "ln_1.bias"))
        qkv = F.linear(h, w(p + "attn.c_attn.weight"), w(p + "attn.c_attn.bias"))
        q, k, v = qkv.split(c, dim=2)
        q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // heads)
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + F.linear(y, w(p + "attn.c_proj.weight"), w(p + "attn.c_proj.bias"))
        h = F.layer_norm(x, (c,), w(p + "ln_2.weight"), w(p + "ln_2.bias"))
        h = F.gelu(F.linear(h, w(p + "mlp.c_fc.weight"), w(p + "mlp.c_fc.bias")))
        x = x + F.linear(h, w(p + "mlp.c_proj.weight"), w(p + "mlp.c_proj.bias"))
    x = F.layer_norm(x, (c,), w("transformer.ln_f.weight"), w("transformer.ln_f.bias"))
    logits = F.linear(x, w("transformer.wte.weight"))
    loss = F.cross_entropy(logits.view(b * t, -1), targets.view(b * t))
    print(json.dumps({"loss": loss.item()}))


if __name__ == "__main__":
    main()

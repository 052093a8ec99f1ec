#!/usr/bin/env python3
"""Reference fixtures for the trainer's proof tests, made with PyTorch (1.13, CPU).

Run from anywhere:  /usr/bin/python3 apps/trainer/__fixtures__/make_fixtures.py

Writes beside this script, for each model (`mlp`, `gpt`):
  <model>.init.safetensors     the initial weights, PyTorch parameter names
  <model>.batches.safetensors  the 20 deterministic batches (inputs and targets, stacked)
  <model>.json                 config, optimizer settings, per-step losses and grad norms (in f32,
                               and the same run in f64 to show how far f32 rounding alone moves)
and, for the trainer's CLI (every strategy is checked against it, `src/strategies.test.ts`):
  gpt-cli.tokens.bin           a nanoGPT `.bin` (uint16 tokens) for `--data`
  gpt-cli.init.safetensors     the initial weights for `--init`
  gpt-cli.final.safetensors    PyTorch's weights after the 20 steps
  gpt-cli.json                 the CLI flags of the run and PyTorch's per-step losses, batches taken
                               by the CLI's rule (README, "Batches") from the first 90 % of the tokens
and packages/tensor-core/src/io/__fixtures__/io-reference.{safetensors,json}: one tensor of each
dtype with edge values, to check that a file in PyTorch's layout reads back bit for bit.

The safetensors writer is written here by hand (no safetensors package is installed): 8-byte
little-endian header length, JSON header padded with spaces to 8 bytes, tensors ordered by element
size (largest first) then name, as the Rust library orders them. The tests never run PyTorch.
"""
import json
import math
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 20
OPTIM = dict(betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, clip=1.0)
DTYPE_NAMES = {
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int32: "I32",
    torch.float64: "F64",
}


def write_safetensors(path, tensors, metadata=None):
    items = sorted(tensors.items(), key=lambda kv: (-kv[1].element_size(), kv[0]))
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    blobs = []
    offset = 0
    for name, tensor in items:
        tensor = tensor.detach().contiguous().cpu()
        if tensor.dtype in (torch.float16, torch.bfloat16):
            raw = tensor.view(torch.int16).numpy().astype("<i2").tobytes()
        else:
            raw = tensor.numpy().astype(tensor.numpy().dtype.newbyteorder("<")).tobytes()
        header[name] = {
            "dtype": DTYPE_NAMES[tensor.dtype],
            "shape": list(tensor.shape),
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


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f, indent=1)
        f.write("\n")


# ---- models --------------------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self, n_in, n_hidden, n_out):
        super().__init__()
        self.fc1 = nn.Linear(n_in, n_hidden)
        self.fc2 = nn.Linear(n_hidden, n_out)

    def forward(self, x, y):
        return F.mse_loss(self.fc2(F.gelu(self.fc1(x))), y)


# nanoGPT's model.py (Karpathy), reduced to what the fixture uses: bias=True, dropout=0, exact GELU,
# the manual attention path (PyTorch 1.13 has no scaled_dot_product_attention).
class LayerNorm(nn.Module):
    def __init__(self, ndim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_attn = nn.Linear(cfg["n_embd"], 3 * cfg["n_embd"])
        self.c_proj = nn.Linear(cfg["n_embd"], cfg["n_embd"])
        self.n_head = cfg["n_head"]
        self.n_embd = cfg["n_embd"]
        size = cfg["block_size"]
        # Not persistent, so the state dict holds parameters only (nanoGPT drops `.attn.bias` on load).
        self.register_buffer(
            "bias", torch.tril(torch.ones(size, size)).view(1, 1, size, size), persistent=False
        )

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = LayerNorm(cfg["n_embd"])
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = LayerNorm(cfg["n_embd"])
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(cfg["n_embd"], 4 * cfg["n_embd"])
        self.mlp.c_proj = nn.Linear(4 * cfg["n_embd"], cfg["n_embd"])

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        h = self.ln_2(x)
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(h)))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(cfg["vocab_size"], cfg["n_embd"]),
                wpe=nn.Embedding(cfg["block_size"], cfg["n_embd"]),
                h=nn.ModuleList([Block(cfg) for _ in range(cfg["n_layer"])]),
                ln_f=LayerNorm(cfg["n_embd"]),
            )
        )
        self.lm_head = nn.Linear(cfg["n_embd"], cfg["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg["n_layer"]))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        _, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


# ---- training ------------------------------------------------------------------------------------


def train(model, batches, dtype, lr):
    """20 steps of AdamW with nanoGPT's two groups (decay 2-D weights only) and clip_grad_norm_."""
    model = model.to(dtype)
    params = {name: p for name, p in model.named_parameters()}
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": OPTIM["weight_decay"]},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=lr,
        betas=OPTIM["betas"],
        eps=OPTIM["eps"],
    )
    losses, norms = [], []
    for x, y in batches:
        if x.is_floating_point():
            x, y = x.to(dtype), y.to(dtype)
        optimizer.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), OPTIM["clip"])
        optimizer.step()
        losses.append(loss.item())
        norms.append(norm.item())
    return losses, norms


def make(name, build, batches, config, batch_tensors, lr):
    torch.manual_seed(1234)
    model = build()
    # The full state dict, like torch.save(model.state_dict()): the tied `lm_head.weight` is there
    # too, a copy of `transformer.wte.weight`.
    state = {k: v.clone() for k, v in model.state_dict().items()}
    write_safetensors(
        os.path.join(HERE, f"{name}.init.safetensors"),
        state,
        {"format": "pt", "made_by": "make_fixtures.py"},
    )
    write_safetensors(os.path.join(HERE, f"{name}.batches.safetensors"), batch_tensors)
    losses, norms = train(model, batches, torch.float32, lr)
    reference = build_from(build, state)
    losses64, norms64 = train(reference, batches, torch.float64, lr)
    gap = max(abs(a - b) / abs(b) for a, b in zip(losses, losses64))
    write_json(
        os.path.join(HERE, f"{name}.json"),
        {
            "config": config,
            "optimizer": {**OPTIM, "lr": lr, "betas": list(OPTIM["betas"]), "decay": "2-D weights only"},
            "steps": STEPS,
            "torch": torch.__version__,
            "losses": losses,
            "gradNorms": norms,
            "lossesF64": losses64,
            "gradNormsF64": norms64,
            "maxRelativeGapF32VsF64": gap,
        },
    )
    print(" ".join(f"{v:.4f}" for v in losses))
    print(f"{name}: loss {losses[0]:.5f} -> {losses[-1]:.5f}, f32 vs f64 max relative gap {gap:.2e}")


def build_from(build, state):
    model = build()
    model.load_state_dict(state, strict=True)
    return model


def mlp_fixture():
    config = {"n_in": 16, "n_hidden": 32, "n_out": 8, "batch": 8, "activation": "gelu", "loss": "mse"}
    torch.manual_seed(7)
    teacher = torch.randn(config["n_in"], config["n_out"]) / math.sqrt(config["n_in"])
    x = torch.randn(STEPS, config["batch"], config["n_in"])
    y = torch.tanh(x @ teacher)
    batches = [(x[i], y[i]) for i in range(STEPS)]
    make(
        "mlp",
        lambda: MLP(config["n_in"], config["n_hidden"], config["n_out"]),
        batches,
        config,
        {"x": x, "y": y},
        lr=1e-2,
    )


def gpt_fixture():
    config = {
        "vocab_size": 64,
        "block_size": 16,
        "n_layer": 2,
        "n_head": 2,
        "n_embd": 32,
        "dropout": 0.0,
        "bias": True,
        "batch": 4,
    }
    # Arithmetic progressions mod the vocabulary: learnable, so the loss visibly falls in 20 steps.
    torch.manual_seed(11)
    start = torch.randint(0, config["vocab_size"], (STEPS, config["batch"], 1))
    stride = torch.randint(1, 4, (STEPS, config["batch"], 1))
    t = torch.arange(config["block_size"] + 1).view(1, 1, -1)
    seq = (start + stride * t) % config["vocab_size"]
    idx = seq[:, :, :-1].to(torch.int32)
    targets = seq[:, :, 1:].to(torch.int32)
    batches = [(idx[i].long(), targets[i].long()) for i in range(STEPS)]
    make("gpt", lambda: GPT(config), batches, config, {"idx": idx, "targets": targets}, lr=1e-3)


def io_reference():
    f32 = torch.tensor([[0.0, -0.0, 1.0, -2.5], [3.4028234663852886e38, 1e-45, 1.1754943508222875e-38, math.pi]], dtype=torch.float32)
    f16 = torch.tensor([0.0, -0.0, 65504.0, 6.103515625e-05, 5.960464477539063e-08, 0.1, -1.5, 1e4], dtype=torch.float16)
    bf16 = torch.tensor([0.0, -0.0, 3.3895313892515355e38, 1e-38, 0.1, -1.5, 256.0, math.e], dtype=torch.bfloat16)
    i32 = torch.tensor([[0, 1, -1], [2147483647, -2147483648, 42]], dtype=torch.int32)
    f64 = torch.tensor([math.pi, -math.e, 1e-300, 1.7976931348623157e308, 5e-324], dtype=torch.float64)
    tensors = {
        "f32": f32,
        "f16": f16,
        "bf16": bf16,
        "i32": i32,
        "f64": f64,
        "scalar": torch.tensor(2.0),
        "empty": torch.zeros(0, 3),
    }
    # Beside tensor-core's safetensors tests, which check that this file reads back bit for bit.
    out = os.path.join(HERE, "..", "..", "..", "packages", "tensor-core", "src", "io", "__fixtures__")
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "io-reference.safetensors"), tensors, {"format": "pt", "note": "edge values"})

    def bits(t, view):
        return [int(b) & (0xFFFF if view == torch.int16 else 0xFFFFFFFF) for b in t.view(view).flatten().tolist()]

    write_json(
        os.path.join(out, "io-reference.json"),
        {
            "metadata": {"format": "pt", "note": "edge values"},
            "tensors": {
                "f32": {"dtype": "f32", "shape": list(f32.shape), "bits": bits(f32, torch.int32)},
                "f16": {"dtype": "f16", "shape": list(f16.shape), "bits": bits(f16, torch.int16)},
                "bf16": {"dtype": "bf16", "shape": list(bf16.shape), "bits": bits(bf16, torch.int16)},
                "i32": {"dtype": "i32", "shape": list(i32.shape), "values": i32.flatten().tolist()},
                "f64": {"dtype": "f64", "shape": list(f64.shape), "values": [repr(v) for v in f64.tolist()]},
                "scalar": {"dtype": "f32", "shape": [], "bits": bits(tensors["scalar"], torch.int32)},
                "empty": {"dtype": "f32", "shape": [0, 3], "bits": []},
            },
        },
    )


def gpt_cli_fixture():
    """The trainer's CLI run: `--data` a .bin, `--init` weights, the CLI's batch rule, 20 steps."""
    config = {"vocab_size": 64, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 32, "dropout": 0.0, "bias": True}
    batch, lr, T = 8, 1e-3, config["block_size"]
    # Arithmetic progressions mod the vocabulary, 64 tokens each, end to end: learnable.
    g = torch.Generator().manual_seed(23)
    runs = []
    for _ in range(80):
        start = int(torch.randint(0, config["vocab_size"], (1,), generator=g))
        stride = int(torch.randint(1, 4, (1,), generator=g))
        runs.append((start + stride * torch.arange(64)) % config["vocab_size"])
    tokens = torch.cat(runs).to(torch.int64)
    with open(os.path.join(HERE, "gpt-cli.tokens.bin"), "wb") as f:
        f.write(tokens.numpy().astype("<u2").tobytes())
    train_tokens = tokens[: int(len(tokens) * 0.9)]
    n = len(train_tokens)

    def batch_at(step):
        rows = [((step * batch + j) * T) % (n - T - 1) for j in range(batch)]
        x = torch.stack([train_tokens[r : r + T] for r in rows])
        y = torch.stack([train_tokens[r + 1 : r + T + 1] for r in rows])
        return x, y

    torch.manual_seed(4321)
    model = GPT(config)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    write_safetensors(os.path.join(HERE, "gpt-cli.init.safetensors"), state, {"format": "pt"})
    losses, _ = train(model, [batch_at(s) for s in range(STEPS)], torch.float32, lr)
    final = {k: v.clone() for k, v in model.state_dict().items()}
    write_safetensors(os.path.join(HERE, "gpt-cli.final.safetensors"), final, {"format": "pt"})
    flags = [
        "--data", "gpt-cli.tokens.bin", "--init", "gpt-cli.init.safetensors",
        "--vocab-size", str(config["vocab_size"]), "--block-size", str(T),
        "--n-layer", str(config["n_layer"]), "--n-head", str(config["n_head"]), "--n-embd", str(config["n_embd"]),
        "--batch-size", str(batch), "--steps", str(STEPS), "--lr", str(lr),
        "--beta1", str(OPTIM["betas"][0]), "--beta2", str(OPTIM["betas"][1]), "--eps", str(OPTIM["eps"]),
        "--weight-decay", str(OPTIM["weight_decay"]), "--grad-clip", str(OPTIM["clip"]),
        "--lr-schedule", "constant", "--sample-length", "0",
    ]
    write_json(
        os.path.join(HERE, "gpt-cli.json"),
        {"flags": flags, "config": config, "steps": STEPS, "torch": torch.__version__, "losses": losses},
    )
    print(f"gpt-cli: loss {losses[0]:.5f} -> {losses[-1]:.5f}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    io_reference()
    mlp_fixture()
    gpt_fixture()
    gpt_cli_fixture()

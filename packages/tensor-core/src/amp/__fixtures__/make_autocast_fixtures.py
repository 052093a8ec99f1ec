#!/usr/bin/env python3
"""Reference outputs of PyTorch's autocast for src/amp/autocast-parity.test.ts.

Run from the repository root (torch from `pnpm peers:torch`, torch 2.13.0+cpu):
    .venv-torch/bin/python packages/tensor-core/src/amp/__fixtures__/make_autocast_fixtures.py

Writes autocast-reference.json beside this script: the inputs and f32 parameters of a small
block (layer norm, two linears with GELU, a self-attention-like softmax(h h^T / sqrt(d)) v with
v a layer norm of the 16-bit h, a residual add of f32 and 16-bit tensors, a linear head, cross entropy), and for each case the
dtype and values of every intermediate, the loss, and the f32 parameters' gradients.

Cases:
  cpu-bf16, cpu-f16    the block run inside torch.autocast('cpu', dtype): PyTorch's own CPU
                       policy and kernels, compared with webshard's `deviceType: 'cpu'`.
  cuda-bf16, cuda-f16  PyTorch's CUDA lists (webshard's default) cannot run here (no CUDA device),
                       so this script applies them itself: each op's inputs cast as those lists
                       say (linear and matmul to dtype; layer_norm, softmax, cross_entropy in f32;
                       the residual add promoted), then PyTorch's CPU kernels run. It checks the
                       numerics of webshard's default policy against PyTorch's kernels; the policy
                       itself is the table in autocast-policy.ts, written from autocast_mode.h.
The tests never run PyTorch.
"""
import json
import math
import os

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
NAMES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
D, HIDDEN, CLASSES, ROWS = 8, 16, 5, 4


def make_inputs():
    g = torch.Generator().manual_seed(20261125)
    def u(*shape, scale=1.0):
        return ((torch.rand(*shape, generator=g) * 2 - 1) * scale).float()
    params = {
        "ln.weight": 1 + u(D, scale=0.2),
        "ln.bias": u(D, scale=0.2),
        "fc1.weight": u(HIDDEN, D, scale=1 / math.sqrt(D)),
        "fc1.bias": u(HIDDEN, scale=1 / math.sqrt(D)),
        "fc2.weight": u(D, HIDDEN, scale=1 / math.sqrt(HIDDEN)),
        "fc2.bias": u(D, scale=1 / math.sqrt(HIDDEN)),
        "ln2.weight": 1 + u(D, scale=0.2),
        "ln2.bias": u(D, scale=0.2),
        "head.weight": u(CLASSES, D, scale=1 / math.sqrt(D)),
        "head.bias": u(CLASSES, scale=1 / math.sqrt(D)),
    }
    x = u(ROWS, D, scale=2.0)
    targets = torch.tensor([0, 3, 1, 4], dtype=torch.int64)
    return params, x, targets


def block(p, x, targets, cast):
    """The block; `cast(op, *tensors)` returns the tensors as the policy casts them for `op`."""
    out = {}
    (h,) = cast("layer_norm", x)
    w, b = cast("layer_norm_params", p["ln.weight"], p["ln.bias"])
    out["ln"] = F.layer_norm(h, (D,), w, b)
    out["fc1"] = F.linear(*cast("linear", out["ln"], p["fc1.weight"], p["fc1.bias"]))
    out["gelu"] = F.gelu(out["fc1"])
    out["fc2"] = F.linear(*cast("linear", out["gelu"], p["fc2.weight"], p["fc2.bias"]))
    a, bt = cast("matmul", out["fc2"], out["fc2"])
    out["scores"] = torch.matmul(a, bt.transpose(0, 1)) * (1 / math.sqrt(D))
    (s,) = cast("softmax", out["scores"])
    out["att"] = torch.softmax(s, -1)
    # A layer norm of a 16-bit input with f32 weights: f32 under the CUDA lists; under the CPU
    # lists PyTorch's mixed-dtype layer_norm, which gives the input's dtype.
    (h,) = cast("layer_norm", out["fc2"])
    w, b = cast("layer_norm_params", p["ln2.weight"], p["ln2.bias"])
    out["ln2"] = F.layer_norm(h, (D,), w, b)
    out["mixed"] = torch.matmul(*cast("matmul", out["att"], out["ln2"]))
    out["residual"] = torch.add(*cast("add", x, out["mixed"]))
    out["logits"] = F.linear(*cast("linear", out["residual"], p["head.weight"], p["head.bias"]))
    (logits,) = cast("cross_entropy", out["logits"])
    out["loss"] = F.cross_entropy(logits, targets)
    return out


def no_cast(op, *tensors):
    return tensors


def cuda_lists(dtype):
    """PyTorch's CUDA lists for the ops of the block, applied by hand."""
    def cast(op, *tensors):
        if op in ("linear", "matmul"):
            return tuple(t.to(dtype) for t in tensors)
        if op in ("layer_norm", "layer_norm_params", "softmax", "cross_entropy"):
            return tuple(t.float() for t in tensors)
        if op == "add":  # not listed: type promotion
            return tuple(t.float() for t in tensors) if len({t.dtype for t in tensors}) > 1 else tensors
        raise ValueError(op)
    return cast


def values(t):
    return [float(v) for v in t.detach().float().flatten().tolist()]


def run(case, params, x, targets):
    device_type, dtype_name = case.split("-")
    dtype = DTYPES[dtype_name]
    p = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    if device_type == "cpu":
        with torch.autocast("cpu", dtype=dtype):
            out = block(p, x, targets, no_cast)
    else:
        out = block(p, x, targets, cuda_lists(dtype))
    out["loss"].backward()
    return {
        "outputs": {k: {"dtype": NAMES[v.dtype], "shape": list(v.shape), "values": values(v)} for k, v in out.items()},
        "grads": {k: values(v.grad) for k, v in p.items()},
    }


def main():
    params, x, targets = make_inputs()
    fixture = {
        "torch": torch.__version__,
        "params": {k: {"shape": list(v.shape), "values": values(v)} for k, v in params.items()},
        "x": {"shape": list(x.shape), "values": values(x)},
        "targets": targets.tolist(),
        "cases": {c: run(c, params, x, targets) for c in ("cpu-bf16", "cpu-f16", "cuda-bf16", "cuda-f16")},
    }
    with open(os.path.join(HERE, "autocast-reference.json"), "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()

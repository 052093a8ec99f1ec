"""GPT-2 small's precision against PyTorch in float64 (issue 30), the reference half of
bench/gpt2-precision.ts.

  prepare DIR   writes DIR/init.safetensors (GPT-2 124M at block 128, nanoGPT's init, PyTorch
                names), DIR/tokens.bin (uint16 ids, for --data) and DIR/torch-f32.safetensors and
                DIR/torch-f64.safetensors: the weights after STEPS AdamW steps in float32 and in
                float64 from that init, batches by the trainer's rule (its README, "Batches").
  compare DIR   reads DIR/ours.safetensors (the trainer's --save after the same steps) and prints
                one JSON line: for every tensor, how far ours and PyTorch float32 each end from
                float64, relative to the tensor's own update (max |w - w64| / max |w64 - w0|).

Run with PyPI's torch (tooling/peers/torch-venv.sh). The model is the fixtures' nanoGPT.
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "__fixtures__"))

import torch  # noqa: E402
from make_fixtures import GPT, OPTIM, train, write_safetensors  # noqa: E402

CONFIG = dict(vocab_size=50304, block_size=128, n_layer=12, n_head=12, n_embd=768, dropout=0.0, bias=True)
BATCH, STEPS, LR, TOKENS = 4, 3, 6e-4, 65536


def read_safetensors(path):
    """Every tensor of a safetensors file (F32 or F64), as float64."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dtype = {"F32": torch.float32, "F64": torch.float64}[info["dtype"]]
        t = torch.frombuffer(bytearray(data[start:end]), dtype=dtype).reshape(info["shape"])
        out[name] = t.to(torch.float64)
    return out


def batches(tokens):
    train_tokens = tokens[: int(len(tokens) * 0.9)]
    n, T = len(train_tokens), CONFIG["block_size"]
    out = []
    for step in range(STEPS):
        rows = [((step * BATCH + j) * T) % (n - T - 1) for j in range(BATCH)]
        x = torch.stack([train_tokens[r : r + T] for r in rows])
        y = torch.stack([train_tokens[r + 1 : r + T + 1] for r in rows])
        out.append((x, y))
    return out


def prepare(folder):
    torch.manual_seed(2024)
    model = GPT(CONFIG)
    init = {k: v.clone() for k, v in model.state_dict().items()}
    write_safetensors(os.path.join(folder, "init.safetensors"), init, {"format": "pt"})
    g = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, 50257, (TOKENS,), generator=g).to(torch.int64)
    with open(os.path.join(folder, "tokens.bin"), "wb") as f:
        f.write(tokens.numpy().astype("<u2").tobytes())
    losses = {}
    for name, dtype in (("f32", torch.float32), ("f64", torch.float64)):
        model = GPT(CONFIG)
        model.load_state_dict(init, strict=True)
        losses[name], _ = train(model, batches(tokens), dtype, LR)
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        write_safetensors(os.path.join(folder, f"torch-{name}.safetensors"), state, {"format": "pt"})
    print(json.dumps({"torch": torch.__version__, "losses": losses, "optimizer": {**OPTIM, "lr": LR}}))


def compare(folder):
    init = read_safetensors(os.path.join(folder, "init.safetensors"))
    f64 = read_safetensors(os.path.join(folder, "torch-f64.safetensors"))
    f32 = read_safetensors(os.path.join(folder, "torch-f32.safetensors"))
    ours = read_safetensors(os.path.join(folder, "ours.safetensors"))
    rows = []
    for name, w64 in f64.items():
        if name not in ours:
            ours_name = "transformer.wte.weight" if name == "lm_head.weight" else name
        else:
            ours_name = name
        update = (w64 - init[name]).abs().max().item()
        if update == 0:
            continue
        rows.append(
            {
                "name": name,
                "ours": (ours[ours_name] - w64).abs().max().item() / update,
                "torchF32": (f32[name] - w64).abs().max().item() / update,
            }
        )
    print(json.dumps({"tensors": rows}))


if __name__ == "__main__":
    torch.set_num_threads(2)
    {"prepare": prepare, "compare": compare}[sys.argv[1]](sys.argv[2])

"""GPT-2 small's precision against PyTorch in float64 (issue 30), the reference half of
bench/gpt2-precision.ts.

  prepare DIR   writes DIR/init.safetensors (GPT-2 124M at block 128, nanoGPT's init, PyTorch
                names), DIR/tokens.bin (uint16 ids, for --data) and DIR/torch-f32.safetensors and
                DIR/torch-f64.safetensors: the weights after STEPS AdamW steps in float32 and in
                float64 from that init, batches by the trainer's rule (its README, "Batches").
  gloo DIR WORLD
                PyTorch's own data parallelism in float32: DistributedDataParallel on WORLD
                processes over gloo, each on its share of every batch (the trainer's rule: rank r
                takes samples [r B / W, (r+1) B / W)), the same steps from the same init; rank 0
                writes DIR/torch-ddp-f32.safetensors. (PyTorch's FSDP is not run: Debian's 1.13
                cannot import torch.distributed.fsdp on Python 3.11, a dataclass with a mutable
                default.)
  compare DIR [NAME...]
                reads DIR/NAME.safetensors for every NAME (default `ours`: the trainer's --save
                after the same steps; also `torch-ddp-f32` after `gloo`) and prints one JSON line:
                for every tensor, how far each and PyTorch float32 (one process) end from float64,
                relative to the tensor's own update (max |w - w64| / max |w64 - w0|), and the same
                without the tensor's farthest element (NAMENext).

Any torch runs it: PyPI's (tooling/peers/torch-venv.sh) or Debian's python3-torch. The float32
peer's distances depend on the BLAS its matmuls run on (the README's table says which). The model
is the fixtures' nanoGPT.
"""
import json
import math
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "__fixtures__"))

import torch  # noqa: E402
from make_fixtures import GPT, OPTIM, write_safetensors  # noqa: E402

CONFIG = dict(vocab_size=50304, block_size=128, n_layer=12, n_head=12, n_embd=768, dropout=0.0, bias=True)
BATCH, STEPS, LR, TOKENS = 4, 3, 6e-4, 65536


def clip_grad_norm(params, max_norm):
    """`torch.nn.utils.clip_grad_norm_` with the norm summed in float64. Debian's torch 1.13's
    float32 norm is 2.7e-3 off over wte's 38.6 M elements (a random vector, measured), and every
    tensor's distance from float64 follows the clip's error ([Note: GPT-2 small against float64]):
    its float32 peer then ended every tensor at least 3.9e-4 of its update from float64, where
    PyPI's 2.13 had 7e-6 on a bias. With the norm in float64 the peer is the arithmetic of the steps, whichever
    torch runs it. The factor is applied in the gradients' dtype, as torch does."""
    grads = [p.grad for p in params if p.grad is not None]
    total = math.sqrt(sum(g.double().pow(2).sum().item() for g in grads))
    coef = max_norm / (total + 1e-6)
    if coef < 1:
        for g in grads:
            g.mul_(coef)
    return total


def adamw(model):
    """nanoGPT's AdamW: weight decay on the 2-D weights only."""
    params = dict(model.named_parameters())
    return torch.optim.AdamW(
        [
            {"params": [p for p in params.values() if p.dim() >= 2], "weight_decay": OPTIM["weight_decay"]},
            {"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=LR,
        betas=OPTIM["betas"],
        eps=OPTIM["eps"],
    )


def train(model, steps, dtype):
    """nanoGPT's AdamW (decay on 2-D weights only) and clip, as make_fixtures.train, but the clip's
    norm summed in float64 (clip_grad_norm above)."""
    model = model.to(dtype)
    optimizer = adamw(model)
    losses, norms = [], []
    for x, y in steps:
        optimizer.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        norms.append(clip_grad_norm(model.parameters(), OPTIM["clip"]))
        optimizer.step()
        losses.append(loss.item())
    return losses, norms


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
    losses, norms = {}, {}
    for name, dtype in (("f32", torch.float32), ("f64", torch.float64)):
        model = GPT(CONFIG)
        model.load_state_dict(init, strict=True)
        losses[name], norms[name] = train(model, batches(tokens), dtype)
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        write_safetensors(os.path.join(folder, f"torch-{name}.safetensors"), state, {"format": "pt"})
    print(json.dumps({"torch": torch.__version__, "losses": losses, "norms": norms, "optimizer": {**OPTIM, "lr": LR}}))


def read_tokens(folder):
    with open(os.path.join(folder, "tokens.bin"), "rb") as f:
        data = f.read()
    return torch.tensor(struct.unpack(f"<{len(data) // 2}H", data), dtype=torch.int64)


def gloo_rank(rank, folder, world):
    import torch.distributed as dist

    torch.set_num_threads(1)
    store = "file://" + os.path.join(folder, "gloo.store")
    dist.init_process_group("gloo", init_method=store, rank=rank, world_size=world)
    init = read_safetensors(os.path.join(folder, "init.safetensors"))
    model = GPT(CONFIG)
    model.load_state_dict({k: v.to(torch.float32) for k, v in init.items()}, strict=True)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = adamw(model)
    per = BATCH // world
    for x, y in batches(read_tokens(folder)):
        optimizer.zero_grad(set_to_none=True)
        loss = ddp(x[rank * per : (rank + 1) * per], y[rank * per : (rank + 1) * per])
        loss.backward()
        clip_grad_norm(model.parameters(), OPTIM["clip"])
        optimizer.step()
    if rank == 0:
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        write_safetensors(os.path.join(folder, "torch-ddp-f32.safetensors"), state, {"format": "pt"})
    dist.barrier()
    dist.destroy_process_group()


def gloo(folder, world):
    import torch.multiprocessing as mp

    store = os.path.join(folder, "gloo.store")
    if os.path.exists(store):
        os.remove(store)
    mp.spawn(gloo_rank, args=(folder, int(world)), nprocs=int(world), join=True)
    print(json.dumps({"torch": torch.__version__, "world": int(world)}))


def compare(folder, *names):
    names = names or ("ours",)
    init = read_safetensors(os.path.join(folder, "init.safetensors"))
    f64 = read_safetensors(os.path.join(folder, "torch-f64.safetensors"))
    f32 = read_safetensors(os.path.join(folder, "torch-f32.safetensors"))
    others = {n: read_safetensors(os.path.join(folder, f"{n}.safetensors")) for n in names}
    rows = []
    for name, w64 in f64.items():
        update = (w64 - init[name]).abs().max().item()
        if update == 0:
            continue
        # Each run's distance, and its distance without its one farthest element (`...Next`): a
        # tensor's distance is often one element's whose gradients are far smaller than the rest
        # of its tensor's ([Note: GPT-2 small against float64]).
        row = {"name": name}
        for n, other in {"torchF32": f32, **others}.items():
            # The tied weight comes once, as `transformer.wte.weight`, from a sharded save.
            key = name if name in other else "transformer.wte.weight"
            far = (other[key] - w64).abs().flatten().topk(2).values / update
            row[n], row[n + "Next"] = far[0].item(), far[1].item()
        rows.append(row)
    print(json.dumps({"tensors": rows}))


if __name__ == "__main__":
    torch.set_num_threads(2)
    {"prepare": prepare, "gloo": gloo, "compare": compare}[sys.argv[1]](*sys.argv[2:])

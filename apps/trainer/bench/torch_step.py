"""PyTorch CPU's time for one training step of the trainer's default GPT, the peer row of
`pnpm --filter @webshard/trainer bench` (bench/backends.ts runs this with PyPI's CPU wheel, the
venv of tooling/peers/torch-venv.sh or WEBSHARD_TORCH_PYTHON, and skips the row without one). The model is the fixtures' nanoGPT (__fixtures__/make_fixtures.py), the
step as the trainer's: forward, backward, clip_grad_norm_(1.0), AdamW with nanoGPT's two groups.

Usage: .venv-torch/bin/python bench/torch_step.py VOCAB N_LAYER N_HEAD N_EMBD BLOCK BATCH THREADS [WARMUP ITERS]
(WARMUP and ITERS default to 3 and 15; the step profile's GPT-2 run takes 1 and 3.)
Prints one JSON line: {"ms": median step ms, "threads": ..., "torch": version}.
"""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "__fixtures__"))

import torch  # noqa: E402
from make_fixtures import GPT  # noqa: E402

vocab, n_layer, n_head, n_embd, block, batch, threads = (int(v) for v in sys.argv[1:8])
warmup, iters = (int(v) for v in sys.argv[8:10]) if len(sys.argv) > 9 else (3, 15)
torch.set_num_threads(threads)
torch.manual_seed(1)
cfg = dict(vocab_size=vocab, block_size=block, n_layer=n_layer, n_head=n_head, n_embd=n_embd)
model = GPT(cfg)
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
optimizer = torch.optim.AdamW(
    [dict(params=decay, weight_decay=0.1), dict(params=no_decay, weight_decay=0.0)],
    lr=3e-3,
    betas=(0.9, 0.95),
)
x = torch.randint(0, vocab, (batch, block))
y = torch.randint(0, vocab, (batch, block))


def step():
    loss = model(x, y)
    loss.backward()
    loss.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


for _ in range(warmup):
    step()
times = []
for _ in range(iters):
    start = time.perf_counter()
    step()
    times.append((time.perf_counter() - start) * 1000)
print(json.dumps(dict(ms=statistics.median(times), threads=threads, torch=torch.__version__)))

"""PyTorch CPU's f32 matmul, the peer of the CPU backend's matmul rows in
`pnpm --filter @webshard/tensor-core bench` (bench/index.ts runs this with PyPI's CPU wheel, the venv
of tooling/peers/torch-venv.sh or WEBSHARD_TORCH_PYTHON; a reference-BLAS build is refused there).

Usage: .venv-torch/bin/python bench/torch_matmul.py SIZES THREADS   (SIZES: 256,512,1024; THREADS: 2,1)
Each size runs on each thread count, alternating call by call; the faster median is the peer (its
OpenMP threads spin while they wait, so on a loaded machine fewer threads can be faster).
Prints one JSON line: {"ms": {n: median ms}, "threads": {n: thread count of that median}}, one
n x n @ n x n into a preallocated output per call.
"""
import json
import statistics
import sys
import time

import torch

sizes = [int(n) for n in sys.argv[1].split(",")]
thread_counts = [int(t) for t in sys.argv[2].split(",")]
torch.manual_seed(1)
best_ms = {}
best_threads = {}
for n in sizes:
    a = torch.rand(n, n) * 2 - 1
    b = torch.rand(n, n) * 2 - 1
    out = torch.empty(n, n)
    rounds = 9 if n >= 1024 else 15
    times = {t: [] for t in thread_counts}
    for i in range(rounds + 2):
        for t in thread_counts:
            torch.set_num_threads(t)
            start = time.perf_counter()
            torch.matmul(a, b, out=out)
            if i >= 2:
                times[t].append((time.perf_counter() - start) * 1000)
    medians = {t: statistics.median(ts) for t, ts in times.items()}
    best = min(medians, key=medians.get)
    best_ms[n] = medians[best]
    best_threads[n] = best
    print(f"n={n}: " + ", ".join(f"{t} thread(s) {m:.3f} ms" for t, m in medians.items()), file=sys.stderr)
print(json.dumps(dict(ms=best_ms, threads=best_threads)))

"""PyTorch CPU's f32 matmul, the peer of the CPU backend's matmul rows in
`pnpm --filter @webshard/tensor-core bench` (bench/index.ts runs this with PyPI's CPU wheel, the venv
of tooling/peers/torch-venv.sh or WEBSHARD_TORCH_PYTHON; a reference-BLAS build is refused there).

Usage: .venv-torch/bin/python bench/torch_matmul.py SIZES THREADS   (SIZES: 256,512,1024)
Prints one JSON line: {"ms": {n: median ms of one n x n @ n x n into a preallocated output}}.
"""
import json
import statistics
import sys
import time

import torch

sizes = [int(n) for n in sys.argv[1].split(",")]
threads = int(sys.argv[2])
torch.set_num_threads(threads)
torch.manual_seed(1)
ms = {}
for n in sizes:
    a = torch.rand(n, n) * 2 - 1
    b = torch.rand(n, n) * 2 - 1
    out = torch.empty(n, n)
    rounds = 9 if n >= 1024 else 15
    times = []
    for i in range(rounds + 2):
        start = time.perf_counter()
        torch.matmul(a, b, out=out)
        if i >= 2:
            times.append((time.perf_counter() - start) * 1000)
    ms[n] = statistics.median(times)
print(json.dumps(dict(ms=ms, threads=threads)))

#!/usr/bin/env bash
# Creates .venv-torch/ at the repository root: a virtual environment with PyTorch's CPU wheel from
# PyPI (torch==2.13.0+cpu, built with MKL and oneDNN), the PyTorch a user would install, which the
# benchmarks' PyTorch rows run (tooling/bench/src/torch-peer.ts; WEBSHARD_TORCH_PYTHON points them
# at another interpreter). Debian's python3-torch is built against the reference BLAS and is
# refused as a speed peer ([Note: honest PyTorch peers] in torch-peer.ts).
#
# Idempotent: a finished environment (the marker file written last) with the right torch is left
# as it is; an unfinished one (interrupted, another version) is removed and made again.
# Usage: bash tooling/peers/torch-venv.sh   (or `pnpm peers:torch`)
set -euo pipefail

TORCH_SPEC='torch==2.13.0+cpu'
TORCH_VERSION='2.13.0+cpu'
root=$(cd "$(dirname "$0")/../.." && pwd)
venv="$root/.venv-torch"
marker="$venv/.webshard-complete"
base_python=$(command -v python3 || true)

if [ -z "$base_python" ]; then
  echo "torch-venv: no python3 on the PATH: install Python 3.10-3.13 (apt-get install -y python3 python3-venv)" >&2
  exit 1
fi

installed_version() {
  "$venv/bin/python" -c 'import numpy, torch; print(torch.__version__)' 2>/dev/null || true
}

if [ -f "$marker" ] && [ "$(installed_version)" = "$TORCH_VERSION" ]; then
  echo "torch-venv: $venv/bin/python has torch $TORCH_VERSION already"
  exit 0
fi

if [ -e "$venv" ]; then
  echo "torch-venv: $venv is unfinished or holds another torch: making it again"
  rm -rf "$venv"
fi

echo "torch-venv: creating $venv with $base_python ($("$base_python" --version 2>&1))"
if ! "$base_python" -m venv "$venv"; then
  echo "torch-venv: '$base_python -m venv' failed (on Debian: apt-get install -y python3-venv)" >&2
  rm -rf "$venv"
  exit 1
fi

log="$venv/pip-install.log"
# numpy too: torch warns on every import without it.
echo "torch-venv: pip install $TORCH_SPEC numpy (about 210 MB)"
if ! "$venv/bin/python" -m pip install --no-input "$TORCH_SPEC" numpy >"$log" 2>&1; then
  echo "torch-venv: pip could not install $TORCH_SPEC; pip said:" >&2
  tail -n 15 "$log" >&2
  echo "torch-venv: the +cpu wheels are on PyTorch's CPU wheel index: point pip at it" \
    "(PIP_EXTRA_INDEX_URL, or --index-url in pip.conf) and run this script again" >&2
  rm -rf "$venv"
  exit 1
fi

version=$(installed_version)
if [ "$version" != "$TORCH_VERSION" ]; then
  echo "torch-venv: pip installed torch '$version', expected $TORCH_VERSION" >&2
  exit 1
fi
touch "$marker"
"$venv/bin/python" - <<'PY'
import re, torch
blas = re.search(r"\bBLAS_INFO=([^,\s]+)", torch.__config__.show())
print(f"torch-venv: torch {torch.__version__}, BLAS {blas.group(1) if blas else 'unknown'}, "
      f"oneDNN {torch.backends.mkldnn.is_available()}, {torch.get_num_threads()} threads")
PY
echo "torch-venv: ready: $venv/bin/python"

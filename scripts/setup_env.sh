#!/usr/bin/env bash
# Creates (or reuses) the virtual environment and installs specops into it.
# Sourced by scripts/test.sh and scripts/demo.sh; sets $PY to the environment's python.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SPECOPS_VENV:-$ROOT/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip install -q --disable-pip-version-check)
# torch: the local CPU build on machines without a GPU (an unpinned torch pulls the CUDA build).
if ! "$PY" -c "import torch" 2>/dev/null; then
  "${PIP[@]}" "torch==${SPECOPS_TORCH_VERSION:-2.13.0}"
fi
"${PIP[@]}" numpy scipy pytest pillow matplotlib "triton>=3.2" "scikit-build-core>=0.10" "pybind11>=2.12" ninja "cmake>=3.24"
# Build specops (C++ always, CUDA whenever nvcc is found) and install it editable: Python edits
# are live and `python -m bench` / `python -m specops.demo` from the checkout see the build.
"${PIP[@]}" --no-build-isolation -e "$ROOT"
export PY

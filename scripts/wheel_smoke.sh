#!/usr/bin/env bash
# Installs a built wheel into a fresh virtual environment (torch and the wheel's own
# dependencies only: no pillow, matplotlib, triton) and runs scripts/wheel_smoke.py outside the
# checkout, then the console script.
#   bash scripts/wheel_smoke.sh wheelhouse/specops-...whl
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WHL="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
ENV_DIR="$(mktemp -d /tmp/specops-wheel-smoke.XXXXXX)"
trap 'rm -rf "$ENV_DIR"' EXIT
python3 -m venv "$ENV_DIR/venv"
PY="$ENV_DIR/venv/bin/python"
PIP=("$PY" -m pip install -q --disable-pip-version-check)
# the CPU build of torch where the machine has no GPU (an unpinned torch pulls the CUDA build)
"${PIP[@]}" "torch==${SPECOPS_TORCH_VERSION:-2.13.0}"
"${PIP[@]}" "$WHL"
cd "$ENV_DIR"  # not the checkout: the installed package must stand alone
"$PY" "$ROOT/scripts/wheel_smoke.py"
SPECOPS="$ENV_DIR/venv/bin/specops"
"$SPECOPS" --help >/dev/null
"$SPECOPS" info | head -3  # also: a closed pipe is no error
"$SPECOPS" bench --device cpu --quick --ops sample,verify --csv "$ENV_DIR/bench.csv" >/dev/null
grep -q "^sample," "$ENV_DIR/bench.csv"
# the fresh environment has no pillow: the demo must stop at once with the install command
if "$SPECOPS" demo >"$ENV_DIR/demo.out" 2>&1; then
  echo "wheel smoke: specops demo ran without pillow" >&2
  exit 1
fi
grep -q "pip install 'specops\[demo\]'" "$ENV_DIR/demo.out"
echo "wheel smoke: OK ($(basename "$WHL"))"

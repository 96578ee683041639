#!/usr/bin/env bash
# Prepare ./.peers (git-ignored) for a GPU lease, on a machine with network and nvcc (no GPU):
#   .peers/flashinfer_site.tar.xz      flashinfer-python with its benchmarked kernels compiled
#                                      ahead of time for sm_90a (scripts/flashinfer_aot.py), its
#                                      pure-Python dependencies and apache-tvm-ffi for the
#                                      device's Python; about 14 MB, inside a call's 64 MiB
#   .peers/sglang_reject_sampling.py   SGLang's pure-Triton chain sampler (one file of its wheel)
# gpu_run.sh unpacks the tarball into /tmp/site; bench_verify / bench_tree_attention pick the
# peers up.  Name `.peers` in the device call's carry.  bench/README.md has the story.
#
#   bash scripts/pack_peers.sh    (FI_VERSION, SGL_VERSION, DEVICE_PY, ARCH override the defaults)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"
FI_VERSION="${FI_VERSION:-0.7.2.post1}"
SGL_VERSION="${SGL_VERSION:-0.5.23}"
DEVICE_PY="${DEVICE_PY:-3.12}"  # the lent GPU images' Python
ARCH="${ARCH:-9.0a}"            # H100 / H200
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT
pip=("$PY" -m pip -q)

"${pip[@]}" download --no-deps -d "$W/whl" "flashinfer-python==$FI_VERSION" nvidia-curand \
  "sglang==$SGL_VERSION"
"${pip[@]}" download --no-deps --only-binary=:all: --python-version "$DEVICE_PY" \
  --platform manylinux_2_28_x86_64 -d "$W/dev" 'apache-tvm-ffi<0.2,>=0.1.11'
# flashinfer for this machine's Python (to compile), then its pure-Python dependencies
"${pip[@]}" install --no-deps --target "$W/site" "$W"/whl/flashinfer_python-*.whl \
  'apache-tvm-ffi<0.2,>=0.1.11' requests urllib3 idna certifi charset_normalizer tabulate \
  einops nvidia-ml-py tqdm click packaging

# nvcc's toolkit here may lack curand's headers and libcuda: headers from the wheel, and an
# empty libcuda stub to link against (the driver's libcuda.so.1 is used at run time)
mkdir -p "$W/curand" "$W/stub"
"$PY" -m zipfile -e "$W"/whl/nvidia_curand-*.whl "$W/curand"
echo "" > "$W/stub/e.c" && gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$W/stub/libcuda.so" "$W/stub/e.c"
CUDART_DIR="$(dirname "$(find /usr/local/cuda*/ -name 'libcudart.so' | head -n 1)")"
(cd "$W" && CPATH="$(dirname "$(find "$W/curand" -name curand.h | head -n 1)")" \
  LIBRARY_PATH="$CUDART_DIR:$W/stub" FLASHINFER_CUDA_ARCH_LIST="$ARCH" \
  FLASHINFER_WORKSPACE_BASE="$W/ws" PYTHONPATH="$W/site" "$PY" "$ROOT/scripts/flashinfer_aot.py")

# the tarball: no sources but those prefill's module generation reads (its templates and the
# prefill .cu files it copies), the device's tvm-ffi in place of this machine's
csrc="$W/site/flashinfer/data/csrc"
mkdir -p "$W/keep" && cp "$csrc"/*.jinja "$csrc"/*prefill* "$W/keep/"
rm -rf "$W/site/tvm_ffi" "$W"/site/apache_tvm_ffi* "$W/site/bin" "$csrc" \
  "$W/site/flashinfer/data/"{cutlass,cccl,spdlog,include}
mkdir -p "$csrc" && cp "$W"/keep/* "$csrc/"
"$PY" -m zipfile -e "$W"/dev/apache_tvm_ffi-*.whl "$W/site"
find "$W/site" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p "$ROOT/.peers"
tar cJf "$ROOT/.peers/flashinfer_site.tar.xz" -C "$W/site" .
"$PY" - "$W"/whl/sglang-*.whl "$ROOT/.peers/sglang_reject_sampling.py" <<'PYEOF'
import sys, zipfile
src = "sglang/kernels/ops/speculative/reject_sampling.py"
open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read(src))
PYEOF
ls -la "$ROOT/.peers"

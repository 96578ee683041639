#!/usr/bin/env bash
# Prepare ./.peers (git-ignored) for a GPU lease, on a machine with network and nvcc (no GPU):
#   .peers/flashinfer_site.tar.xz      flashinfer-python with its benchmarked kernels compiled
#                                      ahead of time for sm_90a (scripts/flashinfer_aot.py), its
#                                      pure-Python dependencies and apache-tvm-ffi for the
#                                      device's Python; about 14 MB, inside a call's 64 MiB
#   .peers/sglang_reject_sampling.py   SGLang's pure-Triton chain sampler (one file of its wheel)
#   .peers/sglang_tree_sampling.so     SGLang's JIT tree sampler, compiled ahead of time
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

# SGLang's JIT tree sampler (tree_speculative_sampling_target_only, VecSize 4, deterministic),
# compiled the way its load_jit would, against FlashInfer's headers and tvm-ffi
"$PY" - "$W"/whl/sglang-*.whl "$W/sgl" <<'PYEOF'
import os, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in z.namelist():
    keep = n.startswith("sglang/kernels/jit/include/") or n.endswith("csrc/speculative/sampling.cuh")
    if keep and not n.endswith("/"):
        dst = os.path.join(sys.argv[2], n)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "wb").write(z.read(n))
PYEOF
cat > "$W/sgl/wrapper.cu" <<'CUEOF'
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include "speculative/sampling.cuh"
namespace sglang {
TVM_FFI_DLL_EXPORT_TYPED_FUNC(sample, (tree_speculative_sampling_target_only<4, true>));
}
CUEOF
jit="$W/sgl/sglang/kernels/jit"
nvcc -DSGL_CUDA_ARCH="${ARCH//[^0-9]/}0" -gencode="arch=compute_${ARCH//./},code=sm_${ARCH//./}" \
  -std=c++20 -O3 --expt-relaxed-constexpr -Xcompiler -fPIC -shared -I "$jit/include" \
  -I "$jit/csrc" -I "$W/site/tvm_ffi/include" -I "$W/site/flashinfer/data/include" \
  -I "$(dirname "$(find "$W/curand" -name curand.h | head -n 1)")" "$W/sgl/wrapper.cu" \
  -L "$W/site/tvm_ffi/lib" -ltvm_ffi -L "$CUDART_DIR" -lcudart -o "$W/sglang_tree_sampling.so"

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
cp "$W/sglang_tree_sampling.so" "$ROOT/.peers/"
ls -la "$ROOT/.peers"

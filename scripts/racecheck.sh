#!/usr/bin/env bash
# Race stage: the cuda_sim build of the CUDA kernels under ThreadSanitizer.  cuda_sim then runs
# one OS thread per simulated thread with CUDA's happens-before edges declared to TSan (barrier
# phases, warp shuffles, block start and end; csrc/sim/cuda_sim.cpp), so a missing
# __syncthreads around shared memory is reported as a data race.  Builds into build/tsan-* (the
# editable install is not touched) and runs tests/test_cuda_sim.py there: the planted missing
# barrier must be reported, every real kernel must run race-free.
#
#   PY=/path/to/venv/bin/python bash scripts/racecheck.sh [extra pytest args]
#
# Run by scripts/test.sh after the ASan stage (SPECOPS_TSAN=0 skips it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"
LIBTSAN="$(gcc -print-file-name=libtsan.so)"
if [ ! -e "$LIBTSAN" ]; then
  echo "racecheck.sh: gcc has no libtsan (apt-get install gcc); SPECOPS_TSAN=0 skips" >&2
  exit 1
fi

start=$SECONDS
source "$ROOT/scripts/stage_build.sh"
export SPECOPS_CPU_ONLY=1
unset SPECOPS_SANITIZE
stage_build tsan -DSPECOPS_TSAN=ON -DSPECOPS_SANITIZE=OFF
echo "TSan race stage: built in $((SECONDS - start)) s ($SO)"

# halt_on_error: the first report aborts the run (a non-zero exit); the planted-race test runs
# its kernel in a child process and expects exactly that.
cd "$ROOT"
rc=0
env LD_PRELOAD="$LIBTSAN" SPECOPS_TSAN_STAGE=1 \
  TSAN_OPTIONS="halt_on_error=1:report_signal_unsafe=0:${TSAN_OPTIONS:-}" \
  "$STAGE_PY" "$RUN_PYTEST" -q -rfEs --capture=sys -p no:cacheprovider tests/test_cuda_sim.py \
  "$@" || rc=$?
echo "TSan race stage: $([ $rc -eq 0 ] && echo passed || echo "FAILED (exit $rc)") in" \
  "$((SECONDS - start)) s"
exit $rc

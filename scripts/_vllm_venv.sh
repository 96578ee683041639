# Sourced (not run) by scripts/vllm_stage.sh and scripts/vllm_engine_stage.sh: the venv setup the
# two vLLM stages share.  The caller sets ROOT (the checkout) and `set -euo pipefail` first.
#
#   vllm_venv STAGE VENV INSTALL [WHEEL]
#
# WHL := WHEEL, else the newest wheelhouse/specops-*+cpu*.whl (none: "STAGE: no specops CPU
# wheel ...", exit 2); start := $SECONDS; unless VENV's python imports vllm, VENV is made afresh
# (with ${PY_BASE:-python3.11}) and INSTALL, a function of the caller, fills it through
# "${PIP[@]}" (pip install --no-deps into VENV); then the specops wheel is (re)installed.
vllm_venv() {
  local stage="$1" venv="$2" install="$3"
  WHL="${4:-$(ls -t "$ROOT"/wheelhouse/specops-*+cpu*.whl 2>/dev/null | head -n 1)}"
  [ -n "$WHL" ] || { echo "$stage: no specops CPU wheel (run scripts/build_wheel.sh cpu)" >&2; exit 2; }
  start=$SECONDS
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import vllm" 2>/dev/null; then
    rm -rf "$venv"
    "${PY_BASE:-python3.11}" -m venv "$venv"
    PIP=("$venv/bin/pip" install -q --no-deps --no-input --disable-pip-version-check)
    "$install"
  fi
  "$venv/bin/pip" install -q --no-deps --force-reinstall --disable-pip-version-check "$WHL"
}

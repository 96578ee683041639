#!/usr/bin/env bash
# Sets up everything on a fresh machine, then runs the whole test suite.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
# The pytest script (not `python -m pytest`) keeps the source tree off sys.path, so the tests
# import the installed package with its compiled module.
exec "$(dirname "$PY")/pytest" -q -ra "$@"

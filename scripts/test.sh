#!/usr/bin/env bash
# Sets up everything on a fresh machine, then runs the whole test suite.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
exec "$(dirname "$PY")/pytest" -q -ra "$@"

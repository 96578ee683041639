#!/usr/bin/env bash
# Developer rebuild of the editable install, serialised with a lock so that several people (or
# agents) sharing one checkout never run two builds in the same build folder at once.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PY:-python3}"
exec flock /tmp/specops_build.lock "$PY" -m pip install -q --no-build-isolation -e "$ROOT"

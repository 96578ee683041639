# Sourced by scripts/sanitize.sh and scripts/racecheck.sh: builds a sanitizer variant of
# specops._C into a build folder of its own and stages a package around it that a second
# environment imports (the main environment's editable install is not touched).
#
#   stage_build NAME [cmake -D options...]     (environment variables of the build already set)
#
# Sets STAGE_PY (the staged environment's python), RUN_PYTEST (a pytest entry script) and SO.
stage_build() {
  local name="$1"
  shift
  local bin tag build
  bin="$(cd "$(dirname "$PY")" && pwd)"
  tag="$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
  build="$ROOT/build/$name-$tag"
  # 1. Build (CPU-only: no CUDA).
  "$bin/cmake" -S "$ROOT" -B "$build" -G Ninja -DCMAKE_MAKE_PROGRAM="$bin/ninja" \
    -DPython_EXECUTABLE="$PY" -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)" "$@" \
    >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; return 1; }
  "$bin/cmake" --build "$build" -j "$(nproc)" >"$build.build.log" 2>&1 || {
    cat "$build.build.log"
    return 1
  }
  SO="$(ls "$build"/_C*.so)"
  # 2. Stage a package specops = the checkout's Python sources + this _C, and a second
  # environment whose site-packages reach the main one's (torch, pytest, ...) through a .pth
  # file: the main environment's editable finder (a .pth there) is never loaded, so `import
  # specops` finds the stage.
  local stage="$build/stage" venv="$build/venv" site f
  rm -rf "$stage" && mkdir -p "$stage/specops"
  for f in "$ROOT"/specops/*; do
    case "$(basename "$f")" in __pycache__ | _C.*) continue ;; esac
    ln -s "$f" "$stage/specops/"
  done
  ln -s "$ROOT/triton_kernels" "$stage/specops/triton_kernels"
  ln -s "$SO" "$stage/specops/"
  if [ ! -x "$venv/bin/python" ]; then
    "$PY" -m venv --without-pip "$venv"
  fi
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  "$PY" -c 'import sysconfig; p = sysconfig.get_paths(); print(p["purelib"]); print(p["platlib"])' |
    awk -v stage="$stage" 'BEGIN { print stage } !seen[$0]++' >"$site/specops_stage.pth"
  rm -f "$site/specops_asan.pth"  # the name of this file before racecheck.sh shared it
  # pytest from a script (not python -m, which would put the checkout's source-only specops
  # first)
  printf 'import sys\n\nimport pytest\n\nsys.exit(pytest.main())\n' >"$build/run_pytest.py"
  RUN_PYTEST="$build/run_pytest.py"
  STAGE_PY="$venv/bin/python"
  # (found, not imported: importing may need the sanitizer runtime; from $build: python -c puts
  # the current folder first on the path)
  local check="import importlib.util as u; assert u.find_spec('specops').origin.startswith('$stage')"
  (cd "$build" && "$STAGE_PY" -c "$check") ||
    { echo "stage_build: the staged specops is not the one imported" >&2; return 1; }
}

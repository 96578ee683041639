"""Optional dependencies, checked before any work starts, with the command that installs them."""

from __future__ import annotations

import importlib.util
import sys


class MissingDependency(ImportError):
    """An optional dependency is not installed; the message says how to install it."""


# import name -> pip package
PACKAGE = {"PIL": "pillow", "matplotlib": "matplotlib", "triton": "triton", "scipy": "scipy"}


def require(what: str, *modules: str, extra: str) -> None:
    """Raise MissingDependency naming every module of ``modules`` that ``what`` needs and that
    is missing, with the command that installs the specops extra ``extra`` (which has them)."""
    missing = [m for m in modules if _missing(m)]
    if not missing:
        return
    pkgs = " and ".join(PACKAGE.get(m, m) for m in missing)
    raise MissingDependency(
        f"{what} needs {pkgs}, not installed here: pip install 'specops[{extra}]' "
        f"(or pip install {' '.join(PACKAGE.get(m, m) for m in missing)})"
    )


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a module set to None in sys.modules (tests) or broken
        return True


def run_main(fn, argv=None) -> int:
    """Call a command's main; a missing optional dependency is an error line, not a traceback."""
    try:
        rc = fn(argv)
    except MissingDependency as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `specops info | head`: stop quietly, as other CLI tools do
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return rc if isinstance(rc, int) else 0

"""Optional dependencies, checked before any work starts, with the command that installs them."""

from __future__ import annotations

import importlib.util


class MissingDependency(ImportError):
    """An optional dependency is not installed; the message says how to install it."""


# module -> (pip package, specops extra)
KNOWN = {
    "PIL": ("pillow", "demo"),
    "matplotlib": ("matplotlib", "plot"),
    "triton": ("triton", "triton"),
    "scipy": ("scipy", "test"),
}


def require(what: str, *modules: str) -> None:
    """Raise MissingDependency naming every missing module of ``modules`` that ``what`` needs."""
    missing = [m for m in modules if _missing(m)]
    if not missing:
        return
    pkgs = ", ".join(KNOWN.get(m, (m, None))[0] for m in missing)
    extras = sorted({KNOWN[m][1] for m in missing if m in KNOWN and KNOWN[m][1]})
    cmd = f"pip install 'specops[{','.join(extras)}]'" if extras else f"pip install {pkgs}"
    raise MissingDependency(f"{what} needs {pkgs}, which is not installed: {cmd}")


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a module set to None in sys.modules (tests) or broken
        return True

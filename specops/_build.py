"""The compiled module and what it was built with."""

from __future__ import annotations

import functools
import importlib.util
import os

try:
    from specops import _C  # type: ignore[attr-defined]

    _IMPORT_ERROR = None
except ImportError as exc:  # a source checkout without a build, or a failed build
    _C = None
    _IMPORT_ERROR = str(exc)
    # Once, at import: without _C every CPU op runs the plain-PyTorch reference (and CUDA ops
    # have no kernel), which would silently mislead a benchmark.
    import warnings

    warnings.warn(
        f"specops: the compiled module specops._C is not importable ({_IMPORT_ERROR}); every op "
        "falls back to the plain-PyTorch reference backend (slow).  Build or install specops "
        "(pip install .), or use an installed wheel rather than a source tree on sys.path; "
        "specops.build_info() reports it under 'cpp' / 'cpp_import_error'.",
        RuntimeWarning,
        stacklevel=2,
    )


def has_cpp() -> bool:
    return _C is not None


def has_cuda_kernels() -> bool:
    return _C is not None and bool(_C.with_cuda)


def has_cuda_sim() -> bool:
    """The CUDA kernels' emulated build (backend "cuda_sim", csrc/sim) is compiled in."""
    return _C is not None and bool(getattr(_C, "with_cuda_sim", False))


@functools.cache
def has_triton() -> bool:
    return importlib.util.find_spec("triton") is not None


@functools.cache
def has_flash_attn() -> bool:
    """flash-attn (the optional extra ``specops[flash]``) imports, with its kvcache entry point.
    Imported, not only found: a wheel built for another torch fails at import."""
    if importlib.util.find_spec("flash_attn") is None:
        return False
    try:
        from flash_attn import flash_attn_with_kvcache  # noqa: F401
    except Exception:
        return False
    return True


# Triton decides interpreter vs compiler when a kernel is decorated (when specops.triton_kernels
# is imported), so the switch is read once, with specops: no environment read per op call.
_TRITON_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def triton_interpret() -> bool:
    return _TRITON_INTERPRET


def build_info() -> dict:
    """What was compiled and what is usable at run time."""
    import torch

    info = {
        "version": _version(),
        "cpp": has_cpp(),
        "cpp_import_error": _IMPORT_ERROR,
        "host_kernels": list(_C.host_kernels) if _C else [],
        "cxx_compiler": _C.cxx_compiler if _C else None,
        "host_threads": int(_C.host_threads()) if _C else 1,
        "cuda_compiled": has_cuda_kernels(),
        "cuda_kernels": list(_C.cuda_kernels) if _C else [],
        "cuda_sim": has_cuda_sim(),
        "cuda_archs": _C.cuda_archs.split(",") if has_cuda_kernels() else [],
        "cuda_build_version": _C.cuda_version if has_cuda_kernels() else None,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "gpu_available": torch.cuda.is_available(),
        "gpu_name": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "triton": _triton_version(),
        "triton_interpret": triton_interpret(),
    }
    return info


def _version() -> str:
    """The installed distribution's version (``0.1.0+cpu`` for a CPU-only build), else the
    source's (a checkout used without installing)."""
    try:
        from importlib.metadata import version

        return version("specops")
    except Exception:
        from specops._version import __version__

        return __version__


def _triton_version():
    if not has_triton():
        return None
    import triton

    return triton.__version__

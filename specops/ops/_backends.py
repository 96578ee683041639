"""Backend choice and validation mode: the table of each op's backends (fastest first), what is
usable on a device, and how "auto" and named backends resolve.  Public through ``specops``:
``validation``, ``validating``, ``backend_table``, ``available_backends``, ``resolve_backend``."""

from __future__ import annotations

import contextlib
import os

import torch

from specops import _build

BACKENDS = ("auto", "cuda", "triton", "cpu", "reference", "cascade", "cuda_sim")
_META = (
    "(no data to compute on: run the op on CPU or CUDA tensors; under torch.compile or "
    "FakeTensorMode its fake kernel gives the output shapes)"
)

# validation mode --------------------------------------------------------------------------
# SPECOPS_VALIDATE is read once, at import: a global read is traceable by every torch.compile
# (an os.environ read is not on torch 2.4) and costs nothing per call.
_validate_env = os.environ.get("SPECOPS_VALIDATE", "0") == "1"
_validate_override: bool | None = None


def validating() -> bool:
    """Value checks (they read the data, so they sync) run only in validation mode:
    ``SPECOPS_VALIDATE=1`` when specops is imported, or inside ``specops.validation()``."""
    return _validate_env if _validate_override is None else _validate_override


@contextlib.contextmanager
def validation(enabled: bool = True):
    """``with specops.validation(): ...`` turns value checks on (or off) inside the block.

    Parameters
    ----------
    enabled : bool
        True: value checks on inside the block; False: off.  The previous mode returns on
        exit.

    A process-wide switch (a global torch.compile can trace): enter it from one thread at a
    time, around the work of every thread, never inside concurrent threads."""
    global _validate_override
    old = _validate_override
    _validate_override = enabled
    try:
        yield
    finally:
        _validate_override = old


# backends ---------------------------------------------------------------------------------
# op -> its backends, fastest first: the one table `specops info` and docs/api print.
_BACKEND_TABLE: dict[str, tuple[str, ...]] = {}


def declare_backends(have: tuple[str, ...], *ops: str) -> tuple[str, ...]:
    """Record that ``ops`` are implemented by ``have`` (fastest first); returns ``have``."""
    for op in ops:
        _BACKEND_TABLE[op] = have
    return have


def backend_table() -> dict[str, tuple[str, ...]]:
    """Every public op's backends, fastest first (some ops narrow them per call: tree_attention
    and append_kv run the reference for float64, tree_attention drops triton for head dims over
    the Triton kernel's limit; "cascade" is asked for by name only)."""
    return dict(sorted(_BACKEND_TABLE.items()))


def usable_backends(device: torch.device, have: tuple[str, ...]) -> list[str]:
    """Backends of an op (``have``, fastest first) usable for tensors on ``device``."""
    out = []
    for b in have:
        if b == "cuda" and device.type == "cuda" and _build.has_cuda_kernels():
            out.append(b)
        elif (
            b == "triton"
            and _build.has_triton()
            and (device.type == "cuda" or (device.type == "cpu" and _build.triton_interpret()))
        ):
            out.append(b)
        elif b == "cpu" and device.type == "cpu" and _build.has_cpp():
            out.append(b)
        elif b == "reference":
            out.append(b)
        elif (
            b == "cascade"
            and device.type == "cuda"
            and _build.has_triton()
            and _build.has_flash_attn()
        ):
            out.append(b)
    return out


# Resolved (op, backend, device type, have, TRITON_INTERPRET) -> backend: what decides a resolution
# is fixed for the process (the build, triton's presence) apart from the interpreter switch, so
# every call after the first costs one dict lookup (the full resolution costs ~3 us on these
# CPUs, as much as a small kernel).  "cascade" is never cached: it probes flash-attn.
_RESOLVED: dict[tuple, str] = {}


def pick_backend(op: str, backend: str, device: torch.device, have: tuple[str, ...]) -> str:
    """Resolve ``backend`` for an op whose implementations are ``have`` (fastest first).

    "auto" takes the fastest usable one, but never the Triton interpreter on CPU and never
    "cascade" (a peer built on the optional flash-attn: asked for by name only).  An explicit
    backend that is not usable raises: nothing silently runs something else."""
    key = (op, backend, device.type, have, _build.triton_interpret())
    hit = _RESOLVED.get(key)
    if hit is not None:
        return hit
    be = _resolve(op, backend, device, have)
    if backend != "cascade":
        _RESOLVED[key] = be
    return be


def _resolve(op: str, backend: str, device: torch.device, have: tuple[str, ...]) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"specops.{op}: backend must be one of {BACKENDS}, got {backend!r}")
    if device.type == "meta":
        raise ValueError(f"specops.{op}: the inputs are meta tensors {_META}")
    if backend == "cuda_sim":
        # The CUDA kernels' device code run on the CPU by the SIMT emulation (csrc/sim): every op
        # with a CUDA kernel, on CPU tensors; asked for by name only (tests), never by "auto".
        if "cuda" not in have:
            raise RuntimeError(
                f"specops.{op}: backend 'cuda_sim' is not available (this op has no CUDA kernel; "
                f"its backends are {have})"
            )
        if device.type != "cpu" or not _build.has_cuda_sim():
            raise RuntimeError(
                f"specops.{op}: backend 'cuda_sim' is not available for {device.type} tensors "
                "(needs CPU tensors and specops._C built with cuda_sim)"
            )
        return backend
    if backend == "auto":
        have = tuple(b for b in have if b != "cascade")  # not even probed (importing flash-attn)
    usable = usable_backends(device, have)
    if backend == "auto":
        for b in usable:
            if b == "triton" and device.type == "cpu":
                continue
            return b
        return "reference"
    if backend not in usable:
        why = {
            "cuda": "needs CUDA tensors and a build with nvcc",
            "triton": "needs triton and CUDA tensors (or TRITON_INTERPRET=1 on CPU)",
            "cpu": "needs CPU tensors and the compiled specops._C",
            "cascade": "needs CUDA tensors, triton and an importable flash-attn: "
            "pip install 'specops[flash]'",
        }.get(backend, "")
        if backend not in have:
            why = f"this op has backends {have}"
        raise RuntimeError(
            f"specops.{op}: backend {backend!r} is not available for {device.type} tensors ({why})"
        )
    return backend


# the public face -------------------------------------------------------------------------
def available_backends(op: str, device="cpu", *, interpreter: bool = False) -> list[str]:
    """The backends of the public op ``op`` usable for tensors on ``device``, fastest first
    (``backend_table()[op]`` narrowed to this build and device).  The Triton interpreter on the
    CPU (``TRITON_INTERPRET=1``) is listed only with ``interpreter=True``: it runs the Triton
    kernels, slowly, for tests."""
    if op not in _BACKEND_TABLE:
        raise ValueError(f"specops.available_backends: unknown op {op!r}")
    device = torch.device(device)
    usable = usable_backends(device, _BACKEND_TABLE[op])
    return [b for b in usable if interpreter or not (b == "triton" and device.type == "cpu")]


def resolve_backend(op: str, device="cpu", backend: str = "auto") -> str:
    """The backend a call of ``op`` on ``device`` tensors runs when asked for ``backend``
    ("auto": the fastest usable one); raises as the op would when it is not usable."""
    if op not in _BACKEND_TABLE:
        raise ValueError(f"specops.resolve_backend: unknown op {op!r}")
    return pick_backend(op, backend, torch.device(device), _BACKEND_TABLE[op])

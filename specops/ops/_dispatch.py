"""Dispatch: torch.library definition of the ops (``define``, from their declarations'
schemas, specops/ops/_decl.py), the cheap eager caller, the eager fast path straight to the
compiled binding (the launch itself: ``OpDecl.launch``)."""

from __future__ import annotations

import torch

from specops import _build
from specops.ops import _backends
from specops.ops._backends import pick_backend

LIB = torch.library.Library("specops", "DEF")  # noqa: TOR901 (define/impl: cheap dispatch)


def int32_ids(t):
    """Index tensors as the kernels read them: int32, contiguous (None stays None).  int64 ids are
    clamped into [-1, 2^31 - 1] first, so an id past the int32 range stays invalid (out of the
    vocabulary, past the capacity, not a page) instead of wrapping into a valid one."""
    if t is None:
        return None
    if t.dtype == torch.int64:
        t = t.clamp(-1, 2**31 - 1)
    return t.to(torch.int32).contiguous()


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what Inductor launches on


def stream_of(device: torch.device) -> int:
    """The current CUDA stream of ``device`` as an integer handle (the raw getter skips building a
    torch.cuda.Stream object on every launch)."""
    if _raw_stream is not None:
        index = device.index if device.index is not None else torch.cuda.current_device()
        return _raw_stream(index)
    return torch.cuda.current_stream(device).cuda_stream


# eager fast path --------------------------------------------------------------------------
# The binding of an op checks every tensor it is given (dtype, rank, sizes, device, layout;
# csrc/tensor_arg.h) before its kernel runs, and allocates the outputs it is not given.  So an
# eager call with backend "auto" on plain tensors calls the binding straight away, with the
# user's tensors: the common call is checked once, in C++.  When the binding declines (a
# TypeError / ValueError, raised before anything is written), the op runs its Python checks,
# which name what is wrong or normalise what the kernel cannot read (float16 rows, int32 counts),
# and goes on through torch.library as before.  Each fast path only passes arguments whose Python
# checks the binding's checks imply; tests/test_fast_path_equals_checked.py holds them to it.
_FAST: dict[tuple[str, str], object] = {}


def fast_kernel(op: str, t, backend: str):
    """The compiled binding ``<op>_cpu`` / ``<op>_cuda`` that an eager ``backend="auto"`` call on
    ``t``'s device runs (of the op's declared backends, ``backend_table``), or None: while tracing
    or under a mode, in validation mode, for tensor subclasses, and where "auto" resolves to
    another backend."""
    if (
        backend != "auto"
        or _compiling()
        or type(t) is not torch.Tensor
        or (
            _backends._validate_env
            if _backends._validate_override is None
            else _backends._validate_override
        )
        or _dispatch_modes()
        or _function_modes()
        or _transforms() is not None
    ):
        return None
    if t.is_cuda:  # (t.device.type costs 0.25 us: a device object per call)
        key = (op, "cuda")
    elif t.is_cpu:
        key = (op, "cpu")
    else:  # meta, mps, ...: the checked path says what happens
        return None
    fn = _FAST.get(key, False)
    if fn is False:
        be = pick_backend(op, "auto", t.device, _backends._BACKEND_TABLE[op])
        fn = getattr(_build._C, f"{op}_{be}") if be in ("cpu", "cuda") else None
        _FAST[key] = fn
    return fn


# registration and eager dispatch ---------------------------------------------------------
class _Ops:
    """``ops.<name>(*args)``: the registered op ``specops::<name>``, called the cheap way.

    Eagerly, on plain tensors (not while torch.compile / export traces, and with no dispatch or
    torch-function mode, e.g. FakeTensorMode, and no functorch transform active) the
    implementation is called directly: the same code torch.library would run, without its
    ~3-4 us of dispatch.  Otherwise the call goes through ``torch.ops.specops.<name>``, so
    tracing sees the op and its fake kernel."""


ops = _Ops()
_compiling = torch.compiler.is_compiling
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled
_transforms = torch._C._functorch.peek_interpreter_stack


def eager() -> bool:
    """Whether a call runs eagerly on plain tensors: not while torch.compile / export traces, and
    with no dispatch or torch-function mode (e.g. FakeTensorMode) and no functorch transform."""
    return not (_compiling() or _dispatch_modes() or _function_modes() or _transforms() is not None)


def _eager_caller(name: str, impl):
    packet = getattr(torch.ops.specops, name)

    def call(*args):
        if not eager():
            return packet(*args)
        return impl(*args)

    call.__name__ = name
    return call


# The torch.library schema of an op comes from its implementation's annotated signature (one
# declaration): these annotation strings (the modules use ``from __future__ import annotations``)
# map to schema types; Python ints are SymInt so torch.compile can keep them symbolic.
def define(name: str, schema: str, impl, fake, keys=("CPU", "CUDA")) -> None:
    """``specops::<name><schema>`` with ``impl`` per dispatch key and ``fake``; ``ops.<name>``
    its cheap caller."""
    LIB.define(name + schema)
    for key in keys:
        LIB.impl(name, impl, key)
    torch.library.register_fake(f"specops::{name}", fake, lib=LIB)
    setattr(ops, name, _eager_caller(name, impl))


def write_outs(out, results):
    """The results of a backend that allocates its own outputs, copied into ``out`` (if any);
    -> what the op returns (``out`` itself when given)."""
    if out is None:
        return results
    for o, r in zip(out, results):
        o.copy_(r)
    return out

"""Shared plumbing of the public ops: backend choice, argument checks, seeds, registration.

Every op module follows the same shape:

    def op(x, ..., backend="auto"):
        check_tensor(...)                          # shape/dtype/device: always on, no sync
        if validating(): check values              # needs the data: SPECOPS_VALIDATE=1 only
        return torch.ops.specops.op(...)           # torch.library op (fake kernel for compile)

and the registered implementation calls ``pick_backend`` and then the kernel.
"""

from __future__ import annotations

import contextlib
import inspect
import os

import torch

from specops import _build
from specops.ops._overlap import (  # noqa: F401 (the ops call them as c.check_*)
    check_no_alias,
    check_writable,
    check_written_apart,
)

LIB = torch.library.Library("specops", "DEF")  # noqa: TOR901 (define/impl: cheap dispatch)

BACKENDS = ("auto", "cuda", "triton", "cpu", "reference", "cascade", "cuda_sim")
_INT_DTYPES = (torch.int32, torch.int64)
_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


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
    """``with specops.validation(): ...`` turns value checks on (or off) inside the block.  A
    process-wide switch (a global torch.compile can trace): enter it from one thread at a time,
    around the work of every thread, never inside concurrent threads."""
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


def available_backends(device: torch.device, have: tuple[str, ...]) -> list[str]:
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


# Resolved (backend, device type, have, TRITON_INTERPRET) -> backend: what decides a resolution
# is fixed for the process (the build, triton's presence) apart from the interpreter switch, so
# every call after the first costs one dict lookup (the full resolution costs ~3 us on these
# CPUs, as much as a small kernel).  "cascade" is never cached: it probes flash-attn.
_RESOLVED: dict[tuple, str] = {}


def pick_backend(op: str, backend: str, device: torch.device, have: tuple[str, ...]) -> str:
    """Resolve ``backend`` for an op whose implementations are ``have`` (fastest first).

    "auto" takes the fastest usable one, but never the Triton interpreter on CPU and never
    "cascade" (a peer built on the optional flash-attn: asked for by name only).  An explicit
    backend that is not usable raises: nothing silently runs something else."""
    key = (backend, device.type, have, _build.triton_interpret())
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
    usable = available_backends(device, have)
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


# argument checks ------------------------------------------------------------------------
_META = (
    "(no data to compute on: run the op on CPU or CUDA tensors; under torch.compile or "
    "FakeTensorMode its fake kernel gives the output shapes)"
)


def _shape(t) -> tuple:
    return tuple(t.shape)


def check_tensor(
    op: str, name: str, t, *, ndim=None, dtypes=None, device=None, shape=None, backend=None
):
    """Raise TypeError/ValueError naming the argument when ``t`` is not as expected.
    ``shape`` entries may be None (any size); ``backend`` (the one asked for) is named when
    ``t`` is a meta tensor.  The passing path is a handful of attribute reads (it runs several
    times per op call)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"specops.{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.is_meta:
        asked = f" (backend {backend!r} was asked for)" if backend is not None else ""
        raise ValueError(f"specops.{op}: {name} is a meta tensor{asked} {_META}")
    if ndim is not None:
        nd = t.dim()
        if (nd != ndim) if isinstance(ndim, int) else (nd not in ndim):
            ndims = (ndim,) if isinstance(ndim, int) else tuple(ndim)
            want = " or ".join(str(n) for n in ndims)
            raise ValueError(
                f"specops.{op}: {name} must have {want} dimensions, got shape {_shape(t)}"
            )
    if dtypes is not None and t.dtype not in dtypes:
        names = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"specops.{op}: {name} must have dtype in ({names}), got {t.dtype}")
    # a torch.device compares directly; a string is converted only when that comparison fails
    if device is not None and t.device != device and t.device != torch.device(device):
        raise ValueError(
            f"specops.{op}: {name} is on {t.device} but the other inputs are on {device}"
        )
    if shape is not None:
        ts = t.shape
        if ts != shape and (
            len(ts) != len(shape) or any(s is not None and s != d for s, d in zip(shape, ts))
        ):
            want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
            raise ValueError(f"specops.{op}: {name} must have shape {want}, got {_shape(t)}")
    return t


def check_probs(op: str, name: str, t, **kw):
    return check_tensor(op, name, t, dtypes=_FLOAT_DTYPES, **kw)


def check_ids(op: str, name: str, t, **kw):
    return check_tensor(op, name, t, dtypes=_INT_DTYPES, **kw)


def check_values_probs(op: str, name: str, t: torch.Tensor) -> None:
    """Validation mode: finite and non-negative."""
    if not validating():
        return
    if not torch.isfinite(t).all():
        raise ValueError(f"specops.{op}: {name} has non-finite values")
    if (t < 0).any():
        raise ValueError(f"specops.{op}: {name} has negative probabilities")


def check_values_ids(op: str, name: str, t: torch.Tensor, vocab: int, *, allow_pad=True) -> None:
    """Validation mode: ids in [0, vocab) (or -1 padding)."""
    if not validating() or t.numel() == 0:
        return
    lo = -1 if allow_pad else 0
    if (t < lo).any() or (t >= vocab).any():
        bad = t[(t < lo) | (t >= vocab)][0]
        raise ValueError(f"specops.{op}: {name} holds id {int(bad)} outside [{lo}, {vocab})")


# seeds ----------------------------------------------------------------------------------
def rng_args(op: str, seed, offset, device: torch.device, num_seeds_max: int):
    """Normalise ``seed``/``offset`` (Python ints or int64 tensors) to
    (seed_tensor or None, seed_int, offset_tensor or None, offset_int).
    A seed tensor is [] or [B] (one per request); an offset tensor is [] or [1]."""
    seed_t = offset_t = None
    seed_i = offset_i = 0
    if isinstance(seed, torch.Tensor):
        check_tensor(op, "seed", seed, ndim=(0, 1), dtypes=(torch.int64,), device=device)
        if seed.dim() == 1 and seed.shape[0] not in (1, num_seeds_max):
            raise ValueError(
                f"specops.{op}: seed must have shape [] or [{num_seeds_max}] (one per request), "
                f"got {_shape(seed)}"
            )
        seed_t = seed if seed.dim() == 1 else seed.reshape(1)
    elif isinstance(seed, int):
        seed_i = _int64(op, "seed", seed)
    else:
        raise TypeError(f"specops.{op}: seed must be an int or an int64 tensor, got {type(seed)}")
    if isinstance(offset, torch.Tensor):
        check_tensor(op, "offset", offset, ndim=(0, 1), dtypes=(torch.int64,), device=device)
        if offset.numel() != 1:
            raise ValueError(f"specops.{op}: offset must have one element, got {_shape(offset)}")
        offset_t = offset if offset.dim() == 1 else offset.reshape(1)
    elif isinstance(offset, int):
        offset_i = _int64(op, "offset", offset)
    else:
        raise TypeError(
            f"specops.{op}: offset must be an int or an int64 tensor, got {type(offset)}"
        )
    return seed_t, seed_i, offset_t, offset_i


def _int64(op: str, name: str, value: int) -> int:
    if not -(2**63) <= value < 2**63:
        raise ValueError(
            f"specops.{op}: {name} must fit in int64 ([-2**63, 2**63)), got {value} "
            "(Philox reads it as its 64-bit two's complement)"
        )
    return value


def seed_for_reference(seed_t, seed_i: int, device) -> torch.Tensor:
    return seed_t if seed_t is not None else torch.tensor(seed_i, dtype=torch.int64, device=device)


def offset_for_reference(offset_t, offset_i: int, device) -> torch.Tensor:
    return (
        offset_t.reshape(())
        if offset_t is not None
        else torch.tensor(offset_i, dtype=torch.int64, device=device)
    )


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


def launch(be: str, name: str, *args) -> tuple:
    """Run the compiled kernel ``name``: its C++ twin ``<name>_cpu``, its CUDA launcher
    ``<name>_cuda`` (on torch's current stream of the tensors' device), or that launcher's
    emulated build ``<name>_cuda_sim``.  Tensors go in as they are: the bindings read their
    pointer, dtype, sizes and strides (csrc/tensor_arg.h) and raise a ValueError naming the
    argument for any layout the kernel cannot read.  An output passed as None is allocated by the
    binding; -> the tuple of the op's outputs."""
    return getattr(_build._C, f"{name}_{be}")(*args)


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


def fast_kernel(op: str, t, backend: str, have: tuple[str, ...]):
    """The compiled binding ``<op>_cpu`` / ``<op>_cuda`` that an eager ``backend="auto"`` call on
    ``t``'s device runs, or None: while tracing or under a mode, in validation mode, for tensor
    subclasses, and where "auto" resolves to another backend."""
    if (
        backend != "auto"
        or _compiling()
        or type(t) is not torch.Tensor
        or (_validate_env if _validate_override is None else _validate_override)
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
        be = pick_backend(op, "auto", t.device, have)
        fn = getattr(_build._C, f"{op}_{be}") if be in ("cpu", "cuda") else None
        _FAST[key] = fn
    return fn


def fast_rng(seed, offset, requests: int):
    """(seed_t, seed_i, offset_t, offset_i) as ``rng_args`` gives them, for the seeds and offsets
    the binding checks as ``rng_args`` would (an int; a seed tensor [1] or [requests]; an offset
    tensor of rank <= 1), else None."""
    ts = type(seed)
    if ts is int:
        st, si = None, seed
    elif ts is torch.Tensor and seed.dim() == 1 and seed.shape[0] in (1, requests):
        st, si = seed, 0
    else:
        return None
    to = type(offset)
    if to is int:
        return st, si, None, offset
    if to is torch.Tensor and offset.dim() <= 1:
        return st, si, offset, 0
    return None


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


def _eager_caller(name: str, impl):
    packet = getattr(torch.ops.specops, name)

    def call(*args):
        if _compiling() or _dispatch_modes() or _function_modes() or _transforms() is not None:
            return packet(*args)
        return impl(*args)

    call.__name__ = name
    return call


# The torch.library schema of an op comes from its implementation's annotated signature (one
# declaration): these annotation strings (the modules use ``from __future__ import annotations``)
# map to schema types; Python ints are SymInt so torch.compile can keep them symbolic.
_SCHEMA_TYPES = {
    "Tensor": "Tensor",
    "Tensor | None": "Tensor?",
    "list[Tensor]": "Tensor[]",
    "int": "SymInt",
    "float": "float",
    "bool": "bool",
    "str": "str",
}
_SCHEMA_RETURNS = {"None": "()", "Tensor": "Tensor"}


def schema_of(impl, mutates=()) -> str:
    """``(Tensor a, Tensor? b, SymInt n, ...) -> (Tensor, Tensor)`` from ``impl``'s annotations;
    parameters named in ``mutates`` are declared written (``Tensor(a!)``).  A trailing ``out``
    keyword (the ``_out`` variant's buffers, see ``register``) is not part of the schema."""
    sig = inspect.signature(impl)
    params, alias = [], iter("abcdefghijklmnop")
    for p in sig.parameters.values():
        if p.name == "out" and p.default is None:
            continue
        ann = str(p.annotation).replace("torch.", "").replace("Optional[Tensor]", "Tensor | None")
        if ann not in _SCHEMA_TYPES:
            raise TypeError(f"specops: {impl.__name__}({p.name}: {ann}) has no schema type")
        t = _SCHEMA_TYPES[ann]
        if p.name in mutates:
            t = t.replace("Tensor", f"Tensor({next(alias)}!)", 1)
        params.append(f"{t} {p.name}")
    ret = str(sig.return_annotation).replace("torch.", "")
    if ret.startswith("tuple["):
        ret = "(" + ", ".join(_SCHEMA_RETURNS[r.strip()] for r in ret[6:-1].split(",")) + ")"
    else:
        ret = _SCHEMA_RETURNS[ret]
    return "(" + ", ".join(params) + ") -> " + ret


_ARG_NAMES: dict[str, list[str]] = {}  # op -> its implementation's parameter names


def register(name: str, impl, fake, *, mutates=(), outs: int = 0, keys=("CPU", "CUDA")) -> None:
    """Define ``specops::name`` with the schema of ``impl``'s signature (``schema_of``), give it
    ``impl`` per dispatch key and ``fake``, and make ``ops.<name>`` its caller.

    ``outs`` > 0: the op returns that many tensors, and a second op ``<name>_out`` is derived
    from the same schema and implementation: the same arguments followed by ``outs``
    preallocated outputs it writes in place (``Tensor(a!) out0, ...``) -> ().  The
    implementation takes them as ``out=(t0, ...)`` (None: allocate)."""
    schema = schema_of(impl, mutates)
    _ARG_NAMES[name] = list(inspect.signature(impl).parameters)
    LIB.define(name + schema)
    for key in keys:
        LIB.impl(name, impl, key)
    torch.library.register_fake(f"specops::{name}", fake, lib=LIB)
    setattr(ops, name, _eager_caller(name, impl))
    if outs:
        args = schema[: schema.rindex(")", 0, schema.index("->"))]
        extra = ", ".join(f"Tensor({chr(ord('a') + i)}!) out{i}" for i in range(outs))
        out_name = name + "_out"

        def out_impl(*a):
            impl(*a[:-outs], out=a[-outs:])

        LIB.define(f"{out_name}{args}, {extra}) -> ()")
        for key in keys:
            LIB.impl(out_name, out_impl, key)
        torch.library.register_fake(f"specops::{out_name}", lambda *a: None, lib=LIB)
        setattr(ops, out_name, _eager_caller(out_name, out_impl))


def check_out(op: str, out, specs) -> tuple | None:
    """``out=`` of an op returning several tensors: None, or a tuple / NamedTuple of tensors
    matching ``specs`` [(name, shape, dtype, device)], each contiguous (the kernels write it in
    place; a CUDA graph can own it) and free of overlapping elements."""
    if out is None:
        return None
    if not isinstance(out, (tuple, list)) or len(out) != len(specs):
        names = ", ".join(s[0] for s in specs)
        raise TypeError(f"specops.{op}: out must be a tuple of {len(specs)} tensors ({names})")
    for t, (name, shape, dtype, device) in zip(out, specs):
        check_tensor(op, f"out.{name}", t, dtypes=(dtype,), device=device, shape=shape)
        if not t.is_contiguous():
            raise ValueError(
                f"specops.{op}: out.{name} must be contiguous (written in place), got strides "
                f"{t.stride()}"
            )
    return tuple(out)


def call(name: str, args: tuple, out, specs):
    """``ops.<name>(*args)``; with ``out`` (a tuple of buffers, or one tensor for a one-output op)
    checked against ``specs()`` (see ``check_out``; built only then) and written in place by
    ``ops.<name>_out`` -> ``out`` itself."""
    if out is None:
        return getattr(ops, name)(*args)
    single, s = isinstance(out, torch.Tensor), specs()
    if len(s) == 1 and not single:
        raise TypeError(f"specops.{name}: out must be a torch.Tensor, got {type(out).__name__}")
    outs = check_out(name, (out,) if single else out, s)
    ins = zip(_ARG_NAMES[name], args)
    check_no_alias(name, [(f"out.{spec[0]}", t) for spec, t in zip(s, outs)], ins)
    getattr(ops, name + "_out")(*args, *outs)
    return out if single else outs


def outputs(out, device, *shapes, dtype=torch.int32) -> tuple:
    """An impl's output buffers: the caller's ``out`` (checked by the public layer), or new ones
    of ``shapes``."""
    if out is not None:
        return out
    return tuple(torch.empty(s, dtype=dtype, device=device) for s in shapes)


def write_outs(out, results):
    """The results of a backend that allocates its own outputs, copied into ``out`` (if any);
    -> what the op returns (``out`` itself when given)."""
    if out is None:
        return results
    for o, r in zip(out, results):
        o.copy_(r)
    return out

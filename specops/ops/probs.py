"""Public probs_from_logits: CFG, temperature, top-k/top-p, softmax."""

from __future__ import annotations

import math

import torch

from specops import reference
from specops.ops import _common as c
from specops.ops._decl import OpDecl, Out, Ten, Value, register_decl

# the public function probs_from_logits: written from this declaration to
# specops/ops/_generated_probs.py by scripts/gen_ops.py
__all__: list[str] = []

_OP = "probs_from_logits"
_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_INTS = (torch.int32, torch.int64)


def _check(logits, temperature, top_k, top_p, cfg_scale, uncond_logits, backend) -> None:
    c.check_probs(_OP, "logits", logits, ndim=range(1, 9), backend=backend)
    shape = tuple(logits.shape)
    v = shape[-1]
    if v == 0:
        raise ValueError(f"specops.{_OP}: logits must have a non-empty last dim, got {shape}")
    dev = logits.device
    batch = shape[0] if len(shape) > 1 else 1

    if uncond_logits is not None:
        c.check_probs(_OP, "uncond_logits", uncond_logits, device=dev)
        if tuple(uncond_logits.shape) != shape:
            raise ValueError(
                f"specops.{_OP}: uncond_logits must have the shape of logits {list(shape)}, "
                f"got {list(uncond_logits.shape)}"
            )
        if cfg_scale is None:
            raise ValueError(f"specops.{_OP}: uncond_logits is given but cfg_scale is None")
    elif cfg_scale is not None:
        raise ValueError(f"specops.{_OP}: cfg_scale is given but uncond_logits is None")

    _param("temperature", temperature, batch, dev, _FLOATS)
    _param("top_k", 0 if top_k is None else top_k, batch, dev, _INTS)
    _param("top_p", 1.0 if top_p is None else top_p, batch, dev, _FLOATS)
    _param("cfg_scale", 1.0 if cfg_scale is None else cfg_scale, batch, dev, _FLOATS)
    if c.validating():  # on the tensors as the kernels take them (PROBS's lowering)
        f32 = torch.float32
        _check_values(logits, uncond_logits, _per_request(temperature, logits, f32, 1.0)[0],
                      _per_request(top_k, logits, torch.int32, 0)[0],
                      _per_request(top_p, logits, f32, 1.0)[0],
                      _per_request(cfg_scale, logits, f32, 1.0)[0])  # fmt: skip


def _param(name, value, batch, dev, dtypes) -> None:
    """A tensor: [] / [1] / [B] of ``dtypes`` on ``dev``; a Python number: its type and range."""
    if isinstance(value, torch.Tensor):
        c.check_tensor(_OP, name, value, ndim=(0, 1), dtypes=dtypes, device=dev)
        n = value.numel()
        if n not in (1, batch):
            raise ValueError(
                f"specops.{_OP}: {name} must have shape [], [1] or [{batch}] (one per request), "
                f"got {list(value.shape)}"
            )
        return
    integer = dtypes is _INTS
    if isinstance(value, bool) or not isinstance(value, (int, float) if not integer else int):
        kind = "an int" if integer else "a float"
        raise TypeError(
            f"specops.{_OP}: {name} must be {kind} or a tensor, got {type(value).__name__}"
        )
    if not integer and math.isnan(value):  # a number: checked for free, in every mode
        raise ValueError(f"specops.{_OP}: {name} is NaN")
    bad = {
        "temperature": not (math.isfinite(value) and value >= 0),
        "top_k": value < 0,
        "top_p": not (0 < value <= 1),
        "cfg_scale": not math.isfinite(value),
    }[name]
    if bad:
        want_txt = {
            "temperature": "finite and >= 0",
            "top_k": ">= 0 (0 = no top-k)",
            "top_p": "in (0, 1]",
            "cfg_scale": "finite",
        }[name]
        raise ValueError(f"specops.{_OP}: {name} must be {want_txt}, got {value}")


def _check_values(logits, uncond, t_t, k_t, p_t, s_t) -> None:
    """Validation mode (reads the data): no NaN / +inf logits; parameter tensors in range."""
    for name, x in (("logits", logits), ("uncond_logits", uncond)):
        if x is not None and (torch.isnan(x).any() or (x == float("inf")).any()):
            raise ValueError(f"specops.{_OP}: {name} has NaN or +inf values (-inf is allowed)")
    if t_t is not None and not (torch.isfinite(t_t).all() and (t_t >= 0).all()):
        raise ValueError(f"specops.{_OP}: temperature must be finite and >= 0, got {t_t.tolist()}")
    if k_t is not None and (k_t < 0).any():
        raise ValueError(f"specops.{_OP}: top_k must be >= 0 (0 = no top-k), got {k_t.tolist()}")
    if p_t is not None and not ((p_t > 0).all() and (p_t <= 1).all()):
        raise ValueError(f"specops.{_OP}: top_p must be in (0, 1], got {p_t.tolist()}")
    if s_t is not None and not torch.isfinite(s_t).all():
        raise ValueError(f"specops.{_OP}: cfg_scale must be finite, got {s_t.tolist()}")


def _per_request(value, logits, want, neutral):
    """A checked parameter as the kernels take it: (tensor [B] of ``want`` read with its stride,
    or None; the Python value, ``neutral`` for None)."""
    if isinstance(value, torch.Tensor):
        batch = logits.shape[0] if logits.dim() > 1 else 1
        if want == torch.int32:  # top_k: past int32 still "keep everything", never wraps
            value = c.int32_ids(value)
        return value.reshape(-1).to(want).expand(batch), 0  # stride 0 when broadcast: no copy
    return None, neutral if value is None else value


def _values(t_t, t_v, k_t, k_v, p_t, p_v, s_t, s_v, uncond):
    """The parameters as the reference and Triton take them: a tensor or a Python number, None
    for what does nothing (top-k 0, top-p 1, no guidance)."""
    temperature = t_t if t_t is not None else t_v
    top_k = k_t if k_t is not None else (k_v or None)
    top_p = p_t if p_t is not None else (p_v if p_v < 1.0 else None)
    cfg = (s_t if s_t is not None else s_v) if uncond is not None else None
    return temperature, top_k, top_p, cfg


def _reference(logits, temperature, temperature_value, top_k, top_k_value, top_p, top_p_value,
               cfg_scale, cfg_scale_value, uncond_logits):  # fmt: skip
    t, k, p, s = _values(temperature, temperature_value, top_k, top_k_value, top_p, top_p_value,
                         cfg_scale, cfg_scale_value, uncond_logits)  # fmt: skip
    return (reference.probs_from_logits(logits, temperature=t, top_k=k, top_p=p, cfg_scale=s,
                                        uncond_logits=uncond_logits),)  # fmt: skip


def _kernel(be, a, out):
    """The kernels read [rows, V] rows with a contiguous last dim (the C++ twin float32) and
    write [rows, V] float32; parameter tensors [B] are indexed by row // (rows / B)."""
    logits, uncond = a.logits, a.uncond_logits
    res = out[0] if out is not None else torch.empty(logits.shape, dtype=torch.float32,
                                                      device=logits.device)  # fmt: skip
    v = logits.shape[-1]
    x = logits.reshape(-1, v)
    x = x if x.stride(-1) == 1 else x.contiguous()
    u = None
    if uncond is not None:
        u = uncond.reshape(-1, v)
        u = u if u.stride(-1) == 1 else u.contiguous()
    rows = x.shape[0]
    if rows == 0:
        return (res,)
    per_req = rows // (logits.shape[0] if logits.dim() > 1 else 1)
    if be != "triton":  # the C++ twin
        f32 = torch.float32
        x = x if x.dtype == f32 else x.to(f32)
        u = u if u is None or u.dtype == f32 else u.to(f32)
        guided = u is not None
        flat = a._replace(logits=x, temperature_value=float(a.temperature_value),
                          top_k_value=min(int(a.top_k_value), 2**62),
                          top_p_value=float(a.top_p_value),
                          cfg_scale=a.cfg_scale if guided else None,
                          cfg_scale_value=float(a.cfg_scale_value) if guided else 1.0,
                          uncond_logits=u)  # fmt: skip
        PROBS.launch(be, *flat, out=(res.view(-1, v),), rows_per_request=per_req)
        return (res,)
    temperature, top_k, top_p, cfg = _values(a.temperature, a.temperature_value, a.top_k,
                                              a.top_k_value, a.top_p, a.top_p_value, a.cfg_scale,
                                              a.cfg_scale_value, uncond)  # fmt: skip
    PROBS.triton_kernel()(x, u, temperature, top_k, top_p, cfg, per_req, res.view(-1, v))
    return (res,)


def _per_request_flat(name: str, schema: str) -> tuple:
    """A parameter's flat entries: the tensor [B] (or None) and the Python value."""
    return ((name, "Tensor?"), (f"{name}_value", schema))


_F32, _I32, _INF = torch.float32, torch.int32, math.inf
# Each parameter, a number or a tensor, becomes (tensor [B] read with its stride, or None; the
# Python value): ``lower`` on the checked path; on the fast path (a number in its range, which
# the binding takes as it is) ``fast``.
PROBS = OpDecl(
    _OP,
    args=(
        Ten("logits", "... V", fast_rank=2),
        Value(
            "temperature",
            _per_request_flat("temperature", "float"),
            lower=lambda temperature, logits: _per_request(temperature, logits, _F32, 1.0),
            fast_if=lambda temperature: (
                (type(temperature) is float or type(temperature) is int) and 0 <= temperature < _INF
            ),
            fast=lambda temperature: (None, float(temperature)),
        ),
        Value(
            "top_k",
            _per_request_flat("top_k", "SymInt"),
            lower=lambda top_k, logits: _per_request(top_k, logits, _I32, 0),
            fast_if=lambda top_k: top_k is None or (type(top_k) is int and top_k >= 0),
            fast=lambda top_k: (None, 0 if top_k is None else min(top_k, 2**62)),
        ),
        Value(
            "top_p",
            _per_request_flat("top_p", "float"),
            lower=lambda top_p, logits: _per_request(top_p, logits, _F32, 1.0),
            fast_if=lambda top_p: (
                top_p is None or ((type(top_p) is float or type(top_p) is int) and 0 < top_p <= 1)
            ),
            fast=lambda top_p: (None, 1.0 if top_p is None else float(top_p)),
        ),
        Value(
            "cfg_scale",
            _per_request_flat("cfg_scale", "float"),
            lower=lambda cfg_scale, logits: _per_request(cfg_scale, logits, _F32, 1.0),
            fast_if=lambda cfg_scale: (
                cfg_scale is None
                or (
                    (type(cfg_scale) is float or type(cfg_scale) is int)
                    and -_INF < cfg_scale < _INF
                )
            ),
            fast=lambda cfg_scale: (None, 1.0 if cfg_scale is None else float(cfg_scale)),
        ),
        Ten("uncond_logits", "... V", optional=True),
    ),
    outs=(Out("probs", "..., V", torch.float32),),
    backends=("triton", "cpu", "reference"),
    check=_check,
    reference=_reference,
    kernel=_kernel,
    triton="probs_split:probs_from_logits_triton",
    fast_when=lambda uncond_logits, cfg_scale: (uncond_logits is None) == (cfg_scale is None),
)
PROBS.public(
    reference.probs_from_logits,
    doc="""Sampling distributions [..., V] float32 from ``logits``: CFG, temperature, top-k, top-p.

    Parameters
    ----------
    logits : [..., V] float32/float16/bfloat16
        The (conditional) logits; each flat row gives one distribution.
    temperature : float or [] / [1] / [B] float
        T, finite and >= 0; T < 1e-5 (0 included) gives the one-hot of the arg-max.
    top_k : int or [] / [1] / [B] int32/int64 or None
        Keep the k largest values, k >= 0; None, 0 or k >= V keeps everything.
    top_p : float or [] / [1] / [B] float or None
        Nucleus mass p in (0, 1], applied after top-k; None or 1 keeps everything.
    cfg_scale : float or [] / [1] / [B] float or None
        Guidance scale s, finite; given exactly when ``uncond_logits`` is.
    uncond_logits : [..., V] float32/float16/bfloat16 or None
        The unconditional logits for CFG, of the shape of ``logits``.
    backend : str
        "auto" (triton on CUDA, cpu on CPU), "triton", "cpu" (the C++ twin) or "reference".
    out : [..., V] float32 or None
        A preallocated contiguous output (CUDA graphs).

    Per flat row, in this order (maths and tie rules: ``specops/reference/probs.py``):

    - CFG: ``l = u + s * (c - u)`` in float32; a token that is -inf in either row stays -inf.
    - temperature: ``x = l / T``; ``T < 1e-5`` gives the one-hot of ``argmax l`` (ties -> lowest
      index) and skips the filters.
    - ``top_k``: keep ``x >= `` the k-th largest value (every tie of the k-th value is kept, so
      more than k tokens survive only on exact ties).
    - ``top_p`` (after top-k, as in vLLM/HF): keep the smallest set of largest tokens whose
      softmax mass (among the top-k survivors) is >= p, every tie at the boundary kept; at least
      the arg-max survives.
    - softmax over the survivors; filtered tokens get exactly 0.

    A tensor parameter is [B] (one per request, dim 0 of ``logits``, broadcast over its
    positions) or [] / [1]; ``top_k`` takes int tensors, the others float tensors.  A Python
    number outside its range (NaN and infinities included) raises ``ValueError`` in every mode
    (it costs nothing to check).  NaN tensor entries raise in validation mode and are otherwise
    the neutral value (reading them would sync): temperature 1.0, no top-p filtering, no
    guidance (the conditional logits as they are).  A row whose logits are all -inf is the
    one-hot of token 0.

    Backends: "triton" (each row split over several programs, a launch a pass, without top-p
    and with top-p after a top-k below 4096, whose survivors one program a row sorts; top-p
    alone: one fused kernel, a program a row, no sort), "cpu" (selection instead of sorts, rows
    on ``specops.set_num_threads`` threads), "reference".""",
)


register_decl(PROBS)

"""specops.commit_kv: make the accepted path's K/V entries the committed prefix, in every layer,
in one launch, and advance ``cache_seqlens`` on the device."""

from __future__ import annotations

import math
from collections import OrderedDict

import torch

from specops import reference
from specops.ops import _common as c
from specops.ops._decl import OpDecl, Ten, Value, register_decl

# the public function commit_kv: written from this declaration to
# specops/ops/_generated_kv.py by scripts/gen_ops.py
__all__: list[str] = []

_CACHE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_MAX_MOVES = 2048  # shared memory of the CUDA kernel: 16 bytes per entry of accepted_slots
_OP = "commit_kv"


def _check(caches, cache_seqlens, accepted_slots, block_table, backend) -> None:
    paged = block_table is not None
    if isinstance(caches, torch.Tensor):
        c.check_tensor(_OP, "caches", caches, ndim=6, dtypes=_CACHE_DTYPES)
        if caches.shape[1] != 2:
            raise ValueError(
                f"specops.commit_kv: caches must have shape [layers, 2, "
                f"{'P, page' if paged else 'B, S'}, Hkv, D] (dim 1 = K, V), got "
                f"{tuple(caches.shape)}"
            )
        _check_rows(caches, "caches")
        c.check_writable(_OP, "caches", caches)
        slab_shape, dev = caches.shape[2:], caches.device
    else:
        first = _check_pairs(caches)
        slab_shape, dev = first.shape, first.device
    lead = slab_shape[0]
    c.check_tensor(_OP, "cache_seqlens", cache_seqlens, ndim=1, dtypes=(torch.int32,), device=dev)
    if not cache_seqlens.is_contiguous():
        raise ValueError("specops.commit_kv: cache_seqlens must be contiguous (it is written)")
    batch = cache_seqlens.shape[0]
    c.check_ids(_OP, "accepted_slots", accepted_slots, ndim=2, device=dev)
    if accepted_slots.shape[0] != batch:
        raise ValueError(
            f"specops.commit_kv: accepted_slots must have shape [{batch}, M] (B from "
            f"cache_seqlens), got {tuple(accepted_slots.shape)}"
        )
    if accepted_slots.shape[1] > _MAX_MOVES:
        raise ValueError(
            f"specops.commit_kv: accepted_slots has {accepted_slots.shape[1]} columns, at most "
            f"{_MAX_MOVES} are supported"
        )
    if paged:
        c.check_ids(_OP, "block_table", block_table, ndim=2, device=dev)
        if block_table.shape[0] != batch:
            raise ValueError(
                f"specops.commit_kv: block_table must have shape [{batch}, pages], got "
                f"{tuple(block_table.shape)}"
            )
        capacity = block_table.shape[1] * slab_shape[1]
    else:
        if lead != batch:
            raise ValueError(
                f"specops.commit_kv: the caches' batch dim is {lead} but cache_seqlens has "
                f"{batch} entries (paged caches need block_table)"
            )
        capacity = slab_shape[1]
    if c.validating():  # on the ids as given (before the int32 conversion)
        _check_values(cache_seqlens, accepted_slots, capacity, block_table, lead)


# argument checks ------------------------------------------------------------------------
def _check_rows(t: torch.Tensor, name: str) -> None:
    """Each position's [Hkv, D] row is contiguous (the kernels move it as row_bytes bytes)."""
    if t.numel() and not (t.stride(-1) == 1 and (t.shape[-2] == 1 or t.stride(-2) == t.shape[-1])):
        raise ValueError(
            f"specops.commit_kv: {name} must have contiguous [Hkv, D] rows (strides of the last "
            f"two dims [D, 1]), got strides {t.stride()}"
        )


def _slabs(caches) -> list[torch.Tensor]:
    """``caches`` as the op's schema takes them: [the stacked tensor], or every layer's K and V
    slab in order (a list of pairs flattened)."""
    return [caches] if isinstance(caches, torch.Tensor) else [t for pair in caches for t in pair]


def _check_pairs(caches) -> torch.Tensor:
    """A list of (k_cache, v_cache) pairs sharing one shape, dtype, device and layout -> the
    first slab."""
    if not isinstance(caches, (list, tuple)) or not caches:
        raise TypeError(
            "specops.commit_kv: caches must be a tensor [layers, 2, ...] or a non-empty list of "
            f"(k_cache, v_cache) pairs, got {type(caches).__name__}"
        )
    for i, pair in enumerate(caches):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise TypeError(
                f"specops.commit_kv: caches[{i}] must be a (k_cache, v_cache) pair, got "
                f"{type(pair).__name__}"
            )
    out = _slabs(caches)
    first = out[0]
    c.check_tensor(_OP, "caches[0][0]", first, ndim=4, dtypes=_CACHE_DTYPES)
    _check_rows(first, "caches[0][0]")
    for j, t in enumerate(out):
        name = f"caches[{j // 2}][{j % 2}]"
        c.check_writable(_OP, name, t)
        c.check_tensor(_OP, name, t, dtypes=(first.dtype,), device=first.device, shape=first.shape)
        if t.stride() != first.stride():
            raise ValueError(
                f"specops.commit_kv: {name} has strides {t.stride()} but caches[0][0] has "
                f"{first.stride()}: every layer's K and V must share one layout"
            )
    return first


def _check_values(cs, slots, capacity, block_table, num_pages) -> None:
    """Validation mode: the input is well formed, so the kernels commit every non -1 entry."""
    if slots.numel() == 0:
        return
    if (cs < 0).any() or (cs > capacity).any():
        raise ValueError(f"specops.commit_kv: cache_seqlens has values outside [0, {capacity}]")
    if (slots < -1).any():
        raise ValueError("specops.commit_kv: accepted_slots has entries < -1 (-1 is padding)")
    pad = slots < 0
    if (pad[:, :-1] & ~pad[:, 1:]).any():
        raise ValueError("specops.commit_kv: accepted_slots has -1 padding before a valid entry")
    valid = ~pad
    if (valid[:, 1:] & (slots[:, 1:] <= slots[:, :-1])).any():
        raise ValueError(
            "specops.commit_kv: accepted_slots must be strictly increasing (path order)"
        )
    m = valid.sum(1)
    if (cs.long() + m > capacity).any():
        raise ValueError(
            f"specops.commit_kv: a path is longer than the free space (cache_seqlens + m > "
            f"capacity {capacity})"
        )
    last = torch.where(valid, slots, -1).amax(1).long()
    if ((cs.long() + last >= capacity) & (m > 0)).any():
        raise ValueError(
            f"specops.commit_kv: accepted_slots has a slot beyond the capacity (cache_seqlens "
            f"+ slot >= {capacity})"
        )
    if block_table is not None:
        page = capacity // block_table.shape[1]
        pos = cs.long()[:, None] + torch.where(valid, slots, 0).long()
        pos = torch.cat(
            [pos, cs.long()[:, None] + torch.arange(slots.shape[1], device=cs.device)], 1
        )
        pages = block_table.long().gather(1, (pos // page).clamp(0, block_table.shape[1] - 1))
        used = torch.cat([valid, valid], 1)
        if (used & ((pages < 0) | (pages >= num_pages))).any():
            raise ValueError(
                f"specops.commit_kv: block_table maps a committed position to a page outside "
                f"[0, {num_pages})"
            )


# kernels --------------------------------------------------------------------------------
_counters: dict[torch.device, torch.Tensor] = {}
_bases: OrderedDict[tuple, tuple[torch.Tensor, int, torch.Tensor]] = OrderedDict()


def _counter_workspace(device: torch.device, batch: int) -> torch.Tensor:
    """Per-device int32 zeros [>= B]: the CUDA kernel's last-block-done counters (it leaves
    them zero).  Allocated on first use: warm up before capturing a CUDA graph."""
    ws = _counters.get(device)
    if ws is None or ws.numel() < batch:
        ws = torch.zeros(max(batch, 64), dtype=torch.int32, device=device)
        _counters[device] = ws
    return ws


def _base_array(tensors: list[torch.Tensor]) -> tuple[torch.Tensor, int]:
    """(int64 [2 * layers] of the slabs' addresses on their device, the largest power of two
    <= 16 dividing them all), cached by (device, addresses), all the value depends on (bytes,
    not elements: the dtype does not enter): a list of cache tensors is allocated once, so
    steady-state calls copy nothing to the device."""
    dev = tensors[0].device
    addrs = tuple(t.data_ptr() for t in tensors)
    key = (dev, addrs)
    hit = _bases.get(key)
    if hit is None:
        host = torch.tensor(addrs, dtype=torch.int64)
        if dev.type == "cuda":
            host = host.pin_memory()  # kept alive in the cache entry while the copy runs
            arr = host.to(dev, non_blocking=True)
        else:
            arr = host
        hit = (arr, _vec_bytes(addrs), host)
        _bases[key] = hit
        while len(_bases) > 64:
            _bases.popitem(last=False)
    else:
        _bases.move_to_end(key)
    return hit[0], hit[1]


def _vec_bytes(values) -> int:
    """Largest of 16, 8, 4, 2, 1 dividing every value (addresses, strides, row size in bytes)."""
    g = 0
    for v in values:
        g = math.gcd(g, int(v))
    for w in (16, 8, 4, 2):
        if g % w == 0:
            return w
    return 1


_offsets: OrderedDict[tuple, torch.Tensor] = OrderedDict()
_RAW = {2: torch.int16, 4: torch.int32}


def _slab_offsets(tensors: list[torch.Tensor]) -> torch.Tensor:
    """int64 [2 * layers]: each slab's start relative to the first, in elements (the Triton
    kernel addresses slabs from one base pointer); cached by (device, element size, addresses):
    everything the value depends on."""
    dev = tensors[0].device
    addrs = tuple(t.data_ptr() for t in tensors)
    es = tensors[0].element_size()
    key = (dev, es, addrs)  # offsets in elements: the same addresses with another dtype differ
    hit = _offsets.get(key)
    if hit is None:
        if any((a - addrs[0]) % es for a in addrs):
            raise ValueError(
                "specops.commit_kv: the caches' slabs are not a whole number of elements apart "
                "(the triton backend addresses every slab from the first one)"
            )
        hit = torch.tensor([(a - addrs[0]) // es for a in addrs], dtype=torch.int64).to(dev)
        _offsets[key] = hit
        while len(_offsets) > 64:
            _offsets.popitem(last=False)
    else:
        _offsets.move_to_end(key)
    return hit


def _launch_triton(t, offsets, layers, shape, strides, cs, slots, block_table):
    """t: the cache tensor whose first element is slab (0, 0)'s; moved as raw int bits."""
    counters = _counter_workspace(cs.device, cs.shape[0])
    raw = t.view(_RAW[t.element_size()])
    KV.triton_kernel()(raw, offsets, layers, shape, strides, cs, slots, block_table, counters)


def _advance_only(shape, cs, slots, block_table) -> None:
    """Caches without elements (B, S, P, page, Hkv or D = 0; ``shape`` one slab's): nothing to
    move, but ``cache_seqlens`` advances by m exactly as the reference counts it (every fast
    backend; on the device, no sync)."""
    if block_table is None:
        capacity, num_pages = shape[1], 0
    else:
        capacity, num_pages = block_table.shape[1] * shape[1], shape[0]
    m = reference.commit_count(cs, slots, capacity, block_table, num_pages)
    cs.add_(m.to(cs.dtype))


def _reference(caches, cache_seqlens, accepted_slots, block_table) -> None:
    slots, block_table = c.int32_ids(accepted_slots), c.int32_ids(block_table)
    if caches[0].dim() != 6:  # per-layer pairs
        caches = [(caches[i], caches[i + 1]) for i in range(0, len(caches), 2)]
    else:
        caches = caches[0]
    reference.commit_kv(caches, cache_seqlens, slots, block_table=block_table)


def _kernel(be, a, out) -> None:
    """The compiled kernels on the schema's arguments: ``caches`` [the stacked tensor] or the
    slabs of every layer (moved through their base addresses or, Triton, slab offsets).  The
    binding takes ``t``, the stacked cache [layers, 2, ...] or (with ``bases``: the address
    array and its alignment) the first slab of a list of per-layer caches sharing its shape,
    dtype and strides, and derives the byte geometry from its sizes and strides
    (csrc/bind_kv.cpp)."""
    caches, cs = a.caches, a.cache_seqlens
    slots, block_table = c.int32_ids(a.accepted_slots), c.int32_ids(a.block_table)
    t = caches[0]
    stacked = t.dim() == 6
    if slots.shape[1] == 0 or (stacked and t.shape[0] == 0):
        return  # no layer or no slot: nothing moves and nothing advances (the reference's rule)
    slab = t.shape[2:] if stacked else t.shape
    if t.numel() == 0:
        _advance_only(slab, cs, slots, block_table)
        return
    st = t.stride()
    strides = (st[0], st[1], st[2], st[3]) if stacked else (0, 0, st[0], st[1])
    layers = t.shape[0] if stacked else len(caches) // 2
    if be == "triton":
        offsets = None if stacked else _slab_offsets(caches)
        _launch_triton(t, offsets, layers, slab, strides, cs, slots, block_table)
        return
    arr, align = (None, 0) if stacked else _base_array(caches)
    extra = {}
    if be in ("cuda", "cuda_sim"):
        extra["counters"] = _counter_workspace(cs.device, cs.shape[0])
    flat = a._replace(caches=t, accepted_slots=slots, block_table=block_table)
    KV.launch(be, *flat, bases=arr, bases_align=align, **extra)


KV = OpDecl(
    "commit_kv",
    args=(
        Value(
            "caches",
            (("caches", "Tensor[]"),),
            lower=_slabs,
            # a tensor (fast_kernel returned a binding); not CUDA: its launch also takes the
            # counter workspace; no layer or no element: the kernels' rules (_kernel)
            fast_if=lambda caches: (
                not caches.is_cuda
                and caches.dim() == 6
                and caches.shape[0] > 0
                and caches.numel() > 0
            ),
            fast=lambda caches: caches,
        ),
        Ten("cache_seqlens", "B"),
        Ten("accepted_slots", "B M"),
        Ten("block_table", "B P", optional=True),
    ),
    outs=(),
    mutates=("caches", "cache_seqlens"),
    backends=("cuda", "triton", "cpu", "reference"),
    triton="kv:commit_kv_triton",
    check=_check,
    reference=_reference,
    kernel=_kernel,
    # no slot: the kernels' rule (_kernel)
    fast_when=lambda accepted_slots: (
        type(accepted_slots) is torch.Tensor
        and accepted_slots.dim() == 2
        and 0 < accepted_slots.shape[1] <= _MAX_MOVES
    ),
)
KV.public(
    reference.commit_kv,
    doc="""Commit the accepted path's K/V in every layer and advance ``cache_seqlens``, in one
    launch.

    Parameters
    ----------
    caches : [layers, 2, B, S, Hkv, D] float16/bfloat16/float32 or list of (k_cache, v_cache)
        One tensor (paged: [layers, 2, P, page, Hkv, D]) or a non-empty list of per-layer
        pairs of [B, S, Hkv, D] (paged: [P, page, Hkv, D]) sharing one shape, dtype and
        strides; each position's [Hkv, D] row must be contiguous.
    cache_seqlens : [B] int32
        The committed length per request, contiguous; advanced in place.
    accepted_slots : [B, M] int32/int64
        Offsets from ``cache_seqlens`` of the accepted nodes, in path order (strictly
        increasing), -1 padded at the end; M <= 2048.
    block_table : [B, pages] int32/int64 or None
        The pages of each request for paged caches; None: contiguous caches.
    backend : str
        "auto" (cuda, else triton on a GPU; cpu on CPU), "cuda", "triton", "cpu" (the C++
        twin) or "reference".

    Moves the accepted entries to ``cache_seqlens + [0, m)`` in every layer, K and V, and
    advances ``cache_seqlens`` by m, on the device.  For every request b, layer and K/V:
    cache[cs + i] <- cache[cs + s_i] for the m_b non -1 entries (values read before any write:
    overlapping moves such as 5 -> 2 with 2 -> 1 are safe, and an in-place prefix s_i = i is a
    no-op), then cs += m_b.  Slots that are not committed are left behind.

    Validation mode raises on -1 before a valid entry, non-increasing slots, a slot beyond the
    capacity, a path longer than the free space, or (paged) a page id outside [0, P).  Fast mode
    never touches memory outside the cache: each request commits only the longest prefix of
    valid entries (specops.reference.kv).  CUDA: launches on the same cache pointers must not
    run concurrently on two streams (they share a small per-device counter workspace).""",
)
register_decl(KV)

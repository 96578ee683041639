"""Global-memory traffic of the Triton kernels, counted in the Triton interpreter (issue 36).

``count_traffic()`` wraps the interpreter's global loads and stores while a callable runs under
``TRITON_INTERPRET=1`` and returns one ``KernelTraffic`` (bench/traffic_common.py) per kernel
launch.  What is counted, per ``tl.load``/``tl.store`` call of a program (an access):

- the access's lanes are the elements of its pointer block in row-major order; the active lanes
  are those its mask keeps (a call without a mask keeps all, a scalar access is one lane);
- bytes = active lanes x element size, into ``bytes_read`` (loads) or ``bytes_written`` (stores)
  and into the program's ``cta_bytes`` entry;
- the active lanes, in order, are split into groups of 32 (``WARP``): each group is one request,
  and its sectors are the distinct 32-byte aligned segments its lanes' bytes touch;
- atomics (``tl.atomic_*``: a read-modify-write in memory) count their bytes as read *and*
  written, one request set like a load; ``tl.debug_barrier`` counts one barrier per call.

Programs are numbered x fastest (CUDA's linear block index): ``cta_bytes[x + nx * (y + ny * z)]``.
Where this differs from what a GPU counts (the lane-to-thread mapping, vector width, warps
re-issuing scalar loads), see ``NOTES`` at the end of this file.

``count_triton_ops(quick)`` runs every Triton kernel of specops through its public op with
``backend="triton"`` on CPU tensors and returns (op, shape, KernelTraffic) rows.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial

import numpy as np

from .traffic_common import SECTOR, WARP, KernelTraffic

__all__ = [
    "count_traffic",
    "traffic_of",
    "count_triton_ops",
    "count_triton_calls",
    "ensure_interpreter",
]


def ensure_interpreter() -> None:
    """TRITON_INTERPRET=1 must be set before ``triton.jit`` decorates the kernels (it picks the
    interpreter at decoration time).  Set it when triton is not imported yet (then every Triton
    kernel of this process runs in the interpreter); otherwise check that it was."""
    if "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"
        from specops import _build

        _build._TRITON_INTERPRET = True  # specops reads the switch once, at import
        return
    from triton import knobs

    if not knobs.runtime.interpret:
        raise RuntimeError(
            "bench.traffic_triton: triton was imported without TRITON_INTERPRET=1; set it in the "
            "environment before triton (or specops.triton_kernels) is imported"
        )


# --------------------------------------------------------------------------------------------
# the counter


def _sectors(addr: np.ndarray, size: int) -> int:
    """Sum over 32-lane groups of ``addr`` (active lanes' byte addresses, in lane order) of the
    distinct 32-byte sectors each group's bytes [a, a + size) touch."""
    n = addr.size
    group = np.arange(n, dtype=np.int64) // WARP
    first = addr // SECTOR
    last = (addr + (size - 1)) // SECTOR
    secs = first if np.array_equal(first, last) else None
    if secs is None:  # an element straddles a sector boundary (misaligned): count every sector
        span = int((last - first).max()) + 1
        parts = [first + i for i in range(span)]
        keep = [np.ones(n, bool)] + [first + i <= last for i in range(1, span)]
        secs = np.concatenate([p[k] for p, k in zip(parts, keep)])
        group = np.concatenate([group[k] for k in keep])
    lo = int(secs.min())
    width = int(secs.max()) - lo + 1
    if width * (int(group[-1]) + 1) < 2**62:  # one int64 key per (group, sector)
        return int(np.unique(group * width + (secs - lo)).size)
    pairs = np.stack([group, secs], axis=1)  # pragma: no cover - addresses > 2^62 apart
    return int(np.unique(pairs, axis=0).shape[0])


class _Counter:
    """Patches the interpreter (see ``count_traffic``) and fills ``launches``."""

    def __init__(self) -> None:
        from triton.runtime import interpreter as interp

        self.interp = interp
        self.builder = interp.interpreter_builder
        self.launches: list[KernelTraffic] = []
        self.current: KernelTraffic | None = None

    # -- accounting ---------------------------------------------------------------------------
    def _program(self) -> int:
        x, y, z = self.builder.grid_idx
        nx, ny, _ = self.current.grid
        return x + nx * (y + ny * z)

    def access(self, ptrs, mask, read: bool, written: bool) -> None:
        t = self.current
        if t is None:  # not inside a launch (e.g. a device function called directly)
            return
        addr = np.asarray(ptrs.data)
        if mask is not None:
            m = np.broadcast_to(np.asarray(mask.data, dtype=bool), addr.shape)
            addr = addr[m]  # boolean indexing flattens in row-major order: the lane order
        addr = addr.reshape(-1).astype(np.int64)
        if addr.size == 0:  # every lane masked: no request, nothing moved
            return
        size = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        nbytes = int(addr.size) * size
        if read:
            t.bytes_read += nbytes
        if written:
            t.bytes_written += nbytes
        t.cta_bytes[self._program()] += nbytes * (int(read) + int(written))
        t.requests += -(-int(addr.size) // WARP)
        t.sectors += _sectors(addr, size)

    # -- patching -----------------------------------------------------------------------------
    def install(self) -> None:
        b, counter = self.builder, self
        orig = {
            name: getattr(b, name)
            for name in (
                "create_masked_load",
                "create_masked_store",
                "create_atomic_rmw",
                "create_atomic_cas",
                "create_barrier",
                "set_grid_dim",
            )
        }
        # instance attributes shadow the class's methods; ``restore`` deletes them again
        self.own = {name: name in vars(b) for name in orig}
        self.orig = orig

        def masked_load(ptrs, mask, other, cache_policy, is_volatile):
            counter.access(ptrs, mask, True, False)
            return orig["create_masked_load"](ptrs, mask, other, cache_policy, is_volatile)

        def masked_store(ptrs, value, mask, cache_policy):
            counter.access(ptrs, mask, False, True)
            return orig["create_masked_store"](ptrs, value, mask, cache_policy)

        def atomic_rmw(rmw_op, ptr, val, mask, sem, scope):
            counter.access(ptr, mask, True, True)
            return orig["create_atomic_rmw"](rmw_op, ptr, val, mask, sem, scope)

        def atomic_cas(ptr, cmp, val, sem, scope):
            counter.access(ptr, None, True, True)
            return orig["create_atomic_cas"](ptr, cmp, val, sem, scope)

        def barrier():
            if counter.current is not None:
                counter.current.barriers += 1
            return orig["create_barrier"]()

        def set_grid_dim(nx, ny, nz):
            if counter.current is not None:
                counter.current.grid = (int(nx), int(ny), int(nz))
                counter.current.cta_bytes = [0] * (int(nx) * int(ny) * int(nz))
            return orig["set_grid_dim"](nx, ny, nz)

        b.create_masked_load = masked_load  # tl.load (create_load calls it with an all-ones mask)
        b.create_masked_store = masked_store  # tl.store (likewise)
        b.create_atomic_rmw = atomic_rmw
        b.create_atomic_cas = atomic_cas
        b.create_barrier = barrier
        b.set_grid_dim = set_grid_dim

        # a launch: GridExecutor.__call__ runs every program of the grid of one kernel
        ge = self.interp.GridExecutor
        self.orig_call = ge.__call__

        def call(executor, *args, **kwargs):
            outer = counter.current
            t = KernelTraffic(backend="triton", kernel=executor.fn.__name__, grid=(0, 0, 0))
            counter.current = t
            try:
                return counter.orig_call(executor, *args, **kwargs)
            finally:
                counter.current = outer
                counter.launches.append(t)

        ge.__call__ = call

    def restore(self) -> None:
        for name, own in self.own.items():
            if own:
                setattr(self.builder, name, self.orig[name])
            else:
                with contextlib.suppress(AttributeError):
                    delattr(self.builder, name)
        self.interp.GridExecutor.__call__ = self.orig_call


_active: list[_Counter] = []


@contextlib.contextmanager
def count_traffic() -> Iterator[list[KernelTraffic]]:
    """``with count_traffic() as launches: ...`` -> one KernelTraffic per Triton launch made in
    the block, in launch order (the list fills as kernels run).  The interpreter is restored on
    exit, also on an exception.  Not re-entrant and not thread-safe: the interpreter is global."""
    ensure_interpreter()
    if _active:
        raise RuntimeError("bench.traffic_triton.count_traffic is already active")
    c = _Counter()
    c.install()
    _active.append(c)
    try:
        yield c.launches
    finally:
        _active.pop()
        c.restore()


def traffic_of(fn: Callable, *args, **kwargs) -> tuple[object, list[KernelTraffic]]:
    """Run ``fn(*args, **kwargs)`` while counting -> (its result, its launches)."""
    with count_traffic() as launches:
        result = fn(*args, **kwargs)
    return result, launches


# --------------------------------------------------------------------------------------------
# every Triton kernel of specops, through its public op (backend="triton")

# (B, K, V): verify_chain with sampled drafts (q near p: some drafts accepted, then a residual
# draw over the whole row -- the kernel's real work), plain and block verification.
VERIFY_QUICK = [(2, 3, 1000)]
VERIFY_FULL = [(2, 4, 16384), (2, 4, 32000), (2, 8, 65536), (2, 8, 184622)]
# (B, K, V, codes, code dim): verify_chain with GSD's grouping (bench/gsd_authors.py inputs: the
# authors' w 7, p 0.15, d 0.5 over an image range of that many codes)
GSD_QUICK = [(2, 3, 1000, 512, 8)]
GSD_FULL = [(2, 15, 65536, 8192, 256)]
# (rows, V): sample
SAMPLE_QUICK = [(4, 1000)]
SAMPLE_FULL = [(2, 16384), (2, 32000), (2, 65536), (2, 184622)]
# (label, rows (B, W), V, cfg_scale, top_k, top_p): the split path (probs_split.py: stats, radix
# levels with top-k, z, the top-p program with top-p, write), or with top-p and no top-k (or a
# top-k past TOPP_CAP) the row kernel (probs.py)
PROBS_QUICK = [
    ("tiny", (2, 2), 1000, 4.0, 50, 0.9),
    ("tiny", (2, 2), 1000, 4.0, 50, None),
    ("tiny", (2, 2), 1000, 4.0, None, 0.9),
]
PROBS_FULL = [
    ("Lumina", (1, 2), 65536, 4.0, 2000, None),
    ("Lumina", (1, 2), 65536, 4.0, 2000, 0.95),
    ("LlamaGen", (2,), 16384, 4.0, 2000, None),
    ("LLaVA", (1,), 32000, None, 50, 0.9),
    ("LLaVA", (1,), 32000, None, None, 0.9),
    ("Emu3", (1, 2), 184622, 3.0, 2000, None),
    ("Emu3", (1, 2), 184622, 3.0, 2000, 0.9),
]
_TOPP_CAP = 4096  # specops.triton_kernels.probs_split.TOPP_CAP: a larger top-k takes the row kernel
# (B, N, S, Hq, Hkv, D): tree_attention over a prefix of S - N committed tokens, contiguous and
# paged (page 16; paged only at S <= 1024: the interpreter takes ~40 s a layout at S = 4096);
# float16 (tl.dot is exact on it in the interpreter; the tiles and bytes of bfloat16)
ATTN_QUICK = [(1, 5, 512, 4, 2, 64)]  # S = 512: two prefix splits, so _merge_splits runs
ATTN_FULL = [
    (1, 16, 1024, 32, 8, 128),
    (1, 64, 1024, 32, 8, 64),
    (1, 16, 1024, 32, 32, 128),
    (1, 64, 4096, 32, 8, 128),
]
PAGE = 16
# append_kv (B, S, Hkv, D, N); commit_kv (layers, B, S, Hkv, D, m), bfloat16, contiguous + paged
APPEND_QUICK = [(2, 64, 2, 16, 4)]
APPEND_FULL = [(8, 4096, 8, 128, 16), (1, 4096, 8, 128, 1)]
COMMIT_QUICK = [(2, 1, 64, 2, 16, 4)]
COMMIT_FULL = [(32, 1, 256, 32, 128, 8), (32, 1, 256, 32, 128, 64)]
# features: drafter_inputs (B, M, V, E, H, S); gather_rows / FeatureCache.write (B, N, M, H);
# path_similarity (B, P, L, V, C, stride)
DRAFTER_QUICK = [(1, 4, 100, 16, 16, 4)]
DRAFTER_FULL = [(1, 16, 32000, 4096, 4096, 0), (2, 64, 16384, 1280, 1280, 128)]
ROWS_QUICK = [(1, 16, 4, 16)]
ROWS_FULL = [(2, 2048, 16, 1280), (4, 1024, 64, 4096)]
PATHS_QUICK = [(1, 3, 4, 50, 8, 1)]
PATHS_FULL = [(2, 16, 16, 16384, 8, 1), (2, 64, 32, 65536, 256, 2)]

# The launch geometry a GPU gets: on CPU tensors the launchers size grids for a few programs
# (tree_attention's prefix splits for 4 SMs, probs_split's chunks for 8 programs); counted
# traffic should be that of the GPU launch, so both see an H100/H200's 132 SMs while counting.
GPU_SMS = 132


@contextlib.contextmanager
def _gpu_geometry():
    from specops.triton_kernels import probs_split
    from specops.triton_kernels import tree_attention as ta

    old_sms, old_count = probs_split.INTERPRETER_SMS, ta._sm_count
    probs_split.INTERPRETER_SMS = GPU_SMS
    ta._sm_count = lambda device: GPU_SMS if device.type != "cuda" else old_count(device)
    try:
        yield
    finally:
        probs_split.INTERPRETER_SMS, ta._sm_count = old_sms, old_count


def _probs(shape, gen):
    from .inputs import probs  # (importing it imports no triton)

    return probs(shape, gen, "cpu")


def _randn(shape, dt, gen):
    import torch

    return torch.randn(*shape, dtype=dt, generator=gen)


def verify_inputs(b, k, v, gen):
    """(target p [B, K+1, V], drafts x [B, K], draft q [B, K, V]): drafts drawn from q close to p
    (bench/inputs.py), and a forced rejection: draft K // 2 of every request has target
    probability 0, so each request accepts at most K // 2 drafts and then draws from the
    residual of that row (the kernel's whole path: gathers, the rejection, the residual scan)."""
    import torch

    from .inputs import near

    p = _probs((b, k + 1, v), gen)
    q = near(p[:, :k], gen)
    x = torch.multinomial(q.reshape(-1, v), 1, generator=gen).reshape(b, k)
    p[torch.arange(b), k // 2, x[:, k // 2]] = 0.0
    p[:, k // 2] /= p[:, k // 2].sum(-1, keepdim=True)
    return p, x, q


def _verify_cases(specops, shapes, gsd, gen):
    for b, k, v in shapes:
        p, x, q = verify_inputs(b, k, v, gen)
        for block in (False, True):
            shape = f"B={b} K={k} V={v}" + (" block" if block else "")
            f = partial(specops.verify_chain, p, x, q, seed=1, block=block, backend="triton")
            yield "verify_chain", shape, f
    for b, k, v, codes, dim in gsd:  # (own seeds: the plain cases' inputs stay as they were)
        from .gsd_authors import chain_inputs

        p, x, q, relax, u = chain_inputs(b, k, v, vi=codes, c=dim)
        f = partial(specops.verify_chain, p, x, q, relax=relax, uniforms=u, backend="triton")
        yield "verify_chain", f"gsd B={b} K={k} V={v}", f


def _probs_cases(specops, cases, gen):
    import torch

    for label, rows, v, cfg, top_k, top_p in cases:
        logits = torch.randn(*rows, v, generator=gen) * 3
        unc = torch.randn(*rows, v, generator=gen) * 3 if cfg is not None else None
        split = top_p is None or (top_k is not None and top_k < min(v, _TOPP_CAP))
        path = "split" if split else "row"
        shape = f"{label} R={'x'.join(map(str, rows))} V={v} cfg={cfg} k={top_k} p={top_p} {path}"
        f = partial(specops.probs_from_logits, logits, temperature=1.0, top_k=top_k,
                    top_p=top_p, cfg_scale=cfg, uncond_logits=unc, backend="triton")  # fmt: skip
        yield "probs_from_logits", shape, f


def _attn_cases(specops, cases, gen):
    import torch
    from specops.triton_kernels.tree_attention import merge_states_triton

    from specops import Tree

    dt = torch.float16
    ta = partial(specops.tree_attention, backend="triton")
    for b, n, s, hq, hkv, d in cases:
        parents = torch.full((b, n), -1, dtype=torch.int32)
        for i in range(1, n):  # bushy and deep (bench_tree_attention's _random_tree)
            parents[:, i] = torch.randint(max(0, i - 4), i, (b,), generator=gen)
        tree = Tree.from_parents(parents)
        q, k, v = _randn((b, n, hq, d), dt, gen), *(_randn((b, s, hkv, d), dt, gen) for _ in "kv")
        lens = torch.full((b,), s - n, dtype=torch.int32)
        shape = f"B={b} N={n} S={s} H={hq}/{hkv} D={d}"
        yield "tree_attention", shape, partial(ta, q, k, v, lens, tree)
        if s > 1024:
            continue
        pages = b * s // PAGE
        bt = torch.randperm(pages, generator=gen).view(b, s // PAGE).int()
        kp = k.view(pages, PAGE, hkv, d)[bt.view(-1).argsort()]  # page bt[b, i] = rows of (b, i)
        vp = v.view(pages, PAGE, hkv, d)[bt.view(-1).argsort()]
        yield "tree_attention", f"{shape} page={PAGE}", partial(ta, q, kp, vp, lens, tree,
                                                                 block_table=bt)  # fmt: skip
    # the cascade backend's merge of a prefix and a tree state (that backend needs CUDA and
    # flash-attn: the kernel is launched directly here)
    b, n, s, hq, hkv, d = cases[0]
    oa, ob = (_randn((b, n, hq, d), dt, gen) for _ in "ab")
    la, lb = (torch.randn(b, n, hq, generator=gen) for _ in "ab")
    out, lse = torch.empty(b, n, hq, d, dtype=dt), torch.empty(b, n, hq)
    f = partial(merge_states_triton, oa, la, ob, lb, out, lse)
    yield "merge_states", f"B={b} N={n} H={hq} D={d}", f


def _kv_cases(specops, append, commit, gen):
    import torch

    dt = torch.bfloat16
    for b, cap, hkv, d, n in append:
        kc, vc = (torch.zeros(b, cap, hkv, d, dtype=dt) for _ in "kv")
        k, v = (_randn((b, n, hkv, d), dt, gen) for _ in "kv")
        lens = torch.randint(0, cap - n, (b,), generator=gen).int()
        bt = torch.randperm(b * cap // PAGE, generator=gen).view(b, cap // PAGE).int()
        kp, vp = (t.view(b * cap // PAGE, PAGE, hkv, d) for t in (kc, vc))
        shape = f"B={b} S={cap} Hkv={hkv} D={d} N={n}"
        ap = partial(specops.append_kv, backend="triton")
        yield "append_kv", shape, partial(ap, kc, vc, k, v, lens)
        yield "append_kv", f"{shape} page={PAGE}", partial(ap, kp, vp, k, v, lens, block_table=bt)
    for layers, b, cap, hkv, d, m in commit:
        caches = _randn((layers, 2, b, cap, hkv, d), dt, gen)
        lens0 = torch.full((b,), cap // 2, dtype=torch.int32)
        # a tree path: m strictly increasing offsets in the first 2m draft slots, slot 0 = root
        tail = [torch.randperm(2 * m - 1, generator=gen)[: m - 1].sort()[0] + 1 for _ in range(b)]
        slots = torch.stack([torch.cat([torch.zeros(1), t]) for t in tail]).int()
        shape = f"L={layers} B={b} S={cap} Hkv={hkv} D={d} m={m}"
        yield "commit_kv", shape, partial(specops.commit_kv, caches, lens0, slots, backend="triton")


def _feature_cases(specops, drafter, rows, paths, gen):
    import torch

    dt = torch.bfloat16
    for b, m, v, e, h, s in drafter:
        emb = _randn((v, e), dt, gen)
        tok = torch.randint(0, v, (b, m), generator=gen)
        feats = _randn((b, m, h), dt, gen)
        step = _randn((s,), dt, gen) if s else None
        f = partial(specops.drafter_inputs, emb, tok, feats, step, backend="triton")
        yield "drafter_inputs", f"B={b} M={m} V={v} E={e} H={h} S={s}", f
    for b, n, m, h in rows:
        src = _randn((b, n, h), dt, gen)
        idx = torch.stack([torch.randperm(n, generator=gen)[:m] for _ in range(b)])
        shape = f"B={b} N={n} M={m} H={h}"
        yield "gather_rows", shape, partial(specops.gather_rows, src, idx, backend="triton")
        cache = specops.FeatureCache(b, n, h, dtype=dt, backend="triton")
        yield "feature_cache_write", shape, partial(cache.write, idx, _randn((b, m, h), dt, gen), 3)
    for b, p, length, v, c, stride in paths:
        tok = torch.randint(0, v, (b, p, length), generator=gen)
        book = torch.randn(v, c, generator=gen)
        f = partial(specops.path_similarity, tok, book, stride=stride, backend="triton")
        yield "path_similarity", f"B={b} P={p} L={length} C={c} stride={stride}", f


def _sample_cases(specops, cases, gen):
    for b, v in cases:
        f = partial(specops.sample, _probs((b, v), gen), seed=3, backend="triton")
        yield "sample", f"B={b} V={v}", f


def _cases(quick: bool, gen):
    """Every case in table order.  Each family draws from ``gen`` reseeded for it (0, 1, ...), so
    a case added to one family leaves the other families' inputs, and their data-dependent
    counts (acceptance, masks), as they were."""
    import specops

    q = quick
    families = (
        _verify_cases(
            specops, VERIFY_QUICK if q else VERIFY_FULL, GSD_QUICK if q else GSD_FULL, gen
        ),
        _sample_cases(specops, SAMPLE_QUICK if q else SAMPLE_FULL, gen),
        _probs_cases(specops, PROBS_QUICK if q else PROBS_FULL, gen),
        _attn_cases(specops, ATTN_QUICK if q else ATTN_FULL, gen),
        _kv_cases(
            specops, APPEND_QUICK if q else APPEND_FULL, COMMIT_QUICK if q else COMMIT_FULL, gen
        ),  # fmt: skip
        _feature_cases(
            specops,
            DRAFTER_QUICK if q else DRAFTER_FULL,
            ROWS_QUICK if q else ROWS_FULL,
            PATHS_QUICK if q else PATHS_FULL,
            gen,
        ),  # fmt: skip
    )
    for seed, family in enumerate(families):
        gen.manual_seed(seed)  # (the generators have not started: nothing is drawn before this)
        yield from family


def count_triton_calls(
    quick: bool, *, only: Callable[[str, str], bool] | None = None, timings: dict | None = None
) -> Iterator[tuple[str, str, partial, object, list[KernelTraffic]]]:
    """(op, shape, call, result, launches) for every case (one op call) of the tables above, in
    order: ``call`` is the case's ``functools.partial`` (the op and its inputs, which
    bench_traffic's floors read), ``result`` what it returned, ``launches`` its KernelTraffic
    records.  ``only(op, shape)`` False skips a case (its inputs are made all the same, so the
    other cases get the inputs of the whole run).  A generator that yields inside the counting
    setup (no grad, validation off): consume it whole."""
    ensure_interpreter()
    import torch

    import specops

    gen = torch.Generator().manual_seed(0)
    with torch.no_grad(), specops.validation(False), _gpu_geometry():
        for op, shape, run in _cases(quick, gen):
            if only is not None and not only(op, shape):
                continue
            t0 = time.perf_counter()
            with count_traffic() as launches:
                result = run()
            if timings is not None:
                timings[(op, shape)] = time.perf_counter() - t0
            yield op, shape, run, result, launches


def count_triton_ops(
    quick: bool, *, timings: dict | None = None
) -> list[tuple[str, str, KernelTraffic]]:
    """(op, shape, KernelTraffic) for every launch of every specops Triton kernel, in launch
    order, on CPU tensors in the interpreter (``quick``: tiny shapes; else the served models'
    vocabularies / head dims at few rows, see the tables above).  ``timings``, when given,
    receives the seconds each (op, shape) took."""
    return [
        (op, shape, t)
        for op, shape, _, _, launches in count_triton_calls(quick, timings=timings)
        for t in launches
    ]


def format_table(rows) -> str:
    """A plain table of ``count_triton_ops`` rows."""
    out = [f"{'op':<20} {'kernel':<22} {'shape':<52} {'read':>10} {'written':>9} "
           f"{'sec/req':>7} {'ctas':>5} {'work':>5} {'crit':>9} {'bar':>4}"]  # fmt: skip
    for op, shape, t in rows:
        out.append(
            f"{op:<20} {t.kernel:<22} {shape:<52} {t.bytes_read:>10} {t.bytes_written:>9} "
            f"{t.sectors_per_request:>7.2f} {t.ctas:>5} {t.ctas_with_work:>5} "
            f"{t.critical_cta_bytes:>9} {t.barriers:>4}"
        )
    return "\n".join(out)


NOTES = """\
What the Triton counts approximate (against a GPU running the compiled kernel):
- lanes: a program's block is walked in row-major order and every 32 active elements form one
  request.  The compiled kernel maps elements to threads by its layout: with a vector width of
  4 fp32 (16-byte loads) one warp covers 128 contiguous elements in one request (16 sectors);
  here that is 4 requests of 4 sectors.  Sectors and bytes agree; requests (and
  sectors_per_request) follow the 32-lane rule of traffic_common, not the vector width.
- masked lanes are dropped before grouping: a mask with holes (every other lane) packs the
  active lanes densely, where a GPU warp keeps its holes (more requests, fewer sectors each).
- a scalar load is one request of one lane; on a GPU every warp of the program issues it
  (num_warps requests, same sector, mostly L1 hits).
- no caches: a byte read twice counts twice (L1/L2 hits on a GPU), and bytes a GPU would stage
  through shared memory (tl.dot operands) count as the global loads the program asks for.
- barriers: only tl.debug_barrier; the barriers the compiler inserts (reductions across warps,
  layout conversions through shared memory) are not visible in the interpreter.
- grids: tree_attention's prefix splits and probs_split's chunks are sized for a 132-SM GPU
  (_gpu_geometry); probs' top-p tile (PBLOCK) is the interpreter's (the whole BLOCK), not the
  GPU's 8192 / NPIV.
"""


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    timings: dict = {}
    t0 = time.perf_counter()
    rows = count_triton_ops(args.quick, timings=timings)
    print(format_table(rows))
    print(f"\n{len(rows)} launches in {time.perf_counter() - t0:.1f} s")
    for (op, shape), s in timings.items():
        print(f"  {s:7.2f} s  {op} {shape}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

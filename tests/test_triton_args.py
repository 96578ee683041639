"""The Python-to-Triton boundary (DESIGN.md, Rules: Layout; issue #14).

- every launcher launches through ``specops.triton_kernels._args.launch`` (no bare
  ``kernel[grid](...)``), which refuses a non-contiguous tensor passed without its strides;
- sliced, transposed and expanded (stride 0) views of every tensor a Triton op reads (seeds,
  offsets, uniforms, lengths, block tables, step stamps, ...) give the results of their
  contiguous copies; out buffers that cannot be written are a ValueError;
- caches of per-call values are keyed on everything the value depends on;
- no kernel touches memory outside its tensor arguments, also for the lanes that are masked out
  of the result: ``bounds`` runs the interpreter with every active lane of every load, store and
  atomic checked against the extents of the launch's tensor arguments;
- edge sizes (B, N, M, Hkv, D, S, P, page = 0) agree with the reference on every backend.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch

import specops
from specops import reference

pytest.importorskip("triton")
if torch.cuda.is_available():  # pragma: no cover - the harness patches the CPU interpreter
    pytest.skip("the bounds harness needs the Triton interpreter", allow_module_level=True)

from specops.triton_kernels import _args  # noqa: E402
from triton.runtime import interpreter as interp  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


# the bounds-checking interpreter -----------------------------------------------------------
def _extent(t: torch.Tensor):
    """[lo, hi) bytes spanned by a tensor's elements (None when empty)."""
    if t.numel() == 0:
        return None
    es = t.element_size()
    lo = hi = t.data_ptr()
    for size, stride in zip(t.shape, t.stride()):
        if stride >= 0:
            hi += (size - 1) * stride * es
        else:
            lo += (size - 1) * stride * es
    return lo, hi + es


class Bounds:
    """Active lanes of loads/stores/atomics must fall inside a tensor argument of the running
    launch (or a tensor ``allow``ed by the test: the list form of commit_kv reads every layer's
    slab through offsets from the first).  A violating access is recorded and skipped."""

    def __init__(self):
        self.launch_ranges: list[tuple[int, int]] = []
        self.extra: list[tuple[int, int]] = []
        self.violations: list[str] = []
        self.accesses = 0

    def allow(self, *tensors):
        for t in tensors:
            e = _extent(t)
            if e is not None:
                self.extra.append(e)

    def check(self, what, ptrs, mask, elem_ty) -> np.ndarray:
        """The mask with violating lanes cleared (recorded)."""
        addr = np.asarray(ptrs.data).astype(np.uint64)
        active = np.ones(addr.shape, bool) if mask is None else np.asarray(mask.data).astype(bool)
        active = np.broadcast_to(active, addr.shape)
        size = np.dtype(interp._get_np_dtype(elem_ty)).itemsize
        ok = np.zeros(addr.shape, bool)
        for lo, hi in self.launch_ranges + self.extra:
            ok |= (addr >= lo) & (addr + size <= hi)
        bad = active & ~ok
        self.accesses += int(active.sum())
        if bad.any():
            self.violations.append(f"{what}: {int(bad.sum())} lane(s) outside every argument")
        return active & ok


@pytest.fixture
def bounds(monkeypatch):
    b = Bounds()
    init = interp.GridExecutor._init_args_hst

    def init_args(self, args_dev, kwargs):
        args_hst, kwargs_hst = init(self, args_dev, kwargs)
        b.launch_ranges = []
        for a in list(args_hst) + list(kwargs_hst.values()):
            t = a if isinstance(a, torch.Tensor) else getattr(a, "base", None)
            if isinstance(t, torch.Tensor) and (e := _extent(t)) is not None:
                b.launch_ranges.append(e)
        return args_hst, kwargs_hst

    builder = interp.InterpreterBuilder
    load, store, rmw, cas = (
        builder.create_masked_load,
        builder.create_masked_store,
        builder.create_atomic_rmw,
        builder.create_atomic_cas,
    )

    def masked_load(self, ptrs, mask, other, *rest):
        keep = b.check("load", ptrs, mask, ptrs.get_element_ty())
        return load(self, ptrs, interp.TensorHandle(keep, mask.dtype), other, *rest)

    def masked_store(self, ptrs, value, mask, *rest):
        keep = b.check("store", ptrs, mask, ptrs.get_element_ty())
        return store(self, ptrs, value, interp.TensorHandle(keep, mask.dtype), *rest)

    def atomic_rmw(self, op, ptr, val, mask, *rest):
        keep = b.check("atomic", ptr, mask, ptr.get_element_ty())
        return rmw(self, op, ptr, val, interp.TensorHandle(keep, mask.dtype), *rest)

    def atomic_cas(self, ptr, cmp, val, *rest):
        b.check("atomic_cas", ptr, None, ptr.get_element_ty())
        return cas(self, ptr, cmp, val, *rest)

    monkeypatch.setattr(interp.GridExecutor, "_init_args_hst", init_args)
    monkeypatch.setattr(builder, "create_masked_load", masked_load)
    monkeypatch.setattr(builder, "create_masked_store", masked_store)
    monkeypatch.setattr(builder, "create_atomic_rmw", atomic_rmw)
    monkeypatch.setattr(builder, "create_atomic_cas", atomic_cas)
    yield b
    assert not b.violations, b.violations[:5]


def test_bounds_harness_catches_an_out_of_bounds_read(bounds):
    """The harness itself: a kernel reading one element past its argument is caught."""
    import triton
    import triton.language as tl

    @triton.jit
    def _past_the_end(x, out, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(out + i, tl.load(x + i + 1))

    x = torch.arange(4, dtype=torch.float32)
    out = torch.zeros(4)
    _past_the_end[(1,)](x, out, N=4)
    assert bounds.violations == ["load: 1 lane(s) outside every argument"]
    assert bounds.accesses == 8 and torch.equal(out, torch.tensor([1.0, 2.0, 3.0, 0.0]))
    bounds.violations.clear()


# every launch through _args.launch ----------------------------------------------------------
def test_every_launcher_goes_through_args_launch():
    offenders = []
    for path in sorted((ROOT / "triton_kernels").glob("*.py")):
        if path.name == "_args.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            # kernel[grid](...): a call of a subscript
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
                offenders.append(f"{path.name}:{node.lineno}: {ast.unparse(node.func)}")
    assert not offenders, "launch Triton kernels through _args.launch:\n" + "\n".join(offenders)


def test_launch_refuses_a_non_contiguous_bare_tensor():
    import triton
    import triton.language as tl

    @triton.jit
    def _copy(x, out, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(out + i, tl.load(x + i))

    x = torch.arange(8, dtype=torch.float32)
    out = torch.zeros(4)
    with pytest.raises(ValueError, match="'x' of _copy is a non-contiguous tensor"):
        _args.launch(_copy, (1,), x[::2], out, N=4)
    _args.launch(_copy, (1,), _args.Strided(x[::2]), out, N=4)  # the launcher takes the blame
    _args.launch(_copy, (1,), x[::2].contiguous(), out, N=4)
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0]


# hostile layouts ---------------------------------------------------------------------------
def _strided(t: torch.Tensor) -> torch.Tensor:
    """The same values as a non-contiguous view (every other element of a bigger buffer, filled
    with garbage in between)."""
    if t.dim() == 0:
        big = torch.full((3,), -777, dtype=t.dtype)
        big[1] = t
        return big[1]
    big = torch.full((*t.shape[:-1], 2 * t.shape[-1] + 1), -7, dtype=t.dtype)
    if t.is_floating_point():
        big.fill_(float("nan"))
    view = big[..., 1::2]
    view.copy_(t)
    return view


def _expanded(value: torch.Tensor, n: int) -> torch.Tensor:
    """n copies of a scalar as a stride-0 view."""
    return value.reshape(1).expand(n)


def test_sample_strided_seed_offset_uniforms_out(bounds):
    g = torch.Generator().manual_seed(0)
    b, v = 5, 37
    probs = torch.rand(b, v, generator=g)
    seeds = torch.randint(0, 2**40, (b,), generator=g)
    off = torch.tensor([3], dtype=torch.int64)
    want = specops.sample(probs, seed=seeds, offset=off, backend="reference")
    for seed in (_strided(seeds), torch.stack([seeds, seeds], 1)[:, 1]):
        for offset in (_strided(off), torch.tensor([9, 3])[1:]):
            got = specops.sample(probs, seed=seed, offset=offset, backend="triton")
            assert torch.equal(got, want)
    # expanded seed: one seed for every request, read as such
    one = torch.tensor(1234, dtype=torch.int64)
    want = specops.sample(probs, seed=one.reshape(1).repeat(b), offset=5, backend="reference")
    got = specops.sample(probs, seed=_expanded(one, b), offset=5, backend="triton")
    assert torch.equal(got, want)
    # uniforms: sliced and expanded
    u = torch.rand(b, generator=g)
    want = specops.sample(probs, uniforms=u, backend="reference")
    assert torch.equal(specops.sample(probs, uniforms=_strided(u), backend="triton"), want)
    u0 = torch.tensor(0.3)
    want = specops.sample(probs, uniforms=u0.repeat(b), backend="reference")
    assert torch.equal(specops.sample(probs, uniforms=_expanded(u0, b), backend="triton"), want)
    # out: a strided view is written in place; an expanded one is refused
    out = _strided(torch.zeros(b, dtype=torch.int32))
    specops.sample(probs, uniforms=u, backend="triton", out=out)
    assert torch.equal(out, specops.sample(probs, uniforms=u, backend="reference"))
    with pytest.raises(ValueError, match="out has overlapping elements"):
        specops.sample(probs, backend="triton", out=torch.zeros(1, dtype=torch.int32).expand(b))


def test_sample_triton_launcher_strided_out(bounds):
    """The launcher on its own (no public-layer normalisation) writes a strided out in place."""
    from specops.triton_kernels.sample import sample_triton

    g = torch.Generator().manual_seed(1)
    p = torch.rand(4, 11, generator=g)
    u = torch.rand(4, generator=g)
    want = reference.sample(p, uniforms=u)
    out = _strided(torch.zeros(4, dtype=torch.int32))
    sample_triton(p, None, 0, 4, None, 0, _strided(u), out)
    assert torch.equal(out, want)
    with pytest.raises(ValueError, match="overlapping"):
        sample_triton(p, None, 0, 4, None, 0, u, torch.zeros(1, dtype=torch.int32).expand(4))


def test_verify_chain_strided_seed_uniforms_and_counts(bounds):
    g = torch.Generator().manual_seed(2)
    b, k, v = 4, 3, 19
    target = torch.rand(b, k + 1, v, generator=g)
    draft = torch.rand(b, k, v, generator=g)
    tokens = torch.randint(0, v, (b, k), generator=g)
    num = torch.tensor([3, 1, 0, 2])
    seeds = torch.randint(0, 2**40, (b,), generator=g)
    kw = dict(num_draft=num, offset=torch.tensor(4))
    want = specops.verify_chain(target, tokens, draft, seed=seeds, backend="reference", **kw)
    got = specops.verify_chain(
        _strided(target),
        tokens.t().contiguous().t(),
        _strided(draft),
        seed=_strided(seeds),
        num_draft=_strided(num),
        offset=_strided(torch.tensor(4)),
        backend="triton",
    )
    assert torch.equal(got.tokens, want.tokens) and torch.equal(got.num_accepted, want.num_accepted)
    one = torch.tensor(77, dtype=torch.int64)
    want = specops.verify_chain(target, tokens, draft, seed=one.repeat(b), backend="reference")
    got = specops.verify_chain(target, tokens, draft, seed=_expanded(one, b), backend="triton")
    assert torch.equal(got.tokens, want.tokens)
    u = torch.rand(b, k + 1, generator=g)
    want = specops.verify_chain(target, tokens, draft, uniforms=u, backend="reference")
    got = specops.verify_chain(target, tokens, draft, uniforms=_strided(u), backend="triton")
    assert torch.equal(got.tokens, want.tokens)


def test_probs_strided_parameters_logits_and_out(bounds):
    g = torch.Generator().manual_seed(3)
    b, v = 3, 29
    logits = torch.randn(b, v, generator=g)
    uncond = torch.randn(b, v, generator=g)
    temp = torch.tensor([0.7, 1.0, 1.3])
    top_k = torch.tensor([5, 0, 9], dtype=torch.int32)
    top_p = torch.tensor([0.9, 0.5, 1.0])
    scale = torch.tensor([1.5, 2.0, 1.0])
    kw = dict(temperature=temp, top_k=top_k, top_p=top_p, cfg_scale=scale)
    want = specops.probs_from_logits(logits, uncond_logits=uncond, backend="reference", **kw)
    strided = {name: _strided(t) for name, t in kw.items()}
    got = specops.probs_from_logits(
        logits.t().contiguous().t(), uncond_logits=_strided(uncond), backend="triton", **strided
    )
    torch.testing.assert_close(got, want)
    # expanded parameters
    one = dict(temperature=torch.tensor(0.8), top_k=torch.tensor(4), top_p=torch.tensor(0.7))
    want = specops.probs_from_logits(
        logits, backend="reference", **{n: t.reshape(1).repeat(b) for n, t in one.items()}
    )
    got = specops.probs_from_logits(
        logits, backend="triton", **{n: _expanded(t, b) for n, t in one.items()}
    )
    torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match="out must be contiguous"):
        specops.probs_from_logits(logits, backend="triton", out=torch.zeros(v, b).t())


def test_probs_triton_launcher_checks_out(bounds):
    from specops.triton_kernels.probs import probs_triton

    logits = torch.randn(2, 8)
    out = torch.zeros(2, 17)[:, ::2]  # row stride 17, column stride 2: not addressable
    with pytest.raises(ValueError, match="contiguous last dim"):
        probs_triton(logits, None, 1.0, None, None, None, 1, out)
    out = torch.zeros(2, 9)[:, 1:]  # row stride 9, unit column stride: written in place
    probs_triton(logits, None, 1.0, None, None, None, 1, out)
    torch.testing.assert_close(out, torch.softmax(logits, -1))


# kv ----------------------------------------------------------------------------------------
def _paged_case(g, b=3, page=4, width=4, hkv=2, d=8, layers=2, dtype=torch.float32):
    num_pages = b * width + 1
    caches = torch.randn(layers, 2, num_pages, page, hkv, d, generator=g).to(dtype)
    bt = torch.randperm(num_pages, generator=g)[: b * width].view(b, width).to(torch.int32)
    return caches, bt


def test_commit_kv_paged_reads_no_block_table_entry_past_the_moves(bounds):
    """Full caches (cs + m = capacity) and rows with m < M: the lanes past the moves would read
    block-table entries past the row (past the table for the last request).  The table is a view
    of a bigger buffer whose other entries are garbage page ids."""
    g = torch.Generator().manual_seed(4)
    caches, bt = _paged_case(g)
    cap = bt.shape[1] * caches.shape[3]
    big = torch.full((bt.shape[0] + 2, 2 * bt.shape[1]), 10**6, dtype=torch.int32)
    big[1 : 1 + bt.shape[0], : bt.shape[1]] = bt
    bt_view = big[1 : 1 + bt.shape[0], : bt.shape[1]]
    cs = torch.tensor([2, cap - 1, cap - 3], dtype=torch.int32)
    slots = torch.tensor([[1, 4, 6, 9], [0, -1, -1, -1], [0, 1, 2, -1]], dtype=torch.int32)
    want_c, want_cs = caches.clone(), cs.clone()
    reference.commit_kv(want_c, want_cs, slots, block_table=bt)
    got_c, got_cs = caches.clone(), cs.clone()
    specops.commit_kv(got_c, got_cs, slots, block_table=bt_view, backend="triton")
    assert torch.equal(got_cs, want_cs) and torch.equal(got_c, want_c)
    assert got_cs.tolist() == [6, cap, cap]


def test_commit_kv_strided_block_table_and_slots(bounds):
    g = torch.Generator().manual_seed(5)
    caches, bt = _paged_case(g)
    cs = torch.tensor([1, 0, 5], dtype=torch.int32)
    slots = torch.tensor([[0, 2, 3], [1, -1, -1], [0, 1, 2]])
    want_c, want_cs = caches.clone(), cs.clone()
    reference.commit_kv(want_c, want_cs, slots, block_table=bt)
    for table in (_strided(bt), bt.t().contiguous().t()):
        got_c, got_cs = caches.clone(), cs.clone()
        specops.commit_kv(got_c, got_cs, _strided(slots), block_table=table, backend="triton")
        assert torch.equal(got_cs, want_cs) and torch.equal(got_c, want_c)
    with pytest.raises(ValueError, match="cache_seqlens must be contiguous"):
        specops.commit_kv(caches, _strided(cs), slots, block_table=bt, backend="triton")


def test_commit_kv_list_offsets_cache_is_keyed_on_the_element_size(bounds):
    """The same slab addresses seen first as float32 then as float16: the per-layer offsets (in
    elements) must not be reused across element sizes."""
    g = torch.Generator().manual_seed(6)
    layers, b, s, hkv, d = 2, 2, 12, 2, 4
    store = torch.randn(2 * layers + 1, b, s, hkv, d, generator=g)
    cs = torch.tensor([1, 3], dtype=torch.int32)
    slots = torch.tensor([[0, 2, 4], [1, 3, -1]], dtype=torch.int32)
    for dtype in (torch.float32, torch.float16):
        view = store.view(dtype)  # float16: last dim 2 d, same addresses
        pairs = [(view[2 * i + 1], view[2 * i + 2]) for i in range(layers)]
        bounds.allow(*[t for p in pairs for t in p])
        want_pairs = [(k.clone(), v.clone()) for k, v in pairs]
        want_cs = cs.clone()
        reference.commit_kv(want_pairs, want_cs, slots)
        before = store.clone()
        got_cs = cs.clone()
        specops.commit_kv(pairs, got_cs, slots, backend="triton")
        assert torch.equal(got_cs, want_cs)
        bits = torch.int16 if dtype == torch.float16 else torch.int32  # float16 bits hold NaNs
        for (k, v), (wk, wv) in zip(pairs, want_pairs):
            assert torch.equal(k.view(bits), wk.view(bits))
            assert torch.equal(v.view(bits), wv.view(bits))
        assert torch.equal(store[0], before[0])  # the slab before the first is untouched
        store.copy_(before)


@pytest.mark.parametrize("backend", ["reference", "cpu", "triton"])
@pytest.mark.parametrize(
    "case", ["hkv0", "d0", "s0", "b0", "m0", "layers0", "p0", "page0", "cols0"]
)
def test_commit_kv_edge_sizes_advance_like_the_reference(backend, case):
    """Caches without elements move nothing, but cache_seqlens advances exactly as the reference
    counts m; no layer or no slot: nothing advances."""
    layers, b, s, hkv, d, m = 2, 2, 8, 2, 4, 3
    bt = None
    if case == "hkv0":
        hkv = 0
    elif case == "d0":
        d = 0
    elif case == "s0":
        s = 0
    elif case == "b0":
        b = 0
    elif case == "m0":
        m = 0
    elif case == "layers0":
        layers = 0
    shape = [layers, 2, b, s, hkv, d]
    if case in ("p0", "page0", "cols0"):
        pages, page, cols = {"p0": (0, 4, 2), "page0": (3, 0, 2), "cols0": (3, 4, 0)}[case]
        shape = [layers, 2, pages, page, hkv, d]
        bt = torch.zeros(b, cols, dtype=torch.int32)
    caches = torch.zeros(shape)
    cs = torch.tensor([1, 2][:b], dtype=torch.int32)
    slots = torch.tensor([[0, 2, 3], [1, -1, -1]], dtype=torch.int32)[:b, :m]
    want = cs.clone()
    if layers:
        with specops.validation(False):
            specops.commit_kv(caches.clone(), want, slots, block_table=bt, backend="reference")
    expect = {"hkv0": [4, 3], "d0": [4, 3], "b0": [], "m0": [1, 2], "layers0": [1, 2]}
    assert want.tolist() == expect.get(case, [1, 2])
    with specops.validation(False):
        got = cs.clone()
        if layers:
            specops.commit_kv(caches, got, slots, block_table=bt, backend=backend)
            assert torch.equal(got, want)
        if caches.shape[0]:
            got = cs.clone()
            pairs = [(caches[i, 0], caches[i, 1]) for i in range(layers)]
            specops.commit_kv(pairs, got, slots, block_table=bt, backend=backend)
            assert torch.equal(got, want)


# attention ---------------------------------------------------------------------------------
def _attn_case(g, b=3, n=5, hq=4, hkv=2, d=16, page=4, width=6, paged=True):
    from specops import Tree

    q = torch.randn(b, n, hq, d, generator=g)
    if paged:
        num_pages = b * width + 1
        kc = torch.randn(num_pages, page, hkv, d, generator=g)
        bt = torch.randperm(num_pages, generator=g)[: b * width].view(b, width).to(torch.int32)
        cap = width * page
    else:
        cap = page * width
        kc = torch.randn(b, cap, hkv, d, generator=g)
        bt = None
    vc = torch.randn(kc.shape, generator=g)
    cs = torch.randint(0, cap - n + 1, (b,), generator=g, dtype=torch.int32)
    parents = torch.tensor([-1, 0, 0, 1, 2][:n])
    tree = Tree.from_parents(parents)
    return q, kc, vc, cs, tree, bt


@pytest.mark.parametrize("paged", [True, False])
def test_tree_attention_strided_lengths_table_mask_and_caches(bounds, paged):
    g = torch.Generator().manual_seed(7)
    q, kc, vc, cs, tree, bt = _attn_case(g, paged=paged)
    mask = tree.mask_bits
    want = specops.tree_attention(
        q, kc, vc, cs, mask, block_table=bt, return_lse=True, backend="reference"
    )
    got = specops.tree_attention(
        _strided(q), _strided(kc), _strided(vc), _strided(cs), mask.expand(q.shape[0], -1, -1),
        block_table=None if bt is None else bt.t().contiguous().t(),
        return_lse=True, backend="triton",
    )  # fmt: skip
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    # one length for every request, as a stride-0 view
    one = cs[:1].clone()
    want = specops.tree_attention(q, kc, vc, one.repeat(3), mask, block_table=bt,
                                  backend="reference")  # fmt: skip
    got = specops.tree_attention(q, kc, vc, one.expand(3), mask, block_table=bt, backend="triton")
    torch.testing.assert_close(got, want)


def test_tree_attention_block_table_inside_a_bigger_buffer(bounds):
    """Trailing entries of each table row (past the capacity the kernel uses) are garbage."""
    g = torch.Generator().manual_seed(8)
    q, kc, vc, cs, tree, bt = _attn_case(g)
    big = torch.full((bt.shape[0], bt.shape[1] + 3), 10**6, dtype=torch.int32)
    big[:, : bt.shape[1]] = bt
    want = specops.tree_attention(q, kc, vc, cs, tree, block_table=bt, backend="reference")
    got = specops.tree_attention(
        q, kc, vc, cs, tree, block_table=big[:, : bt.shape[1]], backend="triton"
    )
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("paged", [True, False])
def test_append_kv_strided_lengths_table_and_caches(bounds, paged):
    g = torch.Generator().manual_seed(9)
    q, kc, vc, cs, tree, bt = _attn_case(g, paged=paged)
    k = torch.randn(q.shape[0], q.shape[1], kc.shape[2], kc.shape[3], generator=g)
    v = torch.randn(k.shape, generator=g)
    want_k, want_v = kc.clone(), vc.clone()
    specops.append_kv(want_k, want_v, k, v, cs, block_table=bt, backend="reference")
    got_k, got_v = _strided(kc), _strided(vc)
    specops.append_kv(
        got_k, got_v, _strided(k), v.transpose(0, 1).contiguous().transpose(0, 1),
        _strided(cs), block_table=None if bt is None else _strided(bt), backend="triton",
    )  # fmt: skip
    assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v)


def test_append_kv_rows_outside_the_cache_read_no_block_table(bounds):
    """Rows past the capacity are dropped without reading the block table for them."""
    g = torch.Generator().manual_seed(10)
    q, kc, vc, cs, tree, bt = _attn_case(g)
    cap = bt.shape[1] * kc.shape[1]
    cs = torch.tensor([cap - 2, cap, cap + 7], dtype=torch.int32)
    k = torch.randn(q.shape[0], q.shape[1], kc.shape[2], kc.shape[3], generator=g)
    want_k, want_v = kc.clone(), vc.clone()
    with specops.validation(False):
        specops.append_kv(want_k, want_v, k, k, cs, block_table=bt, backend="reference")
        got_k, got_v = kc.clone(), vc.clone()
        specops.append_kv(got_k, got_v, k, k, cs, block_table=bt, backend="triton")
    assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v)


_ATTN_EDGES = {
    "b0": dict(b=0),
    "n0": dict(n=0),
    "d0": dict(d=0),
    "hkv0": dict(hq=0, hkv=0),
    "s0": dict(s=0),
    "p0": dict(paged=(0, 4, 2)),
    "page0": dict(paged=(2, 0, 2)),
    "cols0": dict(paged=(2, 4, 0)),
}


def _edge_inputs(b=2, n=3, hq=2, hkv=2, d=4, s=8, paged=None):
    g = torch.Generator().manual_seed(11)
    q = torch.randn(b, n, hq, d, generator=g)
    if paged is None:
        kc, bt = torch.randn(b, s, hkv, d, generator=g), None
    else:
        pages, page, cols = paged
        kc = torch.randn(pages, page, hkv, d, generator=g)
        bt = torch.zeros(b, cols, dtype=torch.int32)
    vc = torch.randn(kc.shape, generator=g)
    k = torch.randn(b, n, hkv, d, generator=g)
    mask = torch.full((1, n, max(1, (n + 31) // 32)), -1, dtype=torch.int32)
    return q, kc, vc, torch.zeros(b, dtype=torch.int32), mask, bt, k


def _outcome(fn, backend):
    try:
        return fn(backend)
    except ValueError as e:
        return ("ValueError", str(e))


@pytest.mark.parametrize("case", sorted(_ATTN_EDGES))
def test_attention_edge_sizes_agree_with_the_reference(case, bounds):
    def attn(backend):
        q, kc, vc, cs, mask, bt, _ = _edge_inputs(**_ATTN_EDGES[case])
        with specops.validation(False):
            return specops.tree_attention(
                q, kc, vc, cs, mask, block_table=bt, return_lse=True, backend=backend
            )

    def append(backend):
        q, kc, vc, cs, mask, bt, k = _edge_inputs(**_ATTN_EDGES[case])
        with specops.validation(False):
            specops.append_kv(kc, vc, k, -k, cs, block_table=bt, backend=backend)
        return kc, vc

    for fn in (attn, append):
        want, got = _outcome(fn, "reference"), _outcome(fn, "triton")
        if isinstance(want, tuple) and want[0] == "ValueError":
            assert got == want
        else:
            for w, o in zip(want, got):
                assert w.shape == o.shape
                torch.testing.assert_close(o, w)


# features ----------------------------------------------------------------------------------
def test_gather_and_drafter_inputs_strided(bounds):
    g = torch.Generator().manual_seed(12)
    b, n, m, h, v, e, s = 2, 6, 4, 5, 9, 3, 2
    src = torch.randn(b, n, h, generator=g)
    index = torch.tensor([[0, 5, -1, 2], [3, 3, 1, 0]])
    want = reference.gather_rows(src, index)
    got = specops.gather_rows(_strided(src), _strided(index), backend="triton")
    assert torch.equal(got, want)
    emb = torch.randn(v, e, generator=g)
    tokens = torch.randint(-1, v, (b, m), generator=g)
    feats = torch.randn(b, m, h, generator=g)
    step = torch.randn(s, generator=g)
    want = reference.drafter_inputs(emb, tokens, feats, step.expand(b, m, s))
    got = specops.drafter_inputs(
        _strided(emb), _strided(tokens), _strided(feats), step.expand(b, m, s), backend="triton"
    )
    assert torch.equal(got, want)
    got = specops.drafter_inputs(emb, tokens, feats, _strided(step), backend="triton")
    assert torch.equal(got, want)


def test_feature_cache_strided_step_positions_and_feats(bounds):
    g = torch.Generator().manual_seed(13)
    b, cap, h, m = 3, 7, 4, 3
    pos = torch.tensor([[0, 3, -1], [6, 1, 2], [5, -1, -1]])
    feats = torch.randn(b, m, h, generator=g)
    steps = torch.tensor([4, 9, 2])
    for step, want_step in ((_strided(steps), steps), (_expanded(torch.tensor(5), b), 5)):
        want = specops.FeatureCache(b, cap, h, backend="reference")
        want.write(pos, feats, step=want_step)
        got = specops.FeatureCache(b, cap, h, backend="triton")
        got.write(_strided(pos), _strided(feats), step=step)
        assert torch.equal(got.stamps, want.stamps) and torch.equal(got.features, want.features)
        assert torch.equal(got.read(_strided(pos)), want.read(pos))


def test_feature_cache_write_into_strided_store_and_stamps(bounds):
    """The registered op writes the store and the stamps through their own strides."""
    g = torch.Generator().manual_seed(14)
    b, cap, h = 2, 5, 3
    pos = torch.tensor([[0, 4], [2, -1]])
    feats = torch.randn(b, 2, h, generator=g)
    store_w, stamps_w = torch.zeros(b, cap, h), torch.full((b, cap), -1, dtype=torch.int32)
    reference.feature_cache_write(store_w, stamps_w, pos, feats, torch.tensor([3, 8]))
    store = torch.zeros(h, cap, b).permute(2, 1, 0)
    stamps = _strided(torch.full((b, cap), -1, dtype=torch.int32))
    torch.ops.specops.feature_cache_write(
        store, stamps, pos, feats, _strided(torch.tensor([3, 8])), 0, "triton"
    )
    assert torch.equal(store, store_w) and torch.equal(stamps, stamps_w)


def test_path_similarity_strided(bounds):
    g = torch.Generator().manual_seed(15)
    paths = torch.randint(0, 11, (2, 3, 5), generator=g)
    codebook = torch.randn(11, 6, generator=g)
    want = reference.path_similarity(paths, codebook, alpha=0.8, stride=2)
    got = specops.path_similarity(
        _strided(paths), codebook.t().contiguous().t(), alpha=0.8, stride=2, backend="triton"
    )
    torch.testing.assert_close(got, want)

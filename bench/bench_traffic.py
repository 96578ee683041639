"""specops bench --ops traffic: every CUDA kernel (counted through cuda_sim) and every Triton
kernel (counted under the interpreter) at the bench shapes, one CSV line each (issue 36;
docs/gpu_cost.md):

    traffic,op,backend,kernel,shape,bytes_read,bytes_written,min_bytes,sectors_per_request,
    ctas,ctas_with_work,critical_cta_bytes,barriers_per_cta,predicted_us

``min_bytes`` is the op's own floor (``FLOORS``, one formula per op, the same in
docs/gpu_cost.md); ``predicted_us`` the time model of bench/traffic_model.py.  Inputs make the
kernels do their real work: drafts are rejected at random positions (bench/inputs.py),
the SJD-PAC case is bench_jacobi's "sjd_pac root" input.  Counting runs on the CPU whatever
``--device`` says; quick mode takes tiny shapes."""

from __future__ import annotations

import torch

import specops
from specops import Tree

from . import inputs, traffic_cuda, traffic_model
from .harness import Row
from .inputs import draw as _draw
from .inputs import near as _near
from .traffic_common import CSV_FIELDS, KernelTraffic, csv_row

F32 = 4


# ---- the ops' floors: the bytes no kernel of the op can avoid moving ---------------------------
def _chain_floor(p, x, q, r) -> int:
    """verify_chain: p(x_i) and q(x_i) (4 bytes each) for each tested draft, the rows read to
    draw the token after the accepted prefix (p's and q's at a rejection, p's bonus row
    otherwise), the outputs."""
    b, k1, v = p.shape
    rows = 0
    for a in r.num_accepted.tolist():
        tested = min(a + 1, k1 - 1)
        rows += tested * (2 if q is not None else 1) * F32
        rows += (2 if (a < k1 - 1 and q is not None) else 1) * v * F32
    return rows + b * (k1 + 1) * F32


def _greedy_floor(p, r) -> int:
    """verify_chain, greedy: the rows whose argmax the walk needs (the accepted drafts' and the
    one after them), the drafts, the outputs."""
    b, k1, v = p.shape
    rows = sum(a + 1 for a in r.num_accepted.tolist())
    return rows * v * F32 + b * (k1 - 1) * 8 + b * (k1 + 1) * F32


def _greedy_tree_floor(p, r) -> int:
    """verify_tree, greedy: the rows of the accepted path's nodes (root included, whose argmax
    the walk compares), the tokens, the outputs."""
    b, n, v = p.shape
    rows = sum(a + 1 for a in r.num_accepted.tolist())
    return rows * v * F32 + b * n * 8 + b * r.tokens.shape[1] * 2 * F32 + b * F32


def _gsd_floor(p, x, q, r) -> int:
    """verify_chain with GSD's grouping: each tested draft's whole p row (its window is the
    nearest keys in the row's order, so every entry is compared), q(x_i), and the chain's rows
    for the final token and outputs; the window members' q and codes are not counted."""
    b, k1, v = p.shape
    tested = sum(min(a + 1, k1 - 1) for a in r.num_accepted.tolist())
    return _chain_floor(p, x, q, r) + tested * (v - 1) * F32


def _tree_floor(p, q, tree, r) -> int:
    """verify_tree: p(x_c) and q(x_c) for each tested child (the children of every node on the
    accepted path up to the accepted one, all children of the last node); with draft
    probabilities, the full p and q rows of a path node whose accepted child came after a
    rejected sibling (the residual norm(max(p - q, 0)) it was tested against needs its sum); the
    rows the final token is drawn from: the last node's p row, and, after a rejection with draft
    probabilities, its q row once (a node's children are all drawn from its one q row;
    deterministic drafts need no q row: the residual's mass is 1 - the rejected p(x_j)); the
    outputs."""
    b, n, v = p.shape
    par = tree.parents.reshape(-1, n)[0].tolist()
    kids = [[c for c in range(n) if par[c] == m] for m in range(n)]
    per_test = 2 if q is not None else 1
    total = 0
    for bb in range(b):
        a = int(r.num_accepted[bb])
        path = r.path[bb, : a + 1].tolist()
        steps = [kids[m].index(nxt) for m, nxt in zip(path, path[1:])]
        rejected = len(kids[path[-1]])
        tested = sum(i + 1 for i in steps) + rejected
        rows = 1  # the last node's p row
        if q is not None:
            rows += 2 * sum(1 for i in steps if i > 0) + (1 if rejected else 0)
        total += tested * per_test * F32 + rows * v * F32
    width = r.path.shape[1]
    return total + b * (2 * width + 1) * F32


def _sample_floor(p, k=1) -> int:
    """sample / sample_without_replacement: every row once, k ids out per row."""
    rows = p.numel() // p.shape[-1]
    return p.numel() * F32 + rows * k * F32


def _jacobi_floor(p, x, q, r) -> int:
    """verify_jacobi: p(x_i) and q(x_i) per slot (4 bytes each); p's row of every slot that gets
    a new token or candidates (a draw reads its row), q's row where the first rejection's
    residual is drawn; the window out."""
    b, L, v = p.shape
    drawn = r.next_window.cpu() != x.cpu()
    if r.candidates is not None:
        drawn |= (r.candidates.cpu() >= 0).any(-1)
    residual = int((r.first_reject >= 0).sum())
    return b * L * 2 * F32 + (int(drawn.sum()) + residual) * v * F32 + b * L * F32


def _jacobi_gsd_floor(p, x, q, r) -> int:
    """verify_jacobi with GSD's grouping: ``_jacobi_floor`` plus every tested slot's whole p row
    (its window is the nearest keys in the row's order); the draws read their rows again (the
    decision comes first); the window members' q and codes are not counted."""
    b, L, v = p.shape
    return _jacobi_floor(p, x, q, r) + int((x >= 0).sum()) * (v - 1) * F32


def _commit_floor(slots, layers, hkv, d, elem) -> int:
    """commit_kv: each accepted K and V row that is not already in place (slot j at offset j
    stays) read and written once in every layer."""
    j = torch.arange(slots.shape[1], dtype=slots.dtype)
    moved = int(((slots != j) & (slots >= 0)).sum())
    return 2 * 2 * layers * moved * hkv * d * elem


def _path_floor(b, n, leaves) -> int:
    """path_acceptance: p(x_n) and q(x_n) for every node but the root (4 bytes each), kappa and
    the expected length out per path."""
    return b * (n - 1) * 2 * F32 + b * leaves * 2 * F32


# ---- the floors of the ops only Triton runs (and of block verification) ------------------------
def _block_floor(p, x, q, r) -> int:
    """verify_chain(block=True): p(x_i) and q(x_i) for every draft (the weights w_i take them
    all); p's and q's row i (residual r_i) for each i from the accepted length tau (at least 1)
    to K - 1 with w_i > 0 (its mass Z_i decides position i; w_i = 0 leaves r_i = 0, nothing to
    read) and for i = tau < K (the token is drawn from r_tau); p's bonus row when tau = K; the
    outputs."""
    from specops.reference.block import _weights

    b, k1, v = p.shape
    k, per = k1 - 1, 2 if q is not None else 1
    xl = x.long()[..., None]
    px = p[:, :k].gather(-1, xl)[..., 0].float()
    qx = q.gather(-1, xl)[..., 0].float() if q is not None else torch.ones_like(px)
    w = _weights(px, qx)
    rows = 0
    for i, tau in enumerate(r.num_accepted.tolist()):
        read = {j for j in range(max(tau, 1), k) if w[i, j] > 0} | ({tau} if tau < k else set())
        rows += len(read) * per + (tau == k)
    return b * k * per * F32 + rows * v * F32 + b * (k1 + 1) * F32


def _probs_floor(logits, uncond=None) -> int:
    """probs_from_logits: the logits once in their dtype (CFG: the unconditional row too), the
    float32 probabilities out once."""
    read = sum(t.numel() * t.element_size() for t in (logits, uncond) if t is not None)
    return read + logits.numel() * F32


def _attn_floor(q, k_cache, cache_seqlens, lse=False) -> int:
    """tree_attention: each KV head's K and V rows of the prefix and of the N tree slots once
    (not once per query head of its GQA group), Q once, the output once (and lse, float32,
    when asked)."""
    b, n, hq, d = q.shape
    hkv, elem = k_cache.shape[-2], k_cache.element_size()
    kv_rows = int(cache_seqlens.sum()) + b * n
    return (
        2 * kv_rows * hkv * d * elem
        + 2 * q.numel() * q.element_size()
        + (b * n * hq * F32 if lse else 0)
    )


def _merge_floor(*states) -> int:
    """merge_states (the cascade backend's merge): both states' outputs and lse read once, the
    merged output and lse written once: every tensor of the call once."""
    return sum(t.numel() * t.element_size() for t in states)


def _append_floor(k, v) -> int:
    """append_kv: the new K and V rows read once and written once into the cache."""
    return 2 * (k.numel() * k.element_size() + v.numel() * v.element_size())


def _drafter_floor(embedding, tokens, features, step=None) -> int:
    """drafter_inputs: each distinct embedding row of a valid token once, the features once, the
    step embedding once (one [S] row broadcast, or [B, M, S]), the [B, M, E + H (+ S)] rows out
    once."""
    elem = embedding.element_size()
    distinct = int(tokens[(tokens >= 0) & (tokens < embedding.shape[0])].unique().numel())
    s = 0 if step is None else step.shape[-1]
    read = distinct * embedding.shape[1] * elem + features.numel() * elem
    read += 0 if step is None else step.numel() * elem
    return read + tokens.numel() * (embedding.shape[1] + features.shape[2] + s) * elem


def _gather_floor(src, index) -> int:
    """gather_rows: each distinct source row a valid index names once, the [B, M, H] rows out
    once (-1 writes a zero row without a read)."""
    b, n, h = src.shape
    ok = (index >= 0) & (index < n)
    flat = (torch.arange(b)[:, None] * n + index.long())[ok]
    return (int(flat.unique().numel()) + index.numel()) * h * src.element_size()


def _cache_write_floor(positions, feats, store_elem) -> int:
    """FeatureCache.write: the feature row of each valid position read once and written once
    into the store (in its dtype), with its int32 step stamp."""
    rows = int((positions >= 0).sum())
    h = feats.shape[-1]
    return rows * h * (feats.element_size() + store_elem) + rows * 4


def _path_sim_floor(paths, codebook, stride) -> int:
    """path_similarity: the codebook row of each distinct token at the scored positions
    (0, stride, 2 stride, ... < L) once, one float32 out per request."""
    ids = paths[:, :, ::stride]
    ids = ids[(ids >= 0) & (ids < codebook.shape[0])]
    row = codebook.shape[1] * codebook.element_size()
    return int(ids.unique().numel()) * row + paths.shape[0] * F32


def _triton_floor(op: str, call, result) -> int:
    """The floor of one Triton case of bench/traffic_triton.py: ``call`` is its
    ``functools.partial`` (the op and its inputs), ``result`` what it returned."""
    a, kw = call.args, call.keywords
    if op == "verify_chain":
        if kw.get("relax") is not None:
            return _gsd_floor(a[0], a[1], a[2], result)
        return (_block_floor if kw.get("block") else _chain_floor)(a[0], a[1], a[2], result)
    if op == "sample":
        return _sample_floor(a[0])
    if op == "probs_from_logits":
        return _probs_floor(a[0], kw.get("uncond_logits"))
    if op == "tree_attention":
        return _attn_floor(a[0], a[1], a[3], kw.get("return_lse", False))
    if op == "merge_states":
        return _merge_floor(*a)
    if op == "append_kv":
        return _append_floor(a[2], a[3])
    if op == "commit_kv":
        caches, _, slots = a
        return _commit_floor(slots, caches.shape[0], *caches.shape[-2:], caches.element_size())
    if op == "drafter_inputs":
        return _drafter_floor(*a)
    if op == "gather_rows":
        return _gather_floor(*a)
    if op == "feature_cache_write":
        return _cache_write_floor(a[0], a[1], call.func.__self__.features.element_size())
    if op == "path_similarity":
        return _path_sim_floor(a[0], a[1], kw.get("stride", 1))
    raise KeyError(f"bench_traffic: no floor for the Triton op {op!r}")


# ---- the cases -------------------------------------------------------------------------------
def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _probs(shape, gen):
    return inputs.probs(shape, gen, "cpu")


def _cuda_cases(quick: bool):
    """(op, shape, call) with call() -> the floor in bytes (runs the op once)."""
    cases = []
    sample = [(4, 1000)] if quick else [(1, 32000), (64, 32000), (8, 65536), (2, 184622)]
    for b, v in sample:
        p = _probs((b, v), _gen(b + v))
        call = lambda p=p: (specops.sample(p, seed=1, backend="cuda_sim"), _sample_floor(p))[1]  # noqa: E731
        cases.append(("sample", f"B={b} V={v}", call))
    for r, v, k in [(4, 1000, 3)] if quick else [(8, 65536, 3)]:
        p = _probs((r, v), _gen(r + v))

        def wor(p=p, k=k):
            specops.sample_without_replacement(p, k, seed=1, backend="cuda_sim")
            return _sample_floor(p, k)

        cases.append(("sample_without_replacement", f"R={r} V={v} k={k}", wor))
    chain = [(2, 3, 1000)] if quick else [(1, 8, 128256), (8, 4, 32000), (64, 8, 32000)]
    for b, k, v in chain:
        gen = _gen(b * 131 + k + v)
        p = _probs((b, k + 1, v), gen)
        q = _near(p[:, :k], gen)
        x = _draw(q, gen)

        def verify(p=p, x=x, q=q):
            r = specops.verify_chain(p, x, q, seed=1, backend="cuda_sim")
            return _chain_floor(p, x, q, r)

        cases.append(("verify_chain", f"B={b} K={k} V={v}", verify))
    for b, k, v in [(1, 3, 8192)] if quick else [(1, 8, 128256)]:
        p, x = inputs.greedy_chain_inputs(b, k, v, "cpu", _gen(b + k + v), accept=k // 2 + 1)

        def greedy(p=p, x=x):
            r = specops.verify_chain(p, x, greedy=True, backend="cuda_sim")
            return _greedy_floor(p, r)

        cases.append(("verify_chain", f"greedy B={b} K={k} V={v}", greedy))
    for b, k, v, codes, dim in [(2, 3, 1000, 512, 8)] if quick else [(2, 15, 65536, 8192, 256)]:
        from .gsd_authors import chain_inputs  # GSD: the Triton case's inputs

        p, x, q, relax, u = chain_inputs(b, k, v, vi=codes, c=dim)

        def gsd(p=p, x=x, q=q, relax=relax, u=u):
            r = specops.verify_chain(p, x, q, relax=relax, uniforms=u, backend="cuda_sim")
            return _gsd_floor(p, x, q, r)

        cases.append(("verify_chain", f"gsd B={b} K={k} V={v}", gsd))
    trees = (
        [(2, (2, 3), 1000, False)]
        if quick
        else [(1, (4, 3), 128256, True), (8, (2, 4), 32000, False)]
    )
    for b, (k, d), v in [(1, (2, 3), 8192)] if quick else [(1, (4, 3), 128256)]:
        tree = Tree.kary(k, d)
        p, x = inputs.greedy_tree_inputs(b, tree, v, "cpu", _gen(b + k + v), depth=d - 1)

        def gtree(p=p, x=x, tree=tree):
            r = specops.verify_tree(p, tree, x, greedy=True, backend="cuda_sim")
            return _greedy_tree_floor(p, r)

        cases.append(("verify_tree", f"greedy B={b} N={tree.num_nodes} V={v}", gtree))
    for b, (k, d), v, det in trees:
        tree = Tree.kary(k, d)
        p, x, q = inputs.tree_inputs(b, tree, v, "cpu", _gen(b + k + v), deterministic=det)

        def vtree(p=p, x=x, q=q, tree=tree):
            r = specops.verify_tree(p, tree, x, q, seed=1, backend="cuda_sim")
            return _tree_floor(p, q, tree, r)

        cases.append(
            ("verify_tree", f"B={b} N={tree.num_nodes} V={v} {'det' if det else 'iid'}", vtree)
        )
    jac = [("sjd", 2, 8, 1000, None)] if quick else [("sjd", 2, 64, 65536, None)]
    jac += (
        [("sjd_pac root", 2, 13, 1000, (3, 3, 13))]
        if quick
        else [("sjd_pac root", 2, 64, 65536, (3, 3, 64))]
    )
    for name, b, L, v, shape in jac:
        gen = _gen(7)
        if shape is None:
            p = _probs((b, L, v), gen)
            q = _near(p, gen)
            x = _draw(q, gen)
            tree = None
        else:
            tree = Tree.kary_chain(*shape)
            p, q, x, _, _ = inputs.tree_case(tree, b, v, "root", gen, "cpu", 2000)

        def jacobi(p=p, x=x, q=q, tree=tree):
            r = specops.verify_jacobi(
                p, x, q, tree=tree, num_candidates=3 if tree is not None else 1, seed=1,
                backend="cuda_sim",
            )  # fmt: skip
            return _jacobi_floor(p, x, q, r)

        cases.append(("verify_jacobi", f"{name} B={b} L={L} V={v}", jacobi))
    for b, L, v, codes, dim in [(2, 8, 1000, 512, 8)] if quick else [(2, 64, 65536, 8192, 256)]:
        from .gsd_authors import inputs as gsd_inputs  # Lumina-mGPT's SJD window with GSD

        p, q, x, relax, u = gsd_inputs(b, L, v, vi=codes, c=dim)

        def jacobi_gsd(p=p, x=x, q=q, relax=relax, u=u):
            r = specops.verify_jacobi(p, x, q, relax=relax, uniforms=u, backend="cuda_sim")
            return _jacobi_gsd_floor(p, x, q, r)

        cases.append(("verify_jacobi", f"gsd sjd B={b} L={L} V={v}", jacobi_gsd))
    for b, tree, v in [(2, Tree.kary(2, 3), 1000)] if quick else [(8, Tree.kary(4, 3), 65536)]:
        gen = _gen(b + v)
        n = tree.num_nodes
        p, q = _probs((b, n, v), gen), None
        q = _near(p, gen)
        x = _draw(q, gen)

        def path(p=p, q=q, x=x, tree=tree, b=b, n=n):
            specops.path_acceptance(p, q, tree, x, backend="cuda_sim")
            return _path_floor(b, n, int(tree.is_leaf.sum()))

        cases.append(("path_acceptance", f"B={b} N={n} V={v}", path))
    kv = [(2, 1, 64, 2, 16, 4)] if quick else [(32, 1, 1024, 32, 128, 8), (32, 4, 1024, 32, 128, 8)]
    for layers, b, cap, hkv, d, m in kv:
        # the values never change what moves: zeros, not gigabytes of random numbers
        caches = torch.zeros(layers, 2, b, cap, hkv, d, dtype=torch.bfloat16)
        slots = torch.stack([torch.arange(m, dtype=torch.int32) * 2] * b)

        def commit(c=caches, s=slots, layers=layers, b=b, hkv=hkv, d=d, m=m, cap=cap):
            cs = torch.full((b,), cap // 2, dtype=torch.int32)
            specops.commit_kv(c, cs, s, backend="cuda_sim")
            return _commit_floor(s, layers, hkv, d, 2)

        cases.append(("commit_kv", f"L={layers} B={b} Hkv={hkv} D={d} m={m}", commit))
    return cases


def count_cuda(quick: bool) -> list[tuple[str, str, KernelTraffic, int]]:
    """(op, shape, one launch's traffic, the op's floor) for every CUDA kernel launch."""
    out = []
    with specops.validation(False):
        for op, shape, call in _cuda_cases(quick):
            with traffic_cuda.counting() as launches:
                floor = call()
            out += [(op, shape, t, floor) for t in launches]
    return out


def _traffic_triton():
    """bench/traffic_triton.py with the interpreter switched on, or None without triton.  Called
    before anything imports triton: the interpreter is chosen when the kernels are decorated."""
    try:
        from . import traffic_triton
    except ImportError:
        return None
    traffic_triton.ensure_interpreter()
    return traffic_triton


def count_triton(quick: bool, only=None) -> list[tuple[str, str, KernelTraffic, int]]:
    """The Triton kernels under the interpreter (bench/traffic_triton.py), floors alike (each
    launch of a case gets its op's floor, ``_triton_floor``).  ``only(op, shape)``: the cases to
    count (all by default)."""
    traffic_triton = _traffic_triton()
    if traffic_triton is None:
        return []
    out = []
    for op, shape, call, result, launches in traffic_triton.count_triton_calls(quick, only=only):
        floor = _triton_floor(op, call, result)
        out += [(op, shape, t, floor) for t in launches]
    return out


def run(device: str, quick: bool) -> list[Row]:
    _traffic_triton()  # first: the CUDA cases' imports may bring triton in
    counted = count_cuda(quick) if traffic_cuda.available() else []
    counted += count_triton(quick)
    print(CSV_FIELDS)
    rows = []
    for op, shape, t, floor in counted:
        us = traffic_model.predict_us(t)
        print(csv_row(op, shape, t, floor, us))
        note = (
            f"kernel={t.kernel} read={t.bytes_read} written={t.bytes_written} min={floor} "
            f"spr={t.sectors_per_request:.1f} ctas={t.ctas_with_work}/{t.ctas} "
            f"crit={t.critical_cta_bytes} bar/cta={t.barriers_per_cta:.1f}"
        )
        rows.append(Row("traffic", f"{op} {shape}", t.backend, us, us, us, note=note))
    return rows

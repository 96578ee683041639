"""specops bench --ops traffic: every CUDA kernel (counted through cuda_sim) and every Triton
kernel (counted under the interpreter) at the bench shapes, one CSV line each (issue 36;
docs/gpu_cost.md):

    traffic,op,backend,kernel,shape,bytes_read,bytes_written,min_bytes,sectors_per_request,
    ctas,ctas_with_work,critical_cta_bytes,barriers_per_cta,predicted_us

``min_bytes`` is the op's own floor (``FLOORS``, one formula per op, the same in
docs/gpu_cost.md); ``predicted_us`` the time model of bench/traffic_model.py.  Inputs make the
kernels do their real work: drafts are rejected at random positions (bench_verify's inputs),
the SJD-PAC case is bench_jacobi's "sjd_pac root" input.  Counting runs on the CPU whatever
``--device`` says; quick mode takes tiny shapes."""

from __future__ import annotations

import torch

import specops
from specops import Tree

from . import bench_verify, traffic_cuda, traffic_model
from .bench_verify import _draw, _near
from .harness import Row
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


# ---- the cases -------------------------------------------------------------------------------
def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _probs(shape, gen):
    return bench_verify._probs(shape, gen, "cpu")


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
            from .bench_acceptance import _tree_case

            tree = Tree.kary_chain(*shape)
            p, q, x, _, _ = _tree_case(tree, b, v, "root", gen, "cpu", 2000)

        def jacobi(p=p, x=x, q=q, tree=tree):
            r = specops.verify_jacobi(
                p, x, q, tree=tree, num_candidates=3 if tree is not None else 1, seed=1,
                backend="cuda_sim",
            )  # fmt: skip
            return _jacobi_floor(p, x, q, r)

        cases.append(("verify_jacobi", f"{name} B={b} L={L} V={v}", jacobi))
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


def count_triton(quick: bool) -> list[tuple[str, str, KernelTraffic, int]]:
    """The Triton kernels under the interpreter (bench/traffic_triton.py), floors alike."""
    traffic_triton = _traffic_triton()
    if traffic_triton is None:
        return []
    return [
        (op, shape, t, traffic_model.triton_floor(op, t)) for op, shape, t in
        traffic_triton.count_triton_ops(quick)
    ]  # fmt: skip


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

"""specops.tree_attention (Triton) vs the ways engines run tree verification today.

Peers, in the same process and on the same inputs (a peer that is not importable or fails is
reported with a line saying so):
- "sdpa dense mask": torch SDPA over [prefix; tree] with a dense bool mask [B, 1, N, S + N]
  (what EAGLE / visual-AR codebases do); K/V in its own [B, Hkv, S + N, D] layout, GQA through
  enable_gqa (no repeat_kv copy), so the peer is not charged for a layout change.
- "flex block mask": FlexAttention (compiled) with the tree as a mask_mod; the block mask is
  built outside the timed region (real engines rebuild it every step); one shape only
  (FLEX_CASE): it compiles per shape, minutes a lease cannot spare.
- "flashinfer custom mask": FlashInfer's paged prefill with a custom mask (plan outside the
  timed region), on the same paged cache as "specops paged".
- "specops cascade": specops' own backend="cascade" (CUDA, when flash-attn imports): the prefix
  through flash-attn's flash_attn_with_kvcache (with its lse), the tree through the tree-only
  Triton kernel, merged by log-sum-exp; contiguous cache (flash-attn 2.x pages are multiples of
  256).
The reference is never timed on a GPU; it checks the output (max|diff| in the note).
Rows "specops" (contiguous cache, random tree), "specops chain" (the same with a chain: the
Jacobi window) and "specops paged" (page 16, shuffled block table).  GB/s = K/V bytes read once
(B (S + N) Hkv D 2 tensors x 2 bytes) / time; "% copy" in the note = that over the measured
device-to-device copy bandwidth (read + write) of the same run.  Ratios = peer time / this time.

    python -m bench.bench_tree_attention [--device cuda|cpu] [--quick] [--csv PATH]
    python -m bench --ops tree_attention ...                                  (same rows)
    python -m bench.bench_tree_attention --aot [--arch 90]   (no GPU needed: compile the kernel
        configs of the GPU shapes for sm_XX and print registers / spills / shared memory)

On CPU the subject is backend="cpu" (the C++ twin, csrc/tree_attention.cpp; what "auto" picks)
against "sdpa dense mask" over issue 13's grid: N in {16, 64}, S in {256, 1024, 4096}, D in
{64, 128}, Hq/Hkv = 32/8, B = 1, float32 (SDPA's CPU kernel has no GQA-shared K/V reads, the
twin reads each K/V row once per group).  Run it single-threaded for comparable numbers:
OMP_NUM_THREADS=1 SPECOPS_NUM_THREADS=1 python -m bench --device cpu --ops tree_attention.
"""

from __future__ import annotations

import math
import os
import sys
import time

import torch

import specops
from specops import Tree, _build

from . import harness
from .harness import Row, time_fn, with_ratios

# (B, N, S, Hq, Hkv, D): issue 4's grid, bf16
CASES_GPU = [
    (b, n, s, hq, hkv, 128)
    for n in (16, 64)
    for b in (1, 8, 32)
    for s in (1024, 4096, 16384)
    for hq, hkv in ((32, 32), (32, 8))
]
# (B, N, S, Hq, Hkv, D): issue 13's CPU grid, float32
CASES_CPU = [(1, n, s, 32, 8, d) for n in (16, 64) for s in (256, 1024, 4096) for d in (64, 128)]
CASES_QUICK = [(1, 5, 64, 4, 2, 64)]
FLEX_CASE = (8, 64, 4096, 32, 8, 128)
PAGE = 16
_CEIL: dict = {}
_FLEX: dict = {}


def _random_tree(n: int, b: int, gen: torch.Generator) -> Tree:
    parents = torch.full((b, n), -1, dtype=torch.int32)
    for i in range(1, n):
        parents[:, i] = torch.randint(max(0, i - 4), i, (b,), generator=gen)  # bushy, deep
    return Tree.from_parents(parents)


def _time_interleaved(fns: list, trials: int = 9, min_time_s: float = 0.05) -> list:
    """CPU: every callable timed in turn within each trial (round robin), so that all of them see
    the same load from other processes on a shared machine; -> one Stats per callable."""
    per = []
    for f in fns:
        f()
        t0 = time.perf_counter()
        f()
        per.append(max(1, int(min_time_s / max(time.perf_counter() - t0, 1e-7))))
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(trials):
        for f, n, out in zip(fns, per, samples):
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            out.append((time.perf_counter() - t0) / n * 1e6)
    return [harness._summary(s) for s in samples]


def _time(fns, device):
    """Median timing; slow peers get fewer repetitions so the whole grid stays in minutes."""
    if device != "cuda":
        return time_fn(fns, device)
    f = fns[0] if isinstance(fns, list) else fns
    f()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    f()
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    reps = max(1, min(20, int(20.0 / max(ms, 1e-3))))
    return time_fn(fns, device, reps=reps, trials=15 if ms < 5 else 5)


class Case:
    """Inputs of one shape: contiguous and paged caches holding the same K/V, in ``copies``
    copies (rotated so that L2 does not hold them)."""

    def __init__(self, b, n, s, hq, hkv, d, device, dtype, copies):
        gen = torch.Generator().manual_seed(0)
        self.shape = (b, n, s, hq, hkv, d)
        self.q = torch.randn(b, n, hq, d, generator=gen).to(device, dtype)
        cap = s + n
        self.k = [torch.randn(b, cap, hkv, d, device=device, dtype=dtype) for _ in range(copies)]
        self.v = [torch.randn(b, cap, hkv, d, device=device, dtype=dtype) for _ in range(copies)]
        self.L = torch.full((b,), s, dtype=torch.int32, device=device)
        self.tree = _random_tree(n, b, gen).to(device)
        self.chain = Tree.chain(n, batch=b).to(device)
        # paged: page PAGE, block table a shuffled permutation of all pages
        per = math.ceil(cap / PAGE)
        perm = torch.randperm(b * per, generator=gen).to(torch.int32)
        self.bt = perm.reshape(b, per).to(device)
        self.kp, self.vp = [], []
        for kc, vc in zip(self.k, self.v):
            pk = torch.zeros(b * per, PAGE, hkv, d, device=device, dtype=dtype)
            pv = torch.zeros_like(pk)
            pad = per * PAGE - cap
            kk = torch.nn.functional.pad(kc, (0, 0, 0, 0, 0, pad)).reshape(b * per, PAGE, hkv, d)
            vv = torch.nn.functional.pad(vc, (0, 0, 0, 0, 0, pad)).reshape(b * per, PAGE, hkv, d)
            pk[self.bt.reshape(-1).long()] = kk
            pv[self.bt.reshape(-1).long()] = vv
            self.kp.append(pk)
            self.vp.append(pv)

    def kv_bytes(self) -> int:
        b, n, s, hq, hkv, d = self.shape
        return b * (s + n) * hkv * d * 2 * self.q.element_size()

    def dense_mask(self) -> torch.Tensor:
        """[B, 1, N, S + N] bool: the whole prefix, then the ancestors-or-self."""
        b, n, s = self.shape[:3]
        pre = torch.ones(b, n, s, dtype=torch.bool, device=self.q.device)
        return torch.cat([pre, self.tree.ancestors], -1)[:, None]


def peer_sdpa(c: Case):
    mask = c.dense_mask()
    q = c.q.transpose(1, 2)  # [B, Hq, N, D]
    ks = [k.transpose(1, 2).contiguous() for k in c.k]  # the peer's own [B, Hkv, S+N, D]
    vs = [v.transpose(1, 2).contiguous() for v in c.v]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    fns = [lambda k=k, v=v: sdpa(q, k, v, attn_mask=mask, enable_gqa=True) for k, v in zip(ks, vs)]
    return fns, lambda: sdpa(q, ks[0], vs[0], attn_mask=mask, enable_gqa=True).transpose(1, 2)


def peer_flex(c: Case):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    b, n, s, hq, hkv, d = c.shape
    anc, L = c.tree.ancestors, c.L.long()

    def tree_mask(bi, h, qi, ki):
        slot = (ki - L[bi]).clamp(0, n - 1)
        return (ki < L[bi]) | ((ki - L[bi] < n) & anc[bi, qi, slot])

    bm = create_block_mask(tree_mask, b, None, n, s + n, device=c.q.device)
    if "flex" not in _FLEX:  # one compiled function: shapes after the first go dynamic
        _FLEX["flex"] = torch.compile(flex_attention)
    flex = _FLEX["flex"]
    q = c.q.transpose(1, 2)
    ks = [k.transpose(1, 2).contiguous() for k in c.k]
    vs = [v.transpose(1, 2).contiguous() for v in c.v]
    fns = [lambda k=k, v=v: flex(q, k, v, block_mask=bm, enable_gqa=True) for k, v in zip(ks, vs)]
    return fns, lambda: fns[0]().transpose(1, 2)


def peer_flashinfer(c: Case):
    import flashinfer

    b, n, s, hq, hkv, d = c.shape
    dev = c.q.device
    per = c.bt.shape[1]
    ws = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device=dev)
    w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD")
    qo_indptr = torch.arange(0, (b + 1) * n, n, dtype=torch.int32, device=dev)
    kv_indptr = torch.arange(0, (b + 1) * per, per, dtype=torch.int32, device=dev)
    last = torch.full((b,), (s + n) - (per - 1) * PAGE, dtype=torch.int32, device=dev)
    mask = c.dense_mask()[:, 0].reshape(-1)  # per request [N, S + N], flattened
    w.plan(
        qo_indptr,
        kv_indptr,
        c.bt.reshape(-1),
        last,
        hq,
        hkv,
        d,
        PAGE,
        custom_mask=mask,
        q_data_type=c.q.dtype,
        kv_data_type=c.q.dtype,
    )
    q = c.q.reshape(b * n, hq, d)
    fns = [lambda k=k, v=v: w.run(q, (k, v)) for k, v in zip(c.kp, c.vp)]
    return fns, lambda: fns[0]().reshape(b, n, hq, d)


def peer_cascade(c: Case):
    if not _build.has_flash_attn():
        raise ImportError("flash-attn is not installed (pip install 'specops[flash]')")
    ta = specops.tree_attention

    def run(k, v):
        with specops.validation(False):
            return ta(c.q, k, v, c.L, c.tree, backend="cascade")

    fns = [lambda k=k, v=v: run(k, v) for k, v in zip(c.k, c.v)]
    return fns, fns[0]


def _bench_case(case, device, dtype, copies) -> list[Row]:
    c = Case(*case, device, dtype, copies)
    b, n, s, hq, hkv, d = case
    shape = f"B={b} N={n} S={s} H={hq}/{hkv} D={d}"
    nbytes = c.kv_bytes()
    rows: list[Row] = []
    copy = _CEIL.get("copy_gbps")

    def add(name, st, note=""):
        gbps = nbytes / (st.median_us * 1e-6) / 1e9
        if copy and name.startswith("specops"):
            note = (note + f" {100 * gbps / copy:.0f}% copy").strip()
        rows.append(
            Row("tree_attention", shape, name, st.median_us, st.p20_us, st.p80_us, gbps, note=note)
        )

    be = "triton" if device == "cuda" else ("cpu" if _build.has_cpp() else "reference")
    ta = specops.tree_attention
    want = ta(c.q, c.k[0], c.v[0], c.L, c.tree, backend="reference") if nbytes < 2**28 else None
    # (name, callables, note); on CPU timed together round robin, on a GPU one after the other
    timed = []
    with specops.validation(False):
        ours = [lambda k=k, v=v: ta(c.q, k, v, c.L, c.tree, backend=be) for k, v in zip(c.k, c.v)]
        timed.append(("specops", ours, f"backend={be}"))
        fns = [lambda k=k, v=v: ta(c.q, k, v, c.L, c.chain, backend=be) for k, v in zip(c.k, c.v)]
        timed.append(("specops chain", fns, ""))
        fns = [
            lambda k=k, v=v: ta(c.q, k, v, c.L, c.tree, block_table=c.bt, backend=be)
            for k, v in zip(c.kp, c.vp)
        ]
        timed.append(("specops paged", fns, f"page={PAGE}"))
        out = ours[0]()
    peers = [("sdpa dense mask", peer_sdpa)]
    if device == "cuda" and case == FLEX_CASE:  # FlexAttention compiles per shape: one shape
        peers += [("flex block mask", peer_flex)]
    if device == "cuda":
        peers += [("flashinfer custom mask", peer_flashinfer)]
        peers += [("specops cascade", peer_cascade)]
    for name, make in peers:
        try:
            fns, once = make(c)
            got = once()
            note = ""
            if want is not None:
                err = (got.float() - want.float()).abs().max().item()
                note = f"max|diff| vs reference {err:.1e}"
            if device == "cuda":  # timed here: a peer failing while timed is skipped too
                timed.append((name, _time(fns, device), note))
            else:
                timed.append((name, fns, note))
        except Exception as exc:  # not installed / unsupported here: say so, keep going
            print(
                f"[bench] tree_attention {shape}: {name} skipped ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:120] if str(exc) else ''})"
            )
    with specops.validation(False):
        if device == "cuda":
            stats = [f if isinstance(f, harness.Stats) else _time(f, device) for _, f, _ in timed]
        else:
            stats = _time_interleaved([fns[0] for _, fns, _ in timed])
    for (name, _, note), st in zip(timed, stats):
        add(name, st, note)
    if want is not None:
        err = (out.float() - want.float()).abs().max().item()
        rows[0].note += f" max|diff| vs reference {err:.1e}"
        if device == "cpu":
            rows[0].note += " target sdpa dense mask>=1"  # issue 13
        tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
        assert err < tol, f"tree_attention {shape}: specops differs from the reference by {err}"
    return rows


def run(device: str, quick: bool) -> list[Row]:
    if device == "cuda" and not quick and not _CEIL:
        _CEIL.update(harness.ceilings(device))
    cases = CASES_QUICK if quick else (CASES_GPU if device == "cuda" else CASES_CPU)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    rows: list[Row] = []
    for case in cases:
        b, n, s, hq, hkv, d = case
        kv = b * (s + n) * hkv * d * 2 * 2
        copies = 1 if device != "cuda" or kv > 2**28 else 4  # >= 256 MiB: L2 cannot hold it
        rows += _bench_case(case, device, dtype, copies)
        if device == "cuda":
            torch.cuda.empty_cache()
    return with_ratios(rows, ("specops",))


# --aot: compile the GPU configs for an sm_XX target without a GPU -----------------------------
def aot_report(arch: int = 90, smoke: bool = False) -> None:
    """Compile _tree_attn_fwd for the configs the GPU grid uses (bf16/fp16, contiguous and
    paged) and print registers, spilled stack bytes, shared memory and whether wgmma is used.
    Integer arguments get the divisibility-by-16 hints Triton's launcher gives real strides.
    ``smoke``: two bf16 configs only (the test suite's lowering check)."""
    import subprocess
    import tempfile

    import triton
    from specops.triton_kernels import tree_attention as ta
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = ta._tree_attn_fwd
    names = fn.arg_names
    consts = "G D BLOCK_M BLOCK_N BLOCK_D NUM_SPLITS PAGED PAGE_SIZE PREC TREE_ONLY"
    consts += " s_qd s_kd s_vd s_mw"
    consts = consts.split()
    ptrs = "Q K V SEQLENS MASK BT OUT LSE".split()
    div16 = set(ptrs) | set("s_qb s_qn s_qh s_kp s_ks s_kh s_vp s_vs s_vh s_ob s_on s_oh".split())
    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    seen = set()
    dtypes = (
        (("bf16", torch.bfloat16),)
        if smoke
        else (("bf16", torch.bfloat16), ("fp16", torch.float16))
    )
    cases = CASES_GPU + [(1, 64, 0, 32, 4, 64), (1, 16, 0, 8, 8, 256)]
    variants = ((False, 1, 1), (True, PAGE, 4))
    if smoke:  # packed GQA rows in two wgmma warpgroups; one-row-tile mma.sync, paged, split
        cases, variants = [(1, 64, 0, 32, 8, 128), (1, 16, 0, 32, 32, 128)], variants[:1]
    for dt_name, dt in dtypes:
        for i, (_b, n, _s, hq, hkv, d) in enumerate(cases):
            bm, bn, bd, warps, stages = ta._config(n, hq // hkv, d, dt)
            for paged, page, splits in ((True, PAGE, 4),) if smoke and i else variants:
                key = (dt_name, hq // hkv, bm, bn, bd, d, paged, splits)
                if key in seen:
                    continue
                seen.add(key)
                ty = dict(zip(ptrs, [dt_name] * 3 + ["i32"] * 3 + [dt_name, "fp32"]))
                if splits > 1:
                    ty["OUT"] = "fp32"
                sig = {
                    a: ("constexpr" if a in consts else ("*" + ty[a] if a in ty else "i32"))
                    for a in names
                }
                sig["qk_scale"] = "fp32"
                cv = dict(
                    G=hq // hkv,
                    D=d,
                    BLOCK_M=bm,
                    BLOCK_N=bn,
                    BLOCK_D=bd,
                    NUM_SPLITS=splits,
                    PAGED=paged,
                    PAGE_SIZE=page,
                    PREC="tf32",
                    TREE_ONLY=False,
                    s_qd=1,
                    s_kd=1,
                    s_vd=1,
                    s_mw=1,
                )
                attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in div16}
                src = ASTSource(fn, sig, {(names.index(k),): v for k, v in cv.items()}, attrs)
                k = triton.compile(
                    src,
                    target=GPUTarget("cuda", arch, 32),
                    options=dict(num_warps=warps, num_stages=stages),
                )
                with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
                    f.write(k.asm["cubin"])
                    f.flush()
                    res = subprocess.run(
                        [os.path.join(bin_dir, "cuobjdump"), "--dump-resource-usage", f.name],
                        capture_output=True,
                        text=True,
                    ).stdout
                    sass = subprocess.run(
                        [os.path.join(bin_dir, "cuobjdump"), "-sass", f.name],
                        capture_output=True,
                        text=True,
                    ).stdout
                usage = next((ln.strip() for ln in res.splitlines() if "REG:" in ln), "?")
                usage = " ".join(w for w in usage.split() if w.split(":")[0] in ("REG", "STACK"))
                mma = "wgmma" if "HGMMA" in sass else ("mma" if "HMMA" in sass else "no mma")
                print(
                    f"sm_{arch} {dt_name} G={hq // hkv:<2} D={d:<3} BLOCK_M={bm:<3} "
                    f"BLOCK_N={bn} warps={warps} stages={stages} paged={int(paged)} "
                    f"splits={splits}: {usage} smem={k.metadata.shared} {mma}"
                )


if __name__ == "__main__":
    if "--aot" in sys.argv:
        os.environ.pop("TRITON_INTERPRET", None)
        arch = int(sys.argv[sys.argv.index("--arch") + 1]) if "--arch" in sys.argv else 90
        aot_report(arch, smoke="--smoke" in sys.argv)
        sys.exit(0)
    from .__main__ import main

    sys.exit(main(["--ops", "tree_attention", *sys.argv[1:]]))

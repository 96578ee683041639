"""Verification at controlled acceptance: verify_jacobi / verify_tree / verify_chain against the
memory floor (issue 13).

Random rows are almost always accepted, and an accepted draft costs one scalar test: such
benchmarks hide the passes over the vocabulary that a rejection starts.  Here every case fixes
where the first rejection happens:
  root   every child of the root (chain: draft 0) is rejected for sure: p(x) = 0 for those
         tokens, the target row renormalised;
  mid    p = q on the rows above depth D/2 (a draft drawn from q passes u q(x) < p(x) = q(x)
         for sure), then every child at that depth is rejected as above;
  full   p = q everywhere: every draft is accepted, only the bonus row is scanned.
Rows are what a visual AR model samples from: softmax of top-k 2000 filtered logits (``dense``:
unfiltered, every entry positive, so the SJD-PAC candidates' draws scan the whole row).

GB/s = the unique probability bytes the step must read (``floor bytes``: every target/draft row
that the semantics scan in full, counted once; scalar reads of accepted drafts are left out; for
the SJD-PAC step: row m, every continuation row's p for its candidates and its q where the
continuation token was resampled) / time.  The same run times a memcpy of exactly that many
bytes (``torch`` ``dst.copy_(src)``, the current torch thread count) in row ``memcpy``;
``ratios`` gives memcpy=memcpy time / op time (the issue's target: >= 0.5, the op within 2x of a
memcpy of its bytes).  For the SJD-PAC step
(Lumina-mGPT: V = 65536, window Tree.kary_chain(3, 3, 64), 3 candidates, one request) the peer
``torch_pac`` is a vectorised PyTorch SJD-PAC sampler written here after the method's
description (walk with torch ops on the host, continuation and candidates batched over the
line's rows with torch.multinomial); target ratio torch_pac >= 20.

Thread count: the C++ twins use ``specops.set_num_threads`` (default: torch's thread count);
``python -m bench`` prints it with the rows (note column)."""

from __future__ import annotations

from functools import partial

import torch

import specops
from specops import Tree

from .harness import Row, memcpy_time, time_cpu, time_fn, with_ratios
from .inputs import first_child_line, logit_rows, reject, tree_case

MODES = ("root", "mid", "full")


def _fast_backends(op, device):
    """The op's compiled backends usable on ``device`` (the reference is not timed here)."""
    return [b for b in specops.available_backends(op, device) if b != "reference"]


def _case_rows(op, desc, results, nbytes, device, note):
    """Rows of one case: each backend's, then the memcpy of the same bytes; ratios against it."""
    st = memcpy_time(nbytes, device)
    out = [
        Row(op, desc, be, s.median_us, s.p20_us, s.p80_us, nbytes / (s.median_us * 1e-6) / 1e9)
        for be, s in results
    ]
    out.append(
        Row(op, desc, "memcpy", st.median_us, st.p20_us, st.p80_us, nbytes / st.median_us / 1e3)
    )
    for r in out:
        if r.backend != "memcpy":
            r.note = note
    return out


# ---- tree inputs (verify_tree and the SJD-PAC window) ----------------------------------------
# ---- the SJD-PAC step --------------------------------------------------------------------------
def torch_pac(p, x, q, par, fc, k, gen):
    """A vectorised PyTorch SJD-PAC sampler (one request; p, q [L, V], x [L] drafted from the
    parent's q): the peer of the verify_jacobi tree mode.  Same distributions, its own random
    numbers (torch generator): walk down the tree with residual updates on rejection, then
    adaptive continuation (kept or resampled from max(p - q, 0)) and candidates
    (torch.multinomial without replacement) for every position on the first-child line below the
    last accepted node, batched over the line's rows."""
    L, v = p.shape
    cur, a, rejected = 0, 0, False
    pc, qc = p[0], q[0]
    kids = [[c for c in range(1, L) if par[c] == m] for m in range(L)]
    toks = []
    while True:
        moved = False
        for c in kids[cur]:
            xc = int(x[c])
            if torch.rand((), generator=gen) * qc[xc] < pc[xc]:
                toks.append(xc)
                cur, a, moved, rejected = c, a + 1, True, False
                pc, qc = p[c], q[c]
                break
            r = (pc - qc).clamp_min(0)
            s = r.sum()
            pc = r / s if s > 0 else pc
            qc = qc.clone()
            qc[xc] = 0
            qc = qc / qc.sum().clamp_min(1e-30)
            rejected = True
        if not moved:
            break
    toks.append(int(torch.multinomial(pc, 1, generator=gen)))
    line = first_child_line(fc, cur) if rejected else []
    if not line:
        return toks, None
    cont = None
    if len(line) > 1:  # line row l_d tests (and may resample) the token of l_{d+1}
        rows = torch.tensor(line[:-1], device=p.device)
        pr, qr, xr = p[rows], q[rows], x[torch.tensor(line[1:], device=p.device)]
        ar = torch.arange(len(rows), device=p.device)
        keep = torch.rand(len(rows), generator=gen, device=p.device) * qr[ar, xr] < pr[ar, xr]
        res = (pr - qr).clamp_min(0)
        res = torch.where(res.sum(-1, keepdim=True) > 0, res, pr)
        cont = torch.where(keep, xr, torch.multinomial(res, 1, generator=gen)[:, 0])
    cands = torch.multinomial(p[torch.tensor(line, device=p.device)], k, generator=gen)
    return toks, (cont, cands)


def bench_jacobi(device, quick) -> list[Row]:
    out = []
    if quick:
        cases = [("sjd_pac", (3, 3, 13), 1000, 2000, ("root",))]
    else:
        cases = [
            ("sjd_pac", (3, 3, 64), 65536, 2000, MODES),
            ("sjd_pac dense", (3, 3, 64), 65536, None, ("root",)),
        ]
    for name, shape, v, top_k, modes in cases:
        tree = Tree.kary_chain(*shape, device=device)
        par = tree.parents.reshape(-1, shape[2])[0].tolist()
        fc = tree.first_child.reshape(-1, shape[2])[0].tolist()
        for mode in modes:
            gen = torch.Generator(device=device).manual_seed(0)
            p, q, x, line, stop = tree_case(tree, 1, v, mode, gen, device, top_k)
            r = specops.verify_jacobi(p, x, q, tree=tree, num_candidates=3, seed=1)
            a = int(r.num_accepted[0])
            m = int(r.path[0, a])
            rejected = int(r.first_reject[0]) >= 0
            # scanned in full: row m (p; q too after a rejection); every line row l_d's p (its
            # candidates), and its q only when the token of l_{d+1} was resampled (counted as
            # kept when the resample drew the same token: fewer bytes, a stricter ratio)
            line = first_child_line(fc, m) if rejected else []
            nw = r.next_window[0].tolist()
            resampled = sum(
                1 for i in range(len(line) - 1) if nw[a + 1 + i] != int(x[0, line[i + 1]])
            )
            nrows = (2 if rejected else 1) + len(line) + resampled
            nbytes = nrows * v * 4
            desc = f"{name} acc={mode} a={a} B=1 L={shape[2]} V={v} kary_chain{shape} k=3"
            results = []
            for be in _fast_backends("verify_jacobi", device):
                fn = partial(specops.verify_jacobi, p, x, q, tree=tree, num_candidates=3, seed=1,
                             backend=be)  # fmt: skip
                results.append((be, time_fn(fn, device, quick=quick)))
            g = torch.Generator(device=device).manual_seed(1)
            pf, qf, xf = p[0], q[0], x[0]
            st = time_cpu(partial(torch_pac, pf, xf, qf, par, fc, 3, g), warmup=1, trials=3)
            results.append(("torch_pac", st))
            note = _threads_note()
            if device == "cpu" and mode == "root" and top_k is not None:  # issue 13, item 2
                note += " target memcpy>=0.5 torch_pac>=20"
            out += _case_rows("verify_jacobi", desc, results, nbytes, device, note)
    return out


# ---- verify_tree / verify_chain ----------------------------------------------------------------
def bench_tree(device, quick) -> list[Row]:
    out = []
    b, tree, v = (2, Tree.kary(2, 3), 1000) if quick else (4, Tree.kary(3, 3), 32000)
    modes = ("root",) if quick else MODES
    for mode in modes:
        gen = torch.Generator(device=device).manual_seed(0)
        p, q, x, line, stop = tree_case(tree, b, v, mode, gen, device, None)
        r = specops.verify_tree(p, tree, x, q, without_replacement=True, seed=1)
        full = mode == "full"
        nbytes = b * (1 if full else 2) * v * 4  # row m: p (bonus), or p and q (rejection)
        desc = f"wor acc={mode} a={r.num_accepted.tolist()} B={b} N={tree.num_nodes} V={v}"
        results = []
        for be in _fast_backends("verify_tree", device):
            fn = partial(specops.verify_tree, p, tree, x, q, without_replacement=True, seed=1,
                         backend=be)  # fmt: skip
            results.append((be, time_fn(fn, device, quick=quick)))
        out += _case_rows("verify_tree", desc, results, nbytes, device, _threads_note())
    return out


def bench_chain(device, quick) -> list[Row]:
    out = []
    b, k, v = (2, 4, 1000) if quick else (16, 8, 32000)
    modes = ("root",) if quick else MODES
    for mode in modes:
        gen = torch.Generator(device=device).manual_seed(0)
        pq, q = logit_rows((b, k + 1, v), gen, device, None)
        q = q[:, :k].contiguous()
        p = pq.clone()
        x = torch.multinomial(q.reshape(-1, v), 1, generator=gen).reshape(b, k)
        stop = {"root": 0, "mid": k // 2, "full": k}[mode]
        p[:, :stop] = q[:, :stop]
        if stop < k:
            for bb in range(b):
                reject(p, bb, stop, x[bb, stop])
        nbytes = b * (1 if stop == k else 2) * v * 4  # row a: p (bonus), or p and q
        desc = f"acc={mode} a={stop} B={b} K={k} V={v}"
        results = []
        for be in _fast_backends("verify_chain", device):
            fn = partial(specops.verify_chain, p, x, q, seed=1, backend=be)
            results.append((be, time_fn(fn, device, quick=quick)))
        out += _case_rows("verify_chain", desc, results, nbytes, device, _threads_note())
    return out


def _threads_note():
    n = getattr(specops, "get_num_threads", lambda: "n/a")()
    return f"threads={n} torch_threads={torch.get_num_threads()}"


def run(device: str, quick: bool) -> list[Row]:
    rows = bench_jacobi(device, quick) + bench_tree(device, quick) + bench_chain(device, quick)
    return with_ratios(rows, ("cuda", "triton", "cpu"))


if __name__ == "__main__":
    from .__main__ import main

    main(["--ops", "acceptance"])

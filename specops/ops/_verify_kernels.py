"""Launch the compiled verification kernels (C++ CPU twin / CUDA) from validated arguments.

Inputs arrive checked by specops/ops/verify.py; here they are only made kernel-ready: float32
probability rows with a contiguous last dim (other float dtypes are converted once), int32
neighbours, int64 counts.  Token ids are read as int32 or int64 in place."""

from __future__ import annotations

import torch

from specops import _build
from specops.ops import _common as c


def _f32_rows(t: torch.Tensor) -> torch.Tensor:
    if t.dtype != torch.float32 or t.stride(-1) != 1:
        t = t.float().contiguous()
    return t


def _ids(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _rng(d: dict, seed_t, seed_i, off_t, off_i, uniforms, batch: int) -> None:
    d.update(
        seed_ptr=c.ptr(seed_t),
        seed_value=seed_i,
        rows_per_seed=1 if seed_t is not None and seed_t.numel() == batch else batch,
        offset_ptr=c.ptr(off_t),
        offset_value=off_i,
        uniforms=c.ptr(uniforms),
    )


def _rows(target, draft, tokens, row: str) -> dict:
    """Pointer/stride fields of the probability rows and token ids (``row`` names the stride of
    dim 1 in the kernel's struct: "k" chain, "n" tree / path acceptance, "l" Jacobi)."""
    return {
        "target": target.data_ptr(),
        "target_sb": target.stride(0),
        f"target_s{row}": target.stride(1),
        "draft": c.ptr(draft),
        "draft_sb": draft.stride(0) if draft is not None else 0,
        f"draft_s{row}": draft.stride(1) if draft is not None else 0,
        "tokens": tokens.data_ptr(),
        "tokens_is64": tokens.dtype == torch.int64,
        "tokens_sb": tokens.stride(0),
    }


def verify_chain(
    be, target, tokens, draft, num_draft, seed_t, seed_i, off_t, off_i, nb, delta, greedy, uniforms
):
    b, k1, v = target.shape
    target = _f32_rows(target)
    draft = _f32_rows(draft) if draft is not None else None
    tokens = _ids(tokens)
    num_draft = num_draft.to(torch.int64).contiguous() if num_draft is not None else None
    nb = c.int32_ids(nb)  # LANTERN neighbour ids
    uniforms = uniforms.contiguous() if uniforms is not None else None
    out_tokens = torch.empty(b, k1, dtype=torch.int32, device=target.device)
    out_num = torch.empty(b, dtype=torch.int32, device=target.device)
    d = _rows(target, draft, tokens, "k")
    d.update(
        num_draft=c.ptr(num_draft),
        batch=b,
        k=k1 - 1,
        vocab=v,
        neighbors=c.ptr(nb),
        neighbors_k=nb.shape[1] if nb is not None else 0,
        delta=float(delta),
        greedy=bool(greedy),
        out_tokens=out_tokens.data_ptr(),
        out_num_accepted=out_num.data_ptr(),
    )
    _rng(d, seed_t, seed_i, off_t, off_i, uniforms, b)
    if b > 0:
        if be == "cuda":
            _build._C.verify_chain_cuda(d, c.stream_of(target.device))
        else:
            _build._C.verify_chain_cpu(d)
    return out_tokens, out_num


def verify_tree(
    be,
    target,
    first_child,
    next_sibling,
    width,
    tokens,
    draft,
    wor,
    seed_t,
    seed_i,
    off_t,
    off_i,
    nb,
    delta,
    greedy,
    uniforms,
):
    b, n, v = target.shape
    dev = target.device
    target = _f32_rows(target)
    draft = _f32_rows(draft) if draft is not None else None
    tokens = _ids(tokens)
    fc = first_child.to(torch.int32).contiguous()
    ns = next_sibling.to(torch.int32).contiguous()
    nb = c.int32_ids(nb)  # LANTERN neighbour ids
    uniforms = uniforms.contiguous() if uniforms is not None else None
    # Workspaces: the current node's residual target row (and renormalised draft row without
    # replacement) after a rejected child; rewritten in place, never read before written.
    ws_p = None if greedy else torch.empty(b, v, dtype=torch.float32, device=dev)
    ws_q = torch.empty(b, v, dtype=torch.float32, device=dev) if wor and draft is not None else None
    out_path = torch.empty(b, width, dtype=torch.int32, device=dev)
    out_tokens = torch.empty(b, width, dtype=torch.int32, device=dev)
    out_num = torch.empty(b, dtype=torch.int32, device=dev)
    d = _rows(target, draft, tokens, "n")
    d.update(
        first_child=fc.data_ptr(),
        next_sibling=ns.data_ptr(),
        tree_sb=n if fc.shape[0] > 1 else 0,
        batch=b,
        nodes=n,
        vocab=v,
        width=width,
        without_replacement=bool(wor),
        greedy=bool(greedy),
        neighbors=c.ptr(nb),
        neighbors_k=nb.shape[1] if nb is not None else 0,
        delta=float(delta),
        ws_p=c.ptr(ws_p),
        ws_q=c.ptr(ws_q),
        out_path=out_path.data_ptr(),
        out_tokens=out_tokens.data_ptr(),
        out_num_accepted=out_num.data_ptr(),
    )
    _rng(d, seed_t, seed_i, off_t, off_i, uniforms, b)
    if b > 0:
        if be == "cuda":
            _build._C.verify_tree_cuda(d, c.stream_of(dev))
        else:
            _build._C.verify_tree_cpu(d)
    return out_path, out_tokens, out_num


def sample_without_replacement(be, probs, k, seed_t, seed_i, off_t, off_i, uniforms):
    v = probs.shape[-1]
    lead = tuple(probs.shape[:-1])
    p = _f32_rows(probs.reshape(-1, v))
    rows = p.shape[0]
    out = torch.empty(rows, k, dtype=torch.int32, device=probs.device)
    uniforms = uniforms.reshape(rows, v).contiguous() if uniforms is not None else None
    d = dict(
        probs=p.data_ptr(),
        row_stride=p.stride(0),
        rows=rows,
        vocab=v,
        k=k,
        out=out.data_ptr(),
    )
    _rng(d, seed_t, seed_i, off_t, off_i, uniforms, rows)
    if seed_t is not None:
        d["rows_per_seed"] = max(rows // seed_t.numel(), 1)
    if rows > 0:
        if be == "cuda":
            _build._C.sample_without_replacement_cuda(d, c.stream_of(probs.device))
        else:
            _build._C.sample_without_replacement_cpu(d)
    return out.reshape(*lead, k)


def path_acceptance(be, target, draft, parents, num_paths, tokens):
    b, n, v = target.shape
    dev = target.device
    target = _f32_rows(target)
    draft = _f32_rows(draft) if draft is not None else None
    tokens = _ids(tokens)
    par = parents.to(device=dev, dtype=torch.int32).contiguous()
    kappa = torch.empty(b, num_paths, dtype=torch.float32, device=dev)
    exp_len = torch.empty(b, num_paths, dtype=torch.float32, device=dev)
    # CUDA: trees too large for shared memory keep their per-node state in a global workspace
    ws = None
    ws_row = _build._C.path_acceptance_ws_size(n) if be == "cuda" else 0
    if ws_row:
        ws = torch.empty(b * ws_row, dtype=torch.uint8, device=dev)
    d = _rows(target, draft, tokens, "n")
    d.update(
        parents=par.data_ptr(),
        parents_sb=n if par.shape[0] > 1 else 0,
        batch=b,
        nodes=n,
        vocab=v,
        num_paths=num_paths,
        workspace=c.ptr(ws),
        out_kappa=kappa.data_ptr(),
        out_expected_len=exp_len.data_ptr(),
    )
    if b > 0:
        if be == "cuda":
            _build._C.path_acceptance_cuda(d, c.stream_of(dev))
        else:
            _build._C.path_acceptance_cpu(d)
    return kappa, exp_len

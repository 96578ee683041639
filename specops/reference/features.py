"""Reference features ops (see DESIGN.md, Public API): row gathers, the EAGLE/HiViS drafter
input, VVS's token-level feature cache and its path-similarity skip decision.

Out-of-range indices never fault: in fast mode an index outside [0, N) (or a token id outside
[0, V)) reads as a zero row and a write to a position outside [0, capacity) is dropped; the
public ops raise on them in validation mode (-1 is always allowed as padding).
"""

from __future__ import annotations

import torch

__all__ = [
    "gather_rows",
    "drafter_inputs",
    "feature_cache_write",
    "feature_cache_age",
    "recent_positions",
    "path_similarity",
]


def gather_rows(src: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """out[b, j] = src[b, index[b, j]] for src [B, N, H], index [B, M]; zeros where
    index[b, j] is -1 (or outside [0, N))."""
    b, n, h = src.shape
    ok = (index >= 0) & (index < n)
    if n == 0:
        return src.new_zeros(b, index.shape[1], h)
    idx = torch.where(ok, index, 0).long()
    rows = src.gather(1, idx[:, :, None].expand(-1, -1, h))
    return torch.where(ok[:, :, None], rows, torch.zeros((), dtype=src.dtype, device=src.device))


def drafter_inputs(
    embedding: torch.Tensor,
    tokens: torch.Tensor,
    features: torch.Tensor,
    step_embedding: torch.Tensor | None = None,
) -> torch.Tensor:
    """cat([embedding[tokens], features, step_embedding], -1) -> [B, M, E + H (+ S)].

    embedding [V, E], tokens [B, M] (ids outside [0, V), e.g. -1 padding, give zero rows),
    features [B, M, H], step_embedding None, [S] (the same for every row) or [B, M, S]."""
    v = embedding.shape[0]
    ok = (tokens >= 0) & (tokens < v)
    if v == 0:
        emb = embedding.new_zeros(*tokens.shape, embedding.shape[1])
    else:
        emb = embedding[torch.where(ok, tokens, 0).long()]
        emb = torch.where(ok[..., None], emb, torch.zeros((), dtype=emb.dtype, device=emb.device))
    parts = [emb, features.to(emb.dtype)]
    if step_embedding is not None:
        if step_embedding.dim() == 1:
            step_embedding = step_embedding.expand(*tokens.shape, -1)
        parts.append(step_embedding.to(emb.dtype))
    return torch.cat(parts, -1)


def feature_cache_write(store, stamps, positions, feats, step) -> None:
    """store [B, CAP, H], stamps [B, CAP] int32 (-1: never written).  For every positions[b, j]
    in [0, CAP) (others, e.g. -1, are skipped): store[b, p] = feats[b, j], stamps[b, p] = step.
    ``step``: int, or an integer tensor [] / [1] / [B] (per request).  A position repeated within
    a row gets one of its rows (which one is unspecified)."""
    b, cap, _ = store.shape
    m = positions.shape[1]
    if m == 0 or cap == 0:
        return
    ok = (positions >= 0) & (positions < cap)
    step = torch.as_tensor(step, device=stamps.device).reshape(-1, 1).to(torch.int32)
    step = step.expand(b, m)
    # Skipped entries repeat a harmless write so that no host sync is needed to drop them:
    # the row's first valid entry (same value, same place), or, in a row with none, a
    # rewrite of slot 0 with its own contents.
    first = ok.int().argmax(1, keepdim=True)  # first valid entry (0 when there is none)
    any_ok = ok.any(1, keepdim=True)
    pos = torch.where(ok, positions, torch.where(any_ok, positions.gather(1, first), 0)).long()
    src_j = torch.where(ok, torch.arange(m, device=ok.device), torch.where(any_ok, first, -1))
    rows = torch.arange(b, device=ok.device)[:, None].expand(b, m)
    keep = src_j >= 0
    old = store[rows, pos]
    new = feats.to(store.dtype).gather(1, src_j.clamp_min(0)[:, :, None].expand_as(old))
    store[rows, pos] = torch.where(keep[:, :, None], new, old)
    new_stamp = step.gather(1, src_j.clamp_min(0))
    stamps[rows, pos] = torch.where(keep, new_stamp, stamps[rows, pos])


def feature_cache_age(stamps, positions, step) -> torch.Tensor:
    """age[b, j] = step - stamps[b, positions[b, j]] (int32): how many steps old the cached
    feature is; -1 for padding / out-of-range positions and never-written slots."""
    cap = stamps.shape[1]
    ok = (positions >= 0) & (positions < cap)
    if cap == 0:
        return torch.full(positions.shape, -1, dtype=torch.int32, device=positions.device)
    stamp = stamps.gather(1, torch.where(ok, positions, 0).long())
    step = torch.as_tensor(step, device=stamps.device).reshape(-1, 1).to(torch.int32)
    ok = ok & (stamp >= 0)
    return torch.where(ok, step - stamp, -1).to(torch.int32)


def recent_positions(end, count, width: int, device=None) -> torch.Tensor:
    """[B, width] int32: the ``count[b]`` positions just before ``end[b]`` in order
    (end - count, ..., end - 1), then -1; positions below 0 are -1 too.

    VVS's retrieval of stale features for tokens accepted without verification: with ``end``
    the first position whose token has no cached feature yet (the verified prefix) and
    ``count`` the number of unverified tokens, ``cache.read(recent_positions(end, count, W))``
    gives the most recent cached features (mixed staleness, no host sync)."""
    if device is None:
        tensors = [t for t in (end, count) if isinstance(t, torch.Tensor)]
        device = tensors[0].device if tensors else torch.device("cpu")
    end = torch.as_tensor(end, device=device).reshape(-1, 1).long()
    count = torch.as_tensor(count, device=device).reshape(-1, 1).long()
    j = torch.arange(width, device=end.device)[None, :]
    pos = end - count + j
    ok = (j < count) & (pos >= 0)
    return torch.where(ok, pos, -1).to(torch.int32)


def path_similarity(
    paths: torch.Tensor, codebook: torch.Tensor, *, alpha: float = 0.9, stride: int = 1
) -> torch.Tensor:
    """VVS Eq. 2: exponentially weighted mean pairwise cosine similarity of P candidate paths.

    paths [B, P, L] token ids, codebook [V, C].  With e = codebook[paths] / ||codebook[paths]||
    (zero vectors for ids outside [0, V); norms clamped at 1e-12) and the positions
    l = 0, stride, 2 stride, ... < L:

        S_l = 1 / (P (P - 1)) * sum_{i != j} <e_i,l , e_j,l>
            = (||sum_i e_i,l||^2 - sum_i ||e_i,l||^2) / (P (P - 1))
        result = sum_l alpha^l S_l / sum_l alpha^l        (l: the position in the path)

    -> [B] float32, computed in float64.  P = 1: 1.0 (a single path agrees with itself; the
    mean over an empty set of pairs is otherwise undefined)."""
    b, p, length = paths.shape
    if p < 2:
        return torch.ones(b, dtype=torch.float32, device=paths.device)
    v = codebook.shape[0]
    ids = paths[:, :, ::stride]
    ok = (ids >= 0) & (ids < v)
    if v == 0:  # an empty codebook: every id is outside it, every vector zero
        x = codebook.new_zeros(*ids.shape, codebook.shape[1], dtype=torch.float64)
    else:
        x = codebook[torch.where(ok, ids, 0).long()].double() * ok[..., None]  # [B, P, L', C]
    e = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    pair_sum = e.sum(1).pow(2).sum(-1) - e.pow(2).sum(-1).sum(1)  # [B, L']
    s = pair_sum / (p * (p - 1))
    w = torch.tensor(alpha, dtype=torch.float64, device=paths.device) ** torch.arange(
        0, length, stride, device=paths.device, dtype=torch.float64
    )
    return ((s * w).sum(-1) / w.sum()).to(torch.float32)

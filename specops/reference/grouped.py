"""GSD grouped acceptance (So et al., ICCV 2025, arXiv 2508.07747): ``relax=Grouping(codebook,
...)``.  LOSSY.

A draft ``x`` is judged with a group: the ``w`` nearest tokens below and above it in the key
order ``(p(y), y)`` (probability, then id: the target's logit order, ties by id), kept where
``|p(y) - p(x)| < p_threshold`` and, both being image tokens, their VQ codes' squared distance
is below ``d_threshold``.  ``x`` is accepted iff ``u * Q < P`` with ``P``, ``Q`` the group's
target and draft masses, i.e. with probability ``min(1, P / Q)``; a rejected position is
resampled from ``max(p - q, 0)`` as always.  The row is never sorted: the window is a selection.
Every rounding, order and edge case (drafts outside the vocabulary or the image range, the
float32/float64 sums and their order, how this differs from the authors' code):
docs/reference_semantics.md, "Verification", grouped acceptance."""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["Grouping", "group_window", "group_sums", "check_grouping", "MAX_GROUP_WINDOW"]

MAX_GROUP_WINDOW = 16  # the compiled kernels keep 2 * w neighbours in fixed arrays


class Grouping(NamedTuple):
    """GSD grouped acceptance (see the module docstring).  LOSSY.

    ``codebook`` [V_img, C] float: the VQ code embeddings of the image tokens, whose ids are
    ``image_range = (start, end)``, end - start = V_img (None: the whole vocabulary [0, V)).
    ``window`` w in [1, 16] (the authors: 7), ``p_threshold`` in (0, 1] (0.15),
    ``d_threshold`` > 0 (0.5, on squared distances)."""

    codebook: torch.Tensor
    window: int = 7
    p_threshold: float = 0.15
    d_threshold: float = 0.5
    image_range: tuple[int, int] | None = None

    @property
    def image_start(self) -> int:
        return 0 if self.image_range is None else int(self.image_range[0])


def check_grouping(op: str, g: Grouping, v: int) -> None:
    """One clear ValueError / TypeError naming the bad field of ``relax`` (no data read)."""

    def num(name, val, integer=False):
        ok = isinstance(val, int) if integer else isinstance(val, (int, float))
        if isinstance(val, bool) or not ok:
            kind = "an int" if integer else "a float"
            raise TypeError(f"{op}: relax.{name} must be {kind}, got {type(val).__name__}")
        return val

    w = num("window", g.window, integer=True)
    if not 1 <= w <= MAX_GROUP_WINDOW:
        raise ValueError(f"{op}: relax.window must be in [1, {MAX_GROUP_WINDOW}], got {w}")
    pt = num("p_threshold", g.p_threshold)
    if not 0 < pt <= 1:
        raise ValueError(f"{op}: relax.p_threshold must be in (0, 1], got {pt}")
    dt = num("d_threshold", g.d_threshold)
    if not 0 < dt < float("inf"):
        raise ValueError(f"{op}: relax.d_threshold must be finite and > 0, got {dt}")
    cb = g.codebook
    if not isinstance(cb, torch.Tensor) or cb.ndim != 2 or not cb.is_floating_point():
        got = tuple(cb.shape) if isinstance(cb, torch.Tensor) else type(cb).__name__
        raise ValueError(f"{op}: relax.codebook must be a float tensor [V_img, C], got {got}")
    start, end = (0, v) if g.image_range is None else g.image_range
    if not 0 <= start <= end <= v:
        raise ValueError(
            f"{op}: relax.image_range must satisfy 0 <= start <= end <= V={v}, got {g.image_range}"
        )
    if cb.shape[0] != end - start:
        raise ValueError(
            f"{op}: relax.codebook has {cb.shape[0]} rows, but the vocabulary's image range "
            f"[{start}, {end}) holds {end - start} tokens"
        )


def _keys(p: torch.Tensor) -> torch.Tensor:
    """int64 key (p(y), y) per entry: the float32 bits of p >= 0 are monotone as integers
    (p + 0.0 turns -0.0 into +0.0), the id below them breaks ties."""
    bits = (p.float() + 0.0).contiguous().view(torch.int32).long()
    ids = torch.arange(p.shape[-1], device=p.device)
    return (bits << 32) | ids


def group_window(p: torch.Tensor, x: torch.Tensor, w: int) -> torch.Tensor:
    """The +-w neighbours of x [R] in the (p, id) order of the rows p [R, V]: [R, 2w] int64,
    columns 0..w-1 the nearest keys below x's (nearest first), w..2w-1 the nearest above
    (nearest first), -1 where the order ends.  Partial selections (topk), no sort of the row;
    rows with x outside [0, V) give all -1."""
    r, v = p.shape
    ok = (x >= 0) & (x < v)
    key = _keys(p)
    kx = key.gather(-1, x.clamp(0, v - 1)[:, None])
    lo_min = torch.iinfo(torch.int64).min
    k = min(w, v)
    below = torch.where(key < kx, key, lo_min).topk(k, -1)  # largest keys under x's
    above = torch.where(key > kx, -key, lo_min).topk(k, -1)  # smallest keys over x's
    ids = torch.cat(
        [
            torch.where(below.values != lo_min, below.values & 0xFFFFFFFF, -1),
            torch.where(above.values != lo_min, (-above.values) & 0xFFFFFFFF, -1),
        ],
        -1,
    )
    if k < w:  # pad to [R, 2w]
        pad = torch.full((r, w - k), -1, dtype=torch.int64, device=p.device)
        ids = torch.cat([ids[:, :k], pad, ids[:, k:], pad], -1)
    return torch.where(ok[:, None], ids, -1)


def group_mask(p: torch.Tensor, x: torch.Tensor, g: Grouping) -> tuple[torch.Tensor, torch.Tensor]:
    """(window ids [R, 2w] int64, in-group mask [R, 2w] bool) of the drafts x [R] under p."""
    v = p.shape[-1]
    nb = group_window(p, x, int(g.window))
    has = nb >= 0
    nbc = nb.clamp(min=0)
    px = p.gather(-1, x.clamp(0, v - 1)[:, None])
    close_p = (p.gather(-1, nbc) - px).abs() < torch.tensor(float(g.p_threshold)).float()
    cb = g.codebook.to(p.device)
    vi = cb.shape[0]
    xi = x - g.image_start
    yi = nb - g.image_start
    img = ((xi >= 0) & (xi < vi))[:, None] & (yi >= 0) & (yi < vi)
    ex = cb[xi.clamp(0, vi - 1)].double()  # [R, C]
    ey = cb[yi.clamp(0, vi - 1)].double()  # [R, 2w, C]
    d = ((ex[:, None, :] - ey) ** 2).sum(-1)
    return nb, has & close_p & img & (d < float(g.d_threshold))


def group_sums(
    p: torch.Tensor, q: torch.Tensor | None, x: torch.Tensor, g: Grouping
) -> tuple[torch.Tensor, torch.Tensor]:
    """(P, Q) float32 [R]: the target and draft mass of x's group (see the module docstring);
    q None = one-hot of x.  Both 0 for x outside [0, V)."""
    v = p.shape[-1]
    ok = (x >= 0) & (x < v)
    xc = x.clamp(0, v - 1)[:, None]
    nb, inside = group_mask(p, x, g)
    nbc = nb.clamp(min=0)

    def mass_of(w: torch.Tensor) -> torch.Tensor:
        s = w.gather(-1, xc)[:, 0].double()
        s = s + torch.where(inside, w.gather(-1, nbc).double(), 0.0).sum(-1)
        return torch.where(ok, s, 0.0).float()

    big_p = mass_of(p)
    big_q = ok.float() if q is None else mass_of(q)
    return big_p, big_q

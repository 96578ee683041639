"""The drafter's training objective and learning-rate schedule, shared by the trainers
(``specops.models.train``, ``train_vsd``, ``train_hivis``).

``drafter_loss``: the feature drafter (``Drafter``) on the frozen target's last hidden states f and
distributions p.  Step 0 input at t: [e(x_{t+1}) || f_t || e_seq^0], target f_{t+1}, p_{t+1}.
Steps s = 1..3 unroll the drafter on its own predicted features, as at inference time
("training-time test"): input [e(x_{t+1+s}) || g^{s-1}_t || e_seq^s] at position t + s attends to
the real step-0 keys at positions <= t and to its own step-1..s keys of the same t (the path it
drafted).  Loss per step: soft cross-entropy to p (so the drafter matches the target
distribution, which is what acceptance rewards) + smooth-L1 on the features.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from specops.models.drafter import Drafter
from specops.models.transformer import Transformer

__all__ = ["cosine_lr", "drafter_loss"]


def cosine_lr(step: int, total: int, peak: float, warmup: int = 30) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup))))


def drafter_loss(
    drafter: Drafter, target: Transformer, seq: torch.Tensor, steps: int, keep=None, compact=False
):
    """Unrolled drafter loss on sequences seq [B, T] (the module docstring).  ``keep`` (HiViS,
    ``train_hivis``): the positions J of seq the drafter's sequence holds (default all); entry c
    then sits at the target's position J[c] + s, or at c + s with ``compact``, and when positions
    are hidden entry 0 (the class) is context only (inference never drafts from it)."""
    with torch.no_grad():
        logits, f = target.forward_train(seq)
        p = logits.softmax(-1)  # p[t] = target distribution of x_{t+1}
    hidden = keep is not None and keep.numel() < seq.shape[1]
    if keep is not None:
        seq, f, p = seq[:, keep], f[:, keep], p[:, keep]  # the drafter's (compact) sequence
    b, t_len = seq.shape
    n = t_len - 1  # drafter indices t = 0 .. n-1
    idx = torch.arange(n)
    at = idx if keep is None or compact else keep[idx]  # entry t's position at step 0
    causal = idx[None, :] <= idx[:, None]
    diag = idx[None, :] == idx[:, None]
    keys: list = []
    feat = f[:, :n]
    total = 0.0
    for s in range(steps + 1):
        nxt = (idx + 1 + s).clamp(max=t_len - 1)
        pos = (at + s).clamp(max=target.cfg.max_seq - 1).expand(b, n)
        if s == 0:
            mask, extra = None, None
        else:
            mask = torch.cat([causal] + [diag] * s, 1)
            extra = (torch.cat([k for k, _ in keys], 1), torch.cat([v for _, v in keys], 1))
        lg, g, kv = drafter.forward_train(seq[:, nxt], feat, s, pos, mask, extra)
        keys.append(kv)
        # entry t predicts x_{t+2+s} (x_{J[t+2+s]}), a real image token
        valid = (idx + 1 + s <= t_len - 2) & ((idx > 0) | (not hidden))
        ce = -(p[:, nxt] * lg.log_softmax(-1)).sum(-1)  # soft cross-entropy to the target
        reg = F.smooth_l1_loss(g, f[:, nxt], reduction="none").sum(-1)
        total = total + ((ce + 0.1 * reg) * valid).sum() / (valid.sum() * b)
        feat = g
    return total / (steps + 1)

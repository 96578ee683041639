"""A HiViS drafter for the embedded model: ``python -m specops.models.train_hivis``.

The embedded target stands in for a VLM by image *completion*: its prompt is the class token
followed by the first k image tokens of a reference image (the visual tokens), and it generates
the rest.  HiViS hides the visual tokens from the drafter (``speculative(..., hide=mask)``):
this script trains the one-layer ``Drafter`` on compact sequences that keep only the class, the
last prompt and the generated positions, with the frozen target's features from the *full*
sequence, at the target's positions (``hide_positions="target"``; ``--positions compact`` for
the paper's).  k is drawn per batch from {1, 16, 32, .., 192}; about 1-2 CPU minutes.

Writes ``specops/models/weights/drafter_hivis.pt`` (float16, ~0.5 MB); ``load_hivis_drafter``
reads it.  The recipe in full: docs/training.md, "A HiViS drafter".
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from specops.models.data import make_dataset
from specops.models.drafter import Drafter
from specops.models.drafter_loss import cosine_lr, drafter_loss
from specops.models.loading import load_default, load_drafter_file
from specops.models.train import WEIGHTS, half_state
from specops.models.transformer import Transformer

__all__ = ["hivis_loss", "load_hivis_drafter", "kept_positions"]


def kept_positions(k: int, t_len: int) -> torch.Tensor:
    """The drafter's positions J of a sequence of t_len tokens whose tokens 1 .. k - 1 are the
    hidden image prefix (k = 1: all)."""
    return torch.cat([torch.zeros(1, dtype=torch.long), torch.arange(max(k, 1), t_len)])


def hivis_loss(
    drafter: Drafter, target: Transformer, seq: torch.Tensor, k: int, steps: int, compact=False
):
    """Unrolled drafter loss on seq [B, T] with the prefix tokens 1 .. k - 1 hidden; drafter
    positions the target's (J[c] + s) or, with ``compact``, c + s."""
    keep = kept_positions(k, seq.shape[1])
    return drafter_loss(drafter, target, seq, steps, keep=keep, compact=compact)


def load_hivis_drafter(target: Transformer, *, weights_dir=None) -> Drafter:
    """The HiViS drafter (``drafter_hivis.pt``) bound to ``target``, on its device and dtype."""
    w = target.embed.weight
    return load_drafter_file(target, "drafter_hivis.pt", weights_dir, w.device, w.dtype)[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(WEIGHTS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-class", type=int, default=600)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--unroll", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--positions", choices=["target", "compact"], default="target")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    m = load_default(weights_dir=args.out, with_drafter=False)
    target = m.target
    images, labels = make_dataset(args.per_class, seed=args.seed)
    tokens, labels = m.vq.encode(images).reshape(len(images), -1), torch.as_tensor(labels)
    torch.manual_seed(args.seed + 1)
    drafter = Drafter(target.cfg).bind(target)
    opt = torch.optim.AdamW(drafter.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator().manual_seed(args.seed + 1)
    t0 = time.time()
    for step in range(args.steps):
        idx = torch.randint(0, tokens.shape[0], (args.batch,), generator=g)
        seq = torch.cat([(labels[idx] + target.cfg.vocab)[:, None], tokens[idx]], 1)
        rows = int(torch.randint(0, 13, (1,), generator=g))
        k = max(16 * rows, 1)  # visible prefix tokens t_1 .. t_{k-1} hidden, t_k kept
        for group in opt.param_groups:
            group["lr"] = cosine_lr(step, args.steps, args.lr)
        loss = hivis_loss(drafter, target, seq, k, args.unroll, args.positions == "compact")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == args.steps - 1:
            print(f"hivis drafter step {step:4d} loss {loss.item():.3f} ({time.time() - t0:.0f}s)")
    record = dict(
        steps=args.steps, batch=args.batch, seconds=time.time() - t0, loss=loss.item(),
        unroll=args.unroll, seed=args.seed, hidden_rows="0..12 per batch", positions=args.positions,
    )  # fmt: skip
    state = {
        "step_dim": drafter.step_embed.embedding_dim,
        "max_step": drafter.max_step,
        "state": half_state(drafter),
        "train": record,
    }
    torch.save(state, Path(args.out) / "drafter_hivis.pt")
    print("wrote", Path(args.out) / "drafter_hivis.pt")


if __name__ == "__main__":
    main()

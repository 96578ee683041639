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

from pathlib import Path

import torch

from specops.models.data import make_dataset
from specops.models.drafter import Drafter
from specops.models.drafter_loss import drafter_loss
from specops.models.loading import load_default, load_drafter_file
from specops.models.train import class_batch, drafter_state, fit, new_drafter, training_parser
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
    options = {"--steps": 300, "--batch": 8, "--lr": 2e-3, "--unroll": 3, "--threads": 1}
    ap = training_parser(__doc__, options)
    ap.add_argument("--positions", choices=["target", "compact"], default="target")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    m = load_default(weights_dir=args.out, with_drafter=False)
    target = m.target
    images, labels = make_dataset(args.per_class, seed=args.seed)
    tokens, labels = m.vq.encode(images).reshape(len(images), -1), torch.as_tensor(labels)
    drafter, opt, g = new_drafter(target, args.seed, args.lr)

    def batch_loss():
        seq = class_batch(tokens, labels, args.batch, target.cfg.vocab, g)
        rows = int(torch.randint(0, 13, (1,), generator=g))
        k = max(16 * rows, 1)  # visible prefix tokens t_1 .. t_{k-1} hidden, t_k kept
        return hivis_loss(drafter, target, seq, k, args.unroll, args.positions == "compact")

    label = "hivis drafter"
    seconds, loss = fit(drafter, opt, args.steps, args.lr, batch_loss, label, progress=False)
    record = dict(
        steps=args.steps, batch=args.batch, seconds=seconds, loss=loss,
        unroll=args.unroll, seed=args.seed, hidden_rows="0..12 per batch", positions=args.positions,
    )  # fmt: skip
    state = drafter_state(drafter, record)
    torch.save(state, Path(args.out) / "drafter_hivis.pt")
    print("wrote", Path(args.out) / "drafter_hivis.pt")


if __name__ == "__main__":
    main()

"""Train the embedded demo models from scratch: ``python -m specops.models.train``.

Three stages, all on CPU in a few minutes, deterministic given the seed (up to thread timing):
data + tokenizer (procedural 64x64 images, a 512-entry k-means patch codebook, 256 tokens an
image), the class-conditional AR target (``Transformer``), and the feature drafter
(``Drafter``, objective ``specops.models.drafter_loss``).  ``--objective vsd`` then fine-tunes
the CE drafter with VSD's path-level objective (``specops.models.train_vsd``) into
``drafter_vsd.pt``; ``--only-drafter --objective vsd`` starts from the saved ``drafter.pt``.

Weights are written to ``specops/models/weights/`` in float16 (``vq.pt``, ``ar.pt``,
``drafter.pt``, ``drafter_vsd.pt``) with their configs and the training record.
Each stage in full: docs/training.md.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from specops._progress import Progress
from specops.models.data import CLASSES, make_dataset
from specops.models.drafter import Drafter
from specops.models.drafter_loss import cosine_lr, drafter_loss
from specops.models.transformer import ARConfig, Transformer
from specops.models.vq import PatchVQ, kmeans

WEIGHTS = Path(__file__).parent / "weights"


def build_tokens(args):
    t0 = time.time()
    images, labels = make_dataset(args.per_class, seed=args.seed)
    vq = PatchVQ(torch.zeros(1, 48), 4)
    patches = vq.patches(images[: 300 * len(CLASSES)]).reshape(-1, 48)
    vq = PatchVQ(kmeans(patches, args.codebook, iters=30, seed=args.seed), 4)
    tokens = vq.encode(images).reshape(len(images), -1)  # [M, 256] raster order
    print(f"data+vq: {len(images)} images, {tokens.shape[1]} tokens each, {time.time() - t0:.1f}s")
    return vq, tokens, torch.as_tensor(labels)


def fit(module, opt, steps: int, lr: float, batch_loss, label: str, *, progress: bool = True):
    """``steps`` optimizer steps of ``module`` on ``batch_loss()`` (which draws the step's batch
    and returns its loss) under the cosine schedule peaking at ``lr``, the gradient norm clipped
    at 1; prints ``{label} step .. loss ..`` every 50 steps and at the last (with ``progress``, a
    progress line on a terminal in between).  -> (seconds, last loss)."""
    t0 = time.time()
    bar = Progress(label, steps, unit="steps") if progress else None
    for step in range(steps):
        if bar is not None:
            bar.update(step)
        for group in opt.param_groups:
            group["lr"] = cosine_lr(step, steps, lr)
        loss = batch_loss()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            if bar is not None:
                bar.clear()
            print(
                f"{label} step {step:4d} loss {loss.item():.3f} ({time.time() - t0:.0f}s)",
                flush=True,
            )
    return time.time() - t0, loss.item()


def train_ar(args, cfg: ARConfig, tokens, labels):
    torch.manual_seed(args.seed)
    model = Transformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.05)
    g = torch.Generator().manual_seed(args.seed)

    def batch_loss():
        idx = torch.randint(0, tokens.shape[0], (args.batch,), generator=g)
        cls = labels[idx] + cfg.vocab
        drop = torch.rand(args.batch, generator=g) < 0.1
        cls = torch.where(drop, cfg.null_class, cls)
        seq = torch.cat([cls[:, None], tokens[idx]], 1)  # [B, 257]
        logits, _ = model.forward_train(seq[:, :-1])
        return F.cross_entropy(logits.reshape(-1, cfg.vocab), seq[:, 1:].reshape(-1))

    return model, *fit(model, opt, args.ar_steps, args.lr, batch_loss, "ar")


def new_drafter(target: Transformer, seed: int, lr: float):
    """A fresh ``Drafter`` bound to ``target`` (torch seeded with ``seed`` + 1), its AdamW and the
    batch generator (seeded the same): -> (drafter, optimizer, generator)."""
    torch.manual_seed(seed + 1)
    drafter = Drafter(target.cfg).bind(target)
    opt = torch.optim.AdamW(drafter.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    return drafter, opt, torch.Generator().manual_seed(seed + 1)


def class_batch(tokens, labels, batch: int, vocab: int, g: torch.Generator) -> torch.Tensor:
    """``batch`` sequences [class token, image tokens] drawn with ``g``."""
    idx = torch.randint(0, tokens.shape[0], (batch,), generator=g)
    return torch.cat([(labels[idx] + vocab)[:, None], tokens[idx]], 1)


def train_drafter(args, target: Transformer, tokens, labels):
    for p in target.parameters():
        p.requires_grad_(False)
    drafter, opt, g = new_drafter(target, args.seed, args.lr)

    def batch_loss():
        seq = class_batch(tokens, labels, args.drafter_batch, target.cfg.vocab, g)
        return drafter_loss(drafter, target, seq, args.unroll)

    return drafter, *fit(drafter, opt, args.drafter_steps, args.lr, batch_loss, "drafter")


def half_state(module: torch.nn.Module) -> dict:
    return {k: v.half() if v.is_floating_point() else v for k, v in module.state_dict().items()}


def training_parser(doc: str, options: dict[str, int | float]) -> argparse.ArgumentParser:
    """The parser of a training script: ``--out`` (the weights dir), ``--seed``, ``--per-class``
    (training images per class), then one option per entry of ``options`` (flag: default, typed
    like the default), in order."""
    ap = argparse.ArgumentParser(allow_abbrev=False, description=doc.split("\n")[0])
    ap.add_argument("--out", default=str(WEIGHTS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-class", type=int, default=600)
    for flag, default in options.items():
        ap.add_argument(flag, type=type(default), default=default)
    return ap


def main(argv=None):
    options = {"--codebook": 512, "--ar-steps": 3000, "--batch": 16, "--lr": 2e-3}
    options |= {"--drafter-steps": 300, "--drafter-batch": 8, "--unroll": 3, "--threads": 2}
    ap = training_parser(__doc__, options)
    ap.add_argument("--only-drafter", action="store_true", help="reuse the saved vq.pt/ar.pt")
    ap.add_argument(
        "--objective",
        choices=("ce", "vsd"),
        default="ce",
        help="ce: train drafter.pt; vsd: fine-tune the CE drafter into drafter_vsd.pt",
    )
    ap.add_argument("--vsd-steps", type=int, default=300)
    ap.add_argument("--vsd-lr", type=float, default=5e-4)
    ap.add_argument("--vsd-weight", type=float, default=1.0, help="path term next to CE")
    ap.add_argument("--vsd-samples", type=int, default=8, help="S, proposals per prefix")
    ap.add_argument("--vsd-prefixes", type=int, default=16, help="prefixes per sequence")
    ap.add_argument("--vsd-seed", type=int, default=0, help="batch / E-step draws (not data)")
    ap.add_argument("--vsd-tau", type=float, default=0.2, help="CAR temperature (Eq. 16)")
    ap.add_argument(
        "--vsd-pathwise",
        type=float,
        default=0.0,
        help="weight of the pathwise d/dq of Eq. 10 (extension; 0 = the paper's)",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    if args.only_drafter:
        from specops.models.loading import load_default

        m = load_default(weights_dir=out, with_drafter=args.objective == "vsd")
        target, vq, drafter = m.target, m.vq, m.drafter
        images, labels = make_dataset(args.per_class, seed=args.seed)
        tokens, labels = vq.encode(images).reshape(len(images), -1), torch.as_tensor(labels)
    else:
        cfg = ARConfig(vocab=args.codebook, num_classes=len(CLASSES))
        vq, tokens, labels = build_tokens(args)
        vq_state = {"codebook": vq.codebook.clone(), "patch": vq.patch, "classes": CLASSES}
        torch.save(vq_state, out / "vq.pt")
        target, secs, loss = train_ar(args, cfg, tokens, labels)
        record = {
            "steps": args.ar_steps,
            "batch": args.batch,
            "seconds": secs,
            "loss": loss,
            "images": len(labels),
            "seed": args.seed,
            "threads": args.threads,
        }
        state = {"config": cfg.to_dict(), "state": half_state(target), "train": record}
        torch.save(state, out / "ar.pt")
    if not (args.only_drafter and args.objective == "vsd"):
        drafter, secs, loss = train_drafter(args, target, tokens, labels)
        save_drafter(out / "drafter.pt", drafter, args, secs, loss)
    if args.objective == "vsd":
        from specops.models.train_vsd import train_drafter_vsd

        drafter, secs, loss = train_drafter_vsd(args, target, drafter, tokens, labels)
        vsd = {k: getattr(args, k) for k in ("vsd_steps", "vsd_lr", "vsd_weight", "vsd_samples")}
        vsd |= {"vsd_prefixes": args.vsd_prefixes, "vsd_tau": args.vsd_tau, "init": "drafter.pt"}
        vsd["vsd_pathwise"] = args.vsd_pathwise
        save_drafter(out / "drafter_vsd.pt", drafter, args, secs, loss, objective="vsd", **vsd)
    sizes = {f.name: os.path.getsize(f) for f in sorted(out.glob("*.pt"))}
    print("wrote", sizes)


def save_drafter(path, drafter, args, secs, loss, objective="ce", **extra):
    record = {
        "steps": args.drafter_steps,
        "batch": args.drafter_batch,
        "seconds": secs,
        "loss": loss,
        "unroll": args.unroll,
        "seed": args.seed,
    }
    if objective != "ce":  # the CE record keeps its original keys (drafter.pt reproducible)
        record |= {"objective": objective, "steps": args.vsd_steps, **extra}
    torch.save(drafter_state(drafter, record), path)


def drafter_state(drafter: Drafter, record: dict) -> dict:
    """What a drafter file holds: its step embedding's shape, float16 weights and ``record``."""
    return {
        "step_dim": drafter.step_embed.embedding_dim,
        "max_step": drafter.max_step,
        "state": half_state(drafter),
        "train": record,
    }


if __name__ == "__main__":
    main()

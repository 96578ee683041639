"""Loading the embedded demo model from ``specops/models/weights``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from specops.models.drafter import Drafter
from specops.models.transformer import ARConfig, Transformer
from specops.models.vq import PatchVQ

__all__ = ["DemoModel", "load_default", "WEIGHTS"]

WEIGHTS = Path(__file__).parent / "weights"


@dataclass
class DemoModel:
    target: Transformer
    drafter: Drafter | None
    vq: PatchVQ
    classes: tuple
    train: dict

    @property
    def cfg(self) -> ARConfig:
        return self.target.cfg


DRAFTERS = {"ce": "drafter.pt", "vsd": "drafter_vsd.pt"}


def load_default(
    device="cpu", dtype=torch.float32, *, weights_dir=None, with_drafter=True, drafter="ce"
):
    """Load the embedded target (+ drafter) and tokenizer onto ``device`` in ``dtype``.

    ``drafter``: which shipped drafter -- ``"ce"`` (token-level cross-entropy training,
    ``drafter.pt``) or ``"vsd"`` (fine-tuned with VSD's path-level objective,
    ``drafter_vsd.pt``; ``specops.models.train_vsd``)."""
    if drafter not in DRAFTERS:
        raise ValueError(f"load_default: drafter={drafter!r}, expected one of {tuple(DRAFTERS)}")
    wd = Path(weights_dir) if weights_dir is not None else WEIGHTS
    v = torch.load(wd / "vq.pt", map_location="cpu", weights_only=True)
    vq = PatchVQ(v["codebook"], v["patch"]).to(device)
    a = torch.load(wd / "ar.pt", map_location="cpu", weights_only=True)
    target = Transformer(ARConfig(**a["config"]))
    target.load_state_dict({k: t.float() for k, t in a["state"].items()})
    target = target.to(device=device, dtype=dtype).eval().requires_grad_(False)
    train = {"ar": a.get("train", {})}
    name, drafter = drafter, None
    if with_drafter:
        d = torch.load(wd / DRAFTERS[name], map_location="cpu", weights_only=True)
        drafter = Drafter(target.cfg, step_dim=d["step_dim"], max_step=d["max_step"])
        drafter.load_state_dict({k: t.float() for k, t in d["state"].items()})
        drafter = drafter.to(device=device, dtype=dtype).eval().requires_grad_(False)
        drafter.bind(target)
        train["drafter"] = d.get("train", {})
    return DemoModel(target, drafter, vq, tuple(v["classes"]), train)

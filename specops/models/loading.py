"""Loading the embedded demo model from ``specops/models/weights``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from specops.models.drafter import Drafter
from specops.models.transformer import ARConfig, Transformer
from specops.models.vq import PatchVQ

__all__ = ["DemoModel", "load_default", "load_drafter", "DRAFTERS", "WEIGHTS"]

WEIGHTS = Path(__file__).parent / "weights"

# the shipped drafters: token-level cross-entropy training, and that drafter fine-tuned with VSD's
# path-level objective (``python -m specops.models.train --only-drafter --objective vsd``)
DRAFTERS = {"ce": "drafter.pt", "vsd": "drafter_vsd.pt"}


@dataclass
class DemoModel:
    target: Transformer
    drafter: Drafter | None
    vq: PatchVQ
    classes: tuple
    train: dict
    weights_dir: Path = WEIGHTS
    _drafters: dict = field(default_factory=dict, repr=False)

    @property
    def cfg(self) -> ARConfig:
        return self.target.cfg

    def drafter_named(self, name: str) -> Drafter:
        """The shipped drafter ``name`` (a key of ``DRAFTERS``) bound to this target, on its
        device and dtype; loaded once."""
        if name not in self._drafters:
            w = self.target.embed.weight
            self._drafters[name] = load_drafter(
                self.target, name, self.weights_dir, w.device, w.dtype
            )
        return self._drafters[name][0]


def load_drafter(target: Transformer, name="ce", weights_dir=None, device="cpu", dtype=None):
    """The shipped drafter ``name`` (``"ce"`` or ``"vsd"``) for ``target``, in eval mode and bound
    to it -> (Drafter, its training record)."""
    if name not in DRAFTERS:
        raise ValueError(f"drafter={name!r}: expected one of {tuple(DRAFTERS)}")
    return load_drafter_file(target, DRAFTERS[name], weights_dir, device, dtype)


def load_drafter_file(target: Transformer, file: str, weights_dir=None, device="cpu", dtype=None):
    """The drafter saved as ``file`` in ``weights_dir`` (default: the shipped weights), in eval
    mode and bound to ``target`` -> (Drafter, its training record)."""
    path = (Path(weights_dir) if weights_dir is not None else WEIGHTS) / file
    if not path.is_file():
        raise FileNotFoundError(f"no drafter file {path}")
    try:
        d = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ValueError(f"drafter {path}: not a loadable torch checkpoint ({e})") from None
    if not isinstance(d, dict) or not {"state", "step_dim", "max_step"} <= set(d):
        raise ValueError(
            f"drafter {path}: expected a specops.models.Drafter checkpoint "
            "({'state', 'step_dim', 'max_step'})"
        )
    drafter = Drafter(target.cfg, step_dim=d["step_dim"], max_step=d["max_step"])
    try:
        drafter.load_state_dict({k: t.float() for k, t in d["state"].items()})
    except RuntimeError as e:  # another model's drafter: wrong shapes or keys
        msg = str(e).splitlines()[0]
        raise ValueError(f"drafter {path} does not fit this model: {msg}") from None
    drafter = drafter.to(device=device, dtype=dtype).eval().requires_grad_(False)
    return drafter.bind(target), d.get("train", {})


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
    m = DemoModel(target, None, vq, tuple(v["classes"]), train, wd)
    if with_drafter:
        m.drafter = m.drafter_named(drafter)
        train["drafter"] = m._drafters[drafter][1]
    return m

"""What every architecture's pipeline shares: the ``Pipeline`` interface, the method check and
the ``ImageResult`` with its step table."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch

from specops import decode

__all__ = ["Pipeline", "ImageResult", "METHODS"]

METHODS = ("ar", "sjd", "sjd_pac", "speculative", "vvs")
_SAMPLING = ("temperature", "top_k", "top_p", "cfg_scale")


@dataclass
class ImageResult:
    images: list  # PIL images, one per request
    codes: torch.Tensor  # [B, h * w] VQ codebook ids in raster order
    stats: decode.Stats
    ar_stats: decode.Stats | None = None  # with compare_ar: plain AR on the same requests
    settings: dict = field(default_factory=dict)  # the sampling settings used

    def table(self) -> str:
        """Tokens per target pass, target passes per image, wall time (and speed-up over AR)."""
        rows = [self.stats] + ([self.ar_stats] if self.ar_stats is not None else [])
        head = f"{'method':<12} {'tokens/pass':>11} {'passes/img':>10} {'wall s':>8}"
        if self.ar_stats is not None:
            head += f" {'vs AR':>7}"
        lines = [head, "-" * len(head)]
        for s in rows:
            line = (
                f"{s.method:<12} {s.step_compression:>11.2f} {s.mean_passes:>10.1f} "
                f"{s.wall_s:>8.2f}"
            )
            if self.ar_stats is not None:
                line += f" {self.ar_stats.wall_s / max(s.wall_s, 1e-9):>6.2f}x"
            lines.append(line)
        return "\n".join(lines)


class Pipeline:
    """One architecture family.  Subclasses set ``name``, ``grid`` (h, w), ``defaults`` and
    implement ``conditions`` (validate the prompt / classes -> the loop's prompts), ``run`` (one
    decoding method -> codes [B, h w], Stats) and ``decode`` (codes -> uint8 [B, H, W, 3])."""

    name = "?"
    grid: tuple = (0, 0)
    defaults: dict = {}
    extra_options: dict = {}  # method -> options the pipeline takes itself (VVS's delta)
    drafter = None

    def conditions(self, prompt, class_id):
        raise NotImplementedError

    def run(self, method: str, cond, *, fn, seed: int, sampling: dict, options: dict):
        raise NotImplementedError

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def method_fn(self, method: str, options: dict):
        """The decoding function, after checking the method, its drafter and its options."""
        if method not in METHODS:
            raise ValueError(f"generate_image: method must be one of {METHODS}, got {method!r}")
        if method in ("speculative", "vvs") and self.drafter is None:
            raise ValueError(
                f"generate_image: method {method!r} needs a drafter (drafter=FILE, or a "
                f"drafter*.pt in the model directory: a specops.models.Drafter checkpoint)"
            )
        fn = getattr(decode, method)
        allowed = set(inspect.signature(fn).parameters) - {
            "model", "drafter", "classes", "codebook", "length", "seed", *_SAMPLING,
        }  # fmt: skip
        allowed |= set(self.extra_options.get(method, ()))
        bad = sorted(set(options) - allowed)
        if bad:
            raise TypeError(
                f"generate_image: method {method!r} takes the options {sorted(allowed)}, got {bad}"
            )
        return fn

"""The tiny visual AR generator that ships with specops, and its pieces.

``load_default()`` returns the embedded class-conditional model (trained by
``python -m specops.models.train`` on procedural images): the AR target, its EAGLE-style
feature drafter and the patch VQ tokenizer that turns the 16x16 token grid into a 64x64 image.
"""

from __future__ import annotations

from specops.models.drafter import Drafter
from specops.models.loading import WEIGHTS, DemoModel, load_default
from specops.models.transformer import ARConfig, KVCache, Transformer
from specops.models.vq import PatchVQ

__all__ = [
    "ARConfig",
    "Drafter",
    "KVCache",
    "PatchVQ",
    "Transformer",
    "DemoModel",
    "load_default",
    "WEIGHTS",
]

"""The sampling settings of a decoding run, one object.

Every method takes them as keywords (``sjd(model, classes, temperature=0.8, top_k=100, seed=3)``)
and gathers them into one ``Sampling``, which the loop threads through its helpers the way
gpt-fast threads ``sampling_kwargs``: adding a setting touches this file and the code that reads
it, not every method's signature."""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["Sampling"]


@dataclass(frozen=True)
class Sampling:
    """How a decoding run samples.

    | name | type | meaning |
    | --- | --- | --- |
    | ``temperature`` | float >= 0 | softmax temperature; 0 = greedy (argmax drafts and greedy verification, bit-exact with greedy decoding) |
    | ``top_k`` | int or None | keep the k most probable tokens (None = all) |
    | ``top_p`` | float or None | keep the smallest set of tokens holding mass >= p (None = all) |
    | ``cfg_scale`` | float or None | classifier-free guidance ``uncond + s (cond - uncond)`` on the logits (None = off) |
    | ``seed`` | int | the Philox seed of every draw of the run |
    """  # noqa: E501

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    cfg_scale: float | None = None
    seed: int = 0

    @classmethod
    def of(cls, fn: str, kwargs: dict) -> Sampling:
        """The settings a method was given as keywords; a TypeError names any other keyword."""
        bad = sorted(set(kwargs) - set(NAMES))
        if bad:
            raise TypeError(
                f"{fn}: unexpected keyword argument {bad[0]!r} (the sampling settings are "
                f"{', '.join(NAMES)})"
            )
        return cls(**kwargs)

    @property
    def greedy(self) -> bool:
        """Temperature 0: argmax draws, greedy verification."""
        return self.temperature == 0

    @property
    def probs_kwargs(self) -> dict:
        """The keywords of ``specops.probs_from_logits`` (guidance apart: it needs the uncond
        logits)."""
        return dict(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)


NAMES = tuple(f.name for f in fields(Sampling))

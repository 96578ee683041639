"""What every architecture's pipeline shares: the ``Pipeline`` interface, the method check and
the ``ImageResult`` with its step table."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch

from specops import decode
from specops.decode.sampling import NAMES as SAMPLING

__all__ = ["Pipeline", "ImageResult", "METHODS", "check_sampling"]

METHODS = ("ar", "sjd", "sjd_pac", "speculative", "vvs")


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
    takes_drafter = True  # False: the family runs ar, sjd and sjd_pac only

    def conditions(self, prompt, class_id):
        raise NotImplementedError

    def vq_codes(self) -> tuple[torch.Tensor, dict | None]:
        """(the VQ codebook [codes, C], {token id the loop draws: its code} or None where the
        loop draws the codes themselves)."""
        raise NotImplementedError

    def grouping(self, window: int = 7, p_threshold: float = 0.15, d_threshold: float = 0.5):
        """GSD's grouped acceptance (``specops.Grouping``; So et al. 2025, lossy) over this
        model's VQ codes, indexed by the token ids its decoding loop draws: for ``sjd``'s
        ``relax`` (``generate_image(pipe, method="sjd", relax=pipe.grouping())``).  Where the
        loop draws BPE ids (Emu3, Chameleon / Lumina-mGPT), the codebook spans the image ids'
        range, each id's row its code's; an id in the range without a code gets NaN, which no
        distance test passes (it joins no group and has none).  Defaults: the authors'."""
        from specops import Grouping

        codebook, ids = self.vq_codes()
        codebook = codebook.detach().float()
        if ids is None:
            return Grouping(codebook, window, p_threshold, d_threshold)
        tokens = torch.tensor(sorted(ids), dtype=torch.long)
        start, end = int(tokens[0]), int(tokens[-1]) + 1
        rows = codebook.new_full((end - start, codebook.shape[1]), float("nan"))
        rows[tokens - start] = codebook[torch.tensor([ids[int(t)] for t in tokens])]
        return Grouping(rows, window, p_threshold, d_threshold, (start, end))

    def run(self, method: str, cond, *, fn, seed: int, sampling: dict, options: dict):
        raise NotImplementedError

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @property
    def length(self) -> int:
        """Tokens the decoding loop generates for one image."""
        return self.grid[0] * self.grid[1]

    @classmethod
    def check_method(cls, method: str, options: dict, *, has_drafter: bool = True):
        """The decoding function, after checking the method (this family runs it), its drafter
        and its options (names, kinds, values), without a loaded model: ``specops generate``
        calls it before loading anything."""
        if method not in METHODS:
            raise ValueError(f"generate_image: method must be one of {METHODS}, got {method!r}")
        if method in ("speculative", "vvs") and not cls.takes_drafter:
            raise ValueError(
                f"generate_image: {cls.name} runs ar, sjd and sjd_pac (no drafter for it here), "
                f"not {method!r}"
            )
        if method in ("speculative", "vvs") and not has_drafter:
            raise ValueError(
                f"generate_image: method {method!r} needs a drafter (drafter=FILE, or a "
                f"drafter*.pt in the model directory: a specops.models.Drafter checkpoint)"
            )
        fn = getattr(decode, method)
        params = inspect.signature(fn).parameters
        named = {k for k, p in params.items() if p.kind is not p.VAR_KEYWORD}  # **sampling_kwargs
        allowed = named - {"model", "drafter", "classes", "codebook", "length", *SAMPLING}
        allowed |= set(cls.extra_options.get(method, ()))
        bad = sorted(set(options) - allowed)
        if bad:
            raise TypeError(
                f"generate_image: method {method!r} takes the options {sorted(allowed)}, got {bad}"
            )
        for k, v in options.items():  # a number option given a value of another kind
            d = params[k].default if k in params else _EXTRA_DEFAULTS.get(k)
            if (
                isinstance(d, bool) != isinstance(v, bool)
                or (isinstance(d, (int, float)) and not isinstance(v, (int, float)))
                or (isinstance(d, int) and not isinstance(d, bool) and isinstance(v, float))
            ):
                raise TypeError(
                    f"generate_image: option {k}={v!r} of method {method!r} must be a "
                    f"{type(d).__name__} like its default {d!r}"
                )
            _check_value(k, v, method)
        return fn

    def method_fn(self, method: str, options: dict):
        """``check_method`` with this pipeline's drafter, and the window against the image."""
        fn = self.check_method(method, options, has_drafter=self.drafter is not None)
        window = options.get("window")
        if window is not None and window > self.length:
            raise ValueError(
                f"generate_image: option window={window} of method {method!r} must be at most "
                f"the {self.length} tokens of this {self.grid[0]}x{self.grid[1]} image"
            )
        return fn


# option -> its least value: counts (the window, tree sizes, VVS's schedule, LANTERN's k)
_COUNTS = {"window": 1, "branch": 1, "depth": 1, "num_draft": 1, "num_nodes": 2, "interval": 1,
           "stride": 1, "lantern_k": 1}  # fmt: skip
_TREE_SIZED = ("window", "depth", "num_nodes", "num_draft")  # nodes of one Tree: <= MAX_NODES
_EXTRA_DEFAULTS = {"lantern_k": 16, "delta": 0.2}  # the pipelines' own options (LlamaGen VVS)


def _check_value(key: str, value, method: str) -> None:
    """The value of a number option: counts >= their least value (tree sizes <= Tree.MAX_NODES),
    other numbers finite (LANTERN's delta >= 0)."""
    import math

    from specops.tree import MAX_NODES

    where = f"generate_image: option {key}={value!r} of method {method!r}"
    if key in _COUNTS and not isinstance(value, bool) and isinstance(value, int):
        hi = MAX_NODES if key in _TREE_SIZED else None
        if value < _COUNTS[key] or (hi is not None and value > hi):
            want = f">= {_COUNTS[key]}" if hi is None else f"in [{_COUNTS[key]}, {hi}]"
            why = " (Tree.MAX_NODES)" if hi is not None else ""
            raise ValueError(f"{where} must be an int {want}{why}")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value) or (key == "delta" and value < 0):
            raise ValueError(f"{where} must be a finite number" + " >= 0" * (key == "delta"))


def check_sampling(sampling: dict) -> None:
    """The sampling settings, before any model work: temperature >= 0, top_k a non-negative
    int, top_p in (0, 1], cfg_scale > 0 (each None = off)."""
    import math

    t, k, p, c = (sampling.get(x) for x in ("temperature", "top_k", "top_p", "cfg_scale"))
    if t is not None and not (isinstance(t, (int, float)) and math.isfinite(t) and t >= 0):
        raise ValueError(f"generate_image: temperature must be a finite number >= 0, got {t!r}")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
        raise ValueError(f"generate_image: top_k must be an int >= 0, got {k!r}")
    if p is not None and not (isinstance(p, (int, float)) and 0 < p <= 1):
        raise ValueError(f"generate_image: top_p must lie in (0, 1], got {p!r}")
    if c is not None and not (isinstance(c, (int, float)) and math.isfinite(c) and c > 0):
        raise ValueError(f"generate_image: cfg_scale must be a finite number > 0, got {c!r}")

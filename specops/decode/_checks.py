"""The arguments every decoding method shares, checked once before any work (no host read
inside a step): the prompt (``classes``), ``length``, and the window / tree sizes.  Bad input
gets one ``TypeError`` / ``ValueError`` line naming the argument."""

from __future__ import annotations

import math

import torch

from specops._int_arg import check_int
from specops.tree import MAX_NODES

__all__ = [
    "check_int",
    "check_width",
    "check_branch",
    "image_tokens",
    "model_vocab",
    "prompt_tokens",
    "decode_length",
    "prepare",
    "check_hide",
]


def image_tokens(model) -> int | None:
    """The tokens of one image (``cfg.grid`` squared) of an image model, else None."""
    grid = getattr(getattr(model, "cfg", None), "grid", None)
    if grid is None:
        return None
    return math.prod(grid) if isinstance(grid, (tuple, list)) else int(grid) ** 2


def model_vocab(model) -> int | None:
    """The size of the distributions the model's logits cover, where the model says it."""
    v = getattr(model, "vocab", None)
    if v is None:
        v = getattr(getattr(model, "cfg", None), "vocab", None)
    return v if isinstance(v, int) else None


def check_width(fn: str, name: str, value) -> int:
    """A window / tree width: an int in [1, ``Tree.MAX_NODES``] (the widest tree, and so the
    widest window, there is).  A window wider than what is left to decode is fine: its slots
    past the end are scratch (the cache is sized for it)."""
    return check_int(fn, name, value, 1, MAX_NODES, " (Tree.MAX_NODES)")


def check_branch(fn: str, value, model, name: str = "branch") -> int:
    """Children per tree node: an int >= 1, at most the vocabulary (distinct tokens)."""
    v = model_vocab(model)
    return check_int(fn, name, value, 1, v, "" if v is None else " (the vocabulary size)")


def _prompt_vocab(model) -> int | None:
    """Token ids a prompt may hold: the model's ``prompt_vocab``, else ``cfg.num_embeddings``."""
    v = getattr(model, "prompt_vocab", None)
    if v is None:
        v = getattr(getattr(model, "cfg", None), "num_embeddings", None)
    return v if isinstance(v, int) else None


def _as_ids(fn: str, classes) -> torch.Tensor:
    kind = "class ids [B] or a prompt [B, P] of token ids (-1 padded on the right)"
    if isinstance(classes, torch.Tensor):
        t = classes
    else:
        try:
            t = torch.as_tensor(classes)
        except (TypeError, ValueError, RuntimeError) as e:
            raise TypeError(f"{fn}: classes must be {kind}, got {type(classes).__name__}") from e
    if t.dtype == torch.bool or t.dtype.is_floating_point or t.dtype.is_complex:
        raise TypeError(f"{fn}: classes must be integer {kind}, got {t.dtype}")
    if t.dim() not in (1, 2) or t.shape[0] == 0 or t.numel() == 0:
        raise ValueError(
            f"{fn}: classes must be {kind} with B >= 1 (and P >= 1), got shape {tuple(t.shape)}"
        )
    return t.long()


def prompt_tokens(model, classes, fn: str = "specops.decode") -> tuple[torch.Tensor, int]:
    """Class ids [B] -> prompt token ids [B, 1] (the class token ``cfg.vocab + c`` of a
    LlamaGen-style model), or a prompt [B, P] of token ids, checked; -> (prompt, the longest
    request's prompt length).  One host read (before the loop starts, never inside a step):
    class ids must lie in [0, cfg.num_classes); each prompt row must be its real tokens, in
    [0, prompt vocabulary), then -1 padding only (right padding, as the loop's protocol; a
    left-padded row is refused: ``specops.hf.generate`` takes transformers' left padding with
    its attention mask), with at least one real token."""
    t = _as_ids(fn, classes)
    cfg = getattr(model, "cfg", None)
    if t.dim() == 1:
        base = getattr(cfg, "vocab", None)
        if base is None:
            raise ValueError(
                f"{fn}: classes as class ids [B] need a class-conditional model (one with "
                "cfg.vocab); pass a prompt [B, P] of token ids"
            )
        n_cls = getattr(cfg, "num_classes", None)
        bad = (t < 0) if n_cls is None else (t < 0) | (t >= n_cls)
        if bool(bad.any()):
            r = int(bad.int().argmax())
            want = ">= 0" if n_cls is None else f"in [0, {n_cls})"
            raise ValueError(f"{fn}: classes must be class ids {want}, got {int(t[r])} at {r}")
        return (t + base)[:, None], 1
    real = t >= 0
    n = real.sum(1)
    cols = torch.arange(t.shape[1], device=t.device)
    ok = (t >= -1) & (real == (cols < n[:, None]))  # real tokens first, then -1
    vocab = _prompt_vocab(model)
    if vocab is not None:
        ok &= t < vocab
    good, shortest, longest = torch.stack([ok.all().long(), n.min(), n.max()]).tolist()
    if not good or shortest == 0:
        _prompt_error(fn, t, ok, n, vocab)
    return t, int(longest)


def _prompt_error(fn, t, ok, n, vocab):
    """The first bad prompt row, said in one line (the error path: host reads are fine)."""
    if bool((n == 0).any()):
        r = int((n == 0).int().argmax())
        raise ValueError(f"{fn}: classes (the prompt) row {r} has no token (all -1)")
    r = int((~ok.all(1)).int().argmax())
    c = int((~ok[r]).int().argmax())
    row = t[r].tolist()
    v = row[c]
    if v < -1 or (vocab is not None and v >= vocab):
        want = "-1 (padding) or a token id >= 0" if vocab is None else f"-1 or in [0, {vocab})"
        raise ValueError(f"{fn}: classes (the prompt) must hold {want}, got {v} at [{r}, {c}]")
    raise ValueError(
        f"{fn}: classes (the prompt) row {r} = {row[:8]}{' ...' if len(row) > 8 else ''} has "
        "-1 before a token: prompts are -1 padded on the right (left padding, as tokenizers "
        "pad, is taken by specops.hf.generate with its attention_mask)"
    )


def decode_length(fn: str, model, length, longest: int) -> int:
    """``length``: the tokens to generate per request, an int >= 1; None = the rest of the image
    of an image model (``cfg.grid`` squared less the prompt's image tokens), which also bounds
    it.  A model without ``cfg.grid`` needs it given."""
    image = image_tokens(model)
    room = None
    if image is not None:
        room = image - max(0, longest - getattr(model.cfg, "prefix", 1))
    if room is not None and room < 1:
        raise ValueError(f"{fn}: the prompt already holds the whole {image}-token image")
    if length is None:
        if room is None:
            raise ValueError(
                f"{fn}: length is required (the model has no cfg.grid, the image size, to "
                "default to)"
            )
        return room
    why = "" if room is None else f" (what is left of the model's {image}-token image)"
    return check_int(fn, "length", length, 1, room, why)


def prepare(fn: str, model, classes, length) -> tuple[torch.Tensor, int]:
    """What every method checks first, before any work: -> (prompt [B, P], length)."""
    prompt, longest = prompt_tokens(model, classes, fn)
    return prompt, decode_length(fn, model, length, longest)


def check_hide(name: str, prompt, hide, drafter_prefill: bool, hide_positions: str, drafter=None):
    """Validate the HiViS options of ``speculative`` / ``vvs`` (shapes only: no host read)."""
    if hide_positions not in ("compact", "target"):
        raise ValueError(
            f"{name}: hide_positions must be 'compact' or 'target', got {hide_positions!r}"
        )
    if hide is None:
        return None
    if not drafter_prefill:
        raise ValueError(f"{name}: hide= needs drafter_prefill=True (it selects prefill entries)")
    if getattr(drafter, "reads_prompt", False):
        raise ValueError(
            f"{name}: hide= applies to feature drafters; a standalone draft model reads the "
            "whole prompt itself"
        )
    hide = torch.as_tensor(hide, device=prompt.device)
    if hide.dtype != torch.bool or hide.shape != prompt.shape:
        raise ValueError(
            f"{name}: hide must be a bool mask of the prompt's shape {tuple(prompt.shape)}, got "
            f"{hide.dtype} {tuple(hide.shape)}"
        )
    return hide

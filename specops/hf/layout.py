"""``GridLayout``: the image-token layout of a text-to-image model, enforced on every distribution.

An image of ``rows`` x ``cols`` VQ codes follows the prompt, each row closed by ``row_end`` when
the model has row separators (Emu3's EOL, Lumina-mGPT's 8803).  Body index k = position -
start of the request's image: if ``row_end`` is set and k mod (cols + 1) = cols the only allowed
token is ``row_end`` (the target's distribution there is one-hot: a drafted row end is accepted,
anything else rejected and the row end resampled, so every method stays lossless); otherwise only
the image tokens are.  The logits at position p predict position p + 1, and the loop's positions
are per row (cond and uncond rows of CFG have their own starts), so the mask is a function of
the positions tensor alone: no host read, graph safe.
"""

from __future__ import annotations

import torch

__all__ = ["GridLayout"]


class GridLayout:
    def __init__(self, rows: int, cols: int, image_tokens, vocab: int, row_end: int | None = None):
        if rows < 1 or cols < 1:
            raise ValueError(f"GridLayout: rows and cols must be >= 1, got {rows} x {cols}")
        ids = torch.as_tensor(image_tokens).long().reshape(-1)
        if ids.numel() == 0 or bool(((ids < 0) | (ids >= vocab)).any()):
            raise ValueError(f"GridLayout: image_tokens must be non-empty ids in [0, {vocab})")
        if row_end is not None and not 0 <= row_end < vocab:
            raise ValueError(f"GridLayout: row_end must lie in [0, {vocab}), got {row_end}")
        self.rows, self.cols, self.row_end, self.vocab = rows, cols, row_end, vocab
        self.image_tokens = ids
        self._masks = {}

    @property
    def period(self) -> int:
        return self.cols + (self.row_end is not None)

    @property
    def length(self) -> int:
        """Tokens the image takes: rows x (cols + a row end when the model has one)."""
        return self.rows * self.period

    def _allowed(self, device) -> torch.Tensor:
        """[2, V] bool: row 0 the image tokens, row 1 the row end alone."""
        if device not in self._masks:
            m = torch.zeros(2, self.vocab, dtype=torch.bool, device=device)
            m[0, self.image_tokens.to(device)] = True
            if self.row_end is not None:
                m[1, self.row_end] = True
            self._masks[device] = m
        return self._masks[device]

    def mask(self, logits: torch.Tensor, positions: torch.Tensor, start: torch.Tensor):
        """logits [R, N, V] at ``positions`` [R, N]; ``start`` [R]: the position of each row's
        first image token.  -> logits with every token the layout forbids at -inf."""
        k = positions.long() + 1 - start.long()[:, None]  # body index of the predicted token
        at_end = torch.zeros_like(k, dtype=torch.bool)
        if self.row_end is not None:
            at_end = torch.remainder(k, self.period) == self.cols
        allowed = self._allowed(logits.device)[at_end.long()]  # [R, N, V]
        return logits.masked_fill(~allowed[..., : logits.shape[-1]], float("-inf"))

    def codes(self, tokens: torch.Tensor) -> torch.Tensor:
        """Generated tokens [B, >= length] -> the image's token ids [B, rows * cols] (row ends
        dropped), still in the model's vocabulary."""
        body = tokens[:, : self.length].reshape(tokens.shape[0], self.rows, self.period)
        return body[:, :, : self.cols].reshape(tokens.shape[0], -1)

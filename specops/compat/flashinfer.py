"""FlashInfer-compatible chain speculative sampling on specops's ``verify_chain``.

``chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, ...)`` takes
FlashInfer's arguments and returns what it returns, with its conventions (flashinfer.sampling,
0.5-0.6), so a caller switches by changing the import:

- draft i (0 <= i < n) is accepted while ``u_i * q_i(x_i) < p_i(x_i)`` (q = draft, p = target
  probabilities at the drafted id); the token after the accepted prefix is drawn from
  ``max(p_a - q_a, 0)`` at the first rejected position a, or from the bonus row p_n when all n
  are accepted; -1 after it.  Output [B, n + 1] int32.
- ``maybe_output_emitted_draft_token_num`` [B] int32 is *added to* in place: the accepted drafts
  a (the bonus / corrected token not counted).
- ``maybe_output_accepted_token_num`` [B] int32 is *added to* in place: the drafts whose own test
  passes, each position on its own: a plus, for every position i > a, 1 if
  ``u_i * q_i(x_i) < p_i(x_i)`` (the acceptance-rate statistic; it is not what is emitted).

Random numbers: with ``seed`` / ``offset`` (ints or int64 tensors) specops's Philox stream (draw
i = the test of draft i, draw n = the final token), so a call is reproducible on every specops
backend; with ``generator`` (a torch.Generator) the n + 1 uniforms per request come from it; with
neither, from torch's default generator.  The law of the output is FlashInfer's; the bits of its
curand stream are not reproduced.  ``deterministic`` is accepted and ignored: specops's kernels
are always deterministic (float64 sums in a fixed order)."""

from __future__ import annotations

import torch

import specops
from specops.reference.philox import row_uniforms

__all__ = ["chain_speculative_sampling"]


def _counter(name: str, t, b: int, device) -> torch.Tensor:
    if t is None:
        return torch.zeros(b, dtype=torch.int32, device=device)
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or tuple(t.shape) != (b,):
        got = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(
            f"specops.compat.flashinfer.chain_speculative_sampling: {name} must be an int32 "
            f"tensor of shape [{b}] (added to in place), got {got}"
        )
    if t.device != device:
        raise ValueError(
            f"specops.compat.flashinfer.chain_speculative_sampling: {name} is on {t.device} "
            f"but the probabilities are on {device}"
        )
    return t


def _uniforms(b: int, draws: int, device, generator, seed, offset) -> torch.Tensor:
    if seed is not None or offset is not None:
        s = seed if seed is not None else 0
        o = offset if offset is not None else 0
        return row_uniforms(s, o, b, draws, rows_per_seed=1, device=device)
    # torch.rand is in [0, 1); the tests read u * q < p, so u = 0 accepts any p > 0, as in (0, 1)
    return torch.rand(b, draws, generator=generator, device=device)


def chain_speculative_sampling(
    draft_probs: torch.Tensor,
    draft_token_ids: torch.Tensor,
    target_probs: torch.Tensor,
    maybe_output_accepted_token_num: torch.Tensor | None = None,
    maybe_output_emitted_draft_token_num: torch.Tensor | None = None,
    deterministic: bool = True,
    generator: torch.Generator | None = None,
    seed=None,
    offset=None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashInfer's chain speculative sampling (see the module docstring) -> (output_token_ids
    [B, n + 1] int32, accepted [B] int32, emitted [B] int32); the last two are the given counter
    tensors, added to in place (new zeroed ones when None)."""
    del deterministic  # always deterministic
    if not isinstance(draft_probs, torch.Tensor) or draft_probs.dim() != 3:
        raise ValueError(
            "specops.compat.flashinfer.chain_speculative_sampling: draft_probs must be a "
            "[batch, num_speculate_tokens, vocab] tensor"
        )
    b, n, _ = draft_probs.shape
    dev = draft_probs.device
    acc = _counter("maybe_output_accepted_token_num", maybe_output_accepted_token_num, b, dev)
    emit = _counter("maybe_output_emitted_draft_token_num", maybe_output_emitted_draft_token_num,
                    b, dev)  # fmt: skip
    u = _uniforms(b, n + 1, dev, generator, seed, offset)
    r = specops.verify_chain(target_probs, draft_token_ids, draft_probs, uniforms=u)
    a = r.num_accepted
    # every draft tested on its own, past the first rejection too (FlashInfer's "accepted")
    ids = draft_token_ids.long().clamp(min=0)[..., None]
    qx = draft_probs.float().gather(2, ids)[..., 0]
    px = target_probs[:, :n].float().gather(2, ids)[..., 0]
    later = torch.arange(n, device=dev)[None, :] > a[:, None].long()
    passes = (u[:, :n] * qx < px) & later & (draft_token_ids >= 0)
    acc += a + passes.sum(1, dtype=torch.int32)
    emit += a
    return r.tokens, acc, emit

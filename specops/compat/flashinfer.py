"""FlashInfer-compatible chain speculative sampling on specops's ``verify_chain``.

``chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, ...)`` takes
FlashInfer's arguments and returns what it returns, with its conventions (flashinfer.sampling,
0.5-0.7.2), so a caller switches by changing the import: draft i is accepted while
``u_i * q_i(x_i) < p_i(x_i)``; output [B, n + 1] int32, -1 after the final token; the two
counters [B] int32 are *added to* in place (emitted = the accepted drafts; accepted = every
position's own test, the acceptance-rate statistic).

Random numbers: with ``seed`` / ``offset`` specops's Philox stream (draw i = the test of draft
i, draw n = the final token), reproducible on every specops backend; otherwise ``generator`` or
torch's default one.  The law of the output is FlashInfer's; its curand bits are not
reproduced.  Checks always on (no sync), each error naming FlashInfer's argument.
Semantics, seed / offset forms, checks and what was tested: docs/engines.md, "FlashInfer".
"""

from __future__ import annotations

import numbers

import torch

import specops
from specops.ops import checks as c
from specops.reference.philox import philox_uniform

__all__ = ["chain_speculative_sampling"]

_OP = "compat.flashinfer.chain_speculative_sampling"
_PREFIX = f"specops.{_OP}"
_PROB_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_U64 = 2**64


def _shape(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def _counter(name: str, t, b: int, device) -> torch.Tensor:
    if t is None:
        return torch.zeros(b, dtype=torch.int32, device=device)
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or tuple(t.shape) != (b,):
        got = f"{t.dtype} {_shape(t)}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(
            f"{_PREFIX}: {name} must be an int32 tensor of shape [{b}] (added to in place), "
            f"got {got}"
        )
    if t.device != device:
        raise ValueError(f"{_PREFIX}: {name} is on {t.device} but draft_probs is on {device}")
    return t


def _rng_value(name: str, x, b: int, device) -> torch.Tensor:
    """FlashInfer's ``seed`` / ``offset`` -> an int64 tensor of shape [] or [b] holding the 64-bit
    pattern Philox reads.  FlashInfer 0.7.2 takes an int or a 1-D int64/uint64 tensor of length 1
    (one value for the batch) or b (one per request); specops also takes a 0-d tensor."""
    if isinstance(x, torch.Tensor):
        if x.dtype not in (torch.int64, torch.uint64):
            raise TypeError(f"{_PREFIX}: {name} must be an int64 or uint64 tensor, got {x.dtype}")
        if x.dim() > 1 or (x.dim() == 1 and x.shape[0] not in (1, b)):
            raise ValueError(
                f"{_PREFIX}: {name} must have shape [1] (one for the batch) or [{b}] (one per "
                f"request), got {_shape(x)}"
            )
        if x.device != device:
            raise ValueError(f"{_PREFIX}: {name} is on {x.device} but draft_probs is on {device}")
        x = x.view(torch.int64) if x.dtype == torch.uint64 else x
        return x
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise TypeError(
            f"{_PREFIX}: {name} must be an int or an int64/uint64 tensor, got {type(x).__name__}"
        )
    x = int(x)
    if not -(2**63) <= x < _U64:
        raise ValueError(f"{_PREFIX}: {name} must fit in 64 bits ([-2**63, 2**64)), got {x}")
    x &= _U64 - 1
    return torch.tensor(x - _U64 if x >= 2**63 else x, dtype=torch.int64, device=device)


def _uniforms(b: int, draws: int, device, generator, seed, offset) -> torch.Tensor:
    if seed is not None or offset is not None:
        s = _rng_value("seed", 0 if seed is None else seed, b, device)
        o = _rng_value("offset", 0 if offset is None else offset, b, device)
        rows = torch.arange(b, dtype=torch.int64, device=device)[:, None]
        d = torch.arange(draws, dtype=torch.int64, device=device)[None, :]
        # verify_chain's stream: request r's draw i at (seed_r, offset_r, row r, draw i)
        return philox_uniform(s.reshape(-1, 1), o.reshape(-1, 1), rows, d)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"{_PREFIX}: generator must be a torch.Generator or None, got "
            f"{type(generator).__name__}"
        )
    # torch.rand is in [0, 1); the tests read u * q < p, so u = 0 accepts any p > 0, as in (0, 1)
    return torch.rand(b, draws, generator=generator, device=device)


def _check(draft_probs, draft_token_ids, target_probs):
    """FlashInfer's shapes, each error naming the argument at fault -> (b, n, v, probs...)."""
    c.check_tensor(_OP, "draft_probs", draft_probs, ndim=3, dtypes=_PROB_DTYPES)
    dev = draft_probs.device
    c.check_ids(_OP, "draft_token_ids", draft_token_ids, ndim=2, device=dev)
    b, n = draft_token_ids.shape
    v = draft_probs.shape[2]
    ids = f"draft_token_ids is [batch, num_speculate_tokens] = {_shape(draft_token_ids)}"
    if tuple(draft_probs.shape[:2]) != (b, n) or v < 1:
        raise ValueError(
            f"{_PREFIX}: draft_probs must have shape [{b}, {n}, vocab] with vocab >= 1 ({ids}), "
            f"got {_shape(draft_probs)}"
        )
    c.check_tensor(_OP, "target_probs", target_probs, ndim=3, dtypes=_PROB_DTYPES, device=dev)
    if tuple(target_probs.shape) != (b, n + 1, v):
        raise ValueError(
            f"{_PREFIX}: target_probs must have shape [{b}, {n + 1}, {v}] ({ids}, one more row "
            f"for the bonus token; draft_probs' vocab {v}), got {_shape(target_probs)}"
        )
    if c.validating():
        c.check_values_ids(_OP, "draft_token_ids", draft_token_ids, v)
        c.check_values_probs(_OP, "draft_probs", draft_probs)
        c.check_values_probs(_OP, "target_probs", target_probs)
    if draft_probs.dtype == torch.float64:  # FlashInfer casts to float32
        draft_probs = draft_probs.float()
    if target_probs.dtype == torch.float64:
        target_probs = target_probs.float()
    return b, n, v, dev, draft_probs, target_probs


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
    b, n, v, dev, draft_probs, target_probs = _check(draft_probs, draft_token_ids, target_probs)
    acc = _counter("maybe_output_accepted_token_num", maybe_output_accepted_token_num, b, dev)
    emit = _counter("maybe_output_emitted_draft_token_num", maybe_output_emitted_draft_token_num,
                    b, dev)  # fmt: skip
    u = _uniforms(b, n + 1, dev, generator, seed, offset)
    r = specops.verify_chain(target_probs, draft_token_ids, draft_probs, uniforms=u)
    a = r.num_accepted
    # every draft tested on its own, past the first rejection too (FlashInfer's "accepted"); a
    # draft outside [0, v) has target probability 0: never accepted, never read
    in_vocab = (draft_token_ids >= 0) & (draft_token_ids < v)
    ids = torch.where(in_vocab, draft_token_ids.long(), 0)[..., None]
    qx = draft_probs.float().gather(2, ids)[..., 0]
    px = target_probs[:, :n].float().gather(2, ids)[..., 0]
    later = torch.arange(n, device=dev)[None, :] > a[:, None].long()
    passes = (u[:, :n] * qx < px) & later & in_vocab
    acc += a + passes.sum(1, dtype=torch.int32)
    emit += a
    return r.tokens, acc, emit

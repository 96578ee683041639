"""``HFDrafter``: a standalone transformers causal LM as the drafter of ``speculative``.

The drafter protocol of ``specops.decode`` (docs/protocols.md) is the feature drafter's; a
standalone draft model meets it by ignoring the features:

- ``reads_prompt = True``: the loop first runs the prompt through it (``DraftRunner.prefill``),
  so its entry i holds token s_{i+1} at the target's position of s_{i+1};
- ``drafter(tokens, features, step, positions, cache)`` is one forward of the draft model over
  the tokens (features ignored) -> (logits [B, M, V] float32, last hidden state);
- ``extend(tokens, features, depth, positions, cache, bits, n_old)`` drafts one tree depth: the
  k new nodes are slots n_old .. of a tree whose earlier slots' K/V sit at seqlens + slot; their
  K/V land at seqlens + n_old + j and they attend with rows n_old .. of ``bits``.

With a draft model identical to the target, chain speculative decoding accepts every draft.
"""

from __future__ import annotations

import torch

from specops.hf.cache import SpecopsCache
from specops.hf.model import HFModel

__all__ = ["HFDrafter"]


class HFDrafter:
    reads_prompt = True

    def __init__(self, draft_model):
        self.model = draft_model if isinstance(draft_model, HFModel) else HFModel(draft_model)
        self.vocab = self.model.vocab
        self.device = self.model.device

    def new_cache(self, batch: int, capacity: int, *, device=None) -> SpecopsCache:
        return self.model.new_cache(batch, capacity, device=device)

    def __call__(self, tokens, features, step, positions, cache, tree=None):
        logits, hidden = self.model(tokens, positions, cache, tree)
        return logits.float(), hidden

    def extend(self, tokens, features, step, positions, cache, bits, n_old: int):
        logits, hidden = self.model(tokens, positions, cache, bits, n_old=n_old)
        return logits.float(), hidden


def check_drafter(drafter: HFDrafter, target: HFModel) -> None:
    """The drafter must score the target's vocabulary on the target's device."""
    if drafter.vocab != target.vocab:
        raise ValueError(
            f"specops.hf.generate: the drafter's vocabulary ({drafter.vocab} tokens) differs from "
            f"the target's ({target.vocab}); speculative decoding needs one vocabulary"
        )
    if torch.device(drafter.device) != torch.device(target.device):
        raise ValueError(
            f"specops.hf.generate: the drafter is on {drafter.device} but the target is on "
            f"{target.device}"
        )

"""Ragged prompts in specops.decode: a batch of prompts of different lengths, -1 padded on the
right, decodes every request exactly as it decodes alone (greedy, every method that takes a
prompt), on the embedded model (class token then image tokens as the prompt)."""

from __future__ import annotations

import pytest
import torch

from specops.decode import ar, sjd, sjd_pac, speculative
from specops.models.loading import load_default

LENS = [1, 5, 3]
METHODS = {
    "ar": (ar, {}),
    "sjd": (sjd, {"window": 8}),
    "sjd_pac": (sjd_pac, {"window": 16, "branch": 3, "depth": 3}),
}


@pytest.fixture(scope="module")
def model():
    return load_default(with_drafter=False).target


@pytest.mark.parametrize("name", sorted(METHODS))
def test_ragged_prompts_decode_as_alone(model, name):
    fn, opts = METHODS[name]
    cfg = model.cfg
    g = torch.Generator().manual_seed(0)
    prompts = torch.full((len(LENS), max(LENS)), -1, dtype=torch.long)
    for r, n in enumerate(LENS):
        prompts[r, 0] = cfg.vocab + r  # class token, then n - 1 image tokens
        prompts[r, 1:n] = torch.randint(0, cfg.vocab, (n - 1,), generator=g)
    out, _ = fn(model, prompts, length=24, temperature=0, **opts)
    for r, n in enumerate(LENS):
        alone, _ = fn(model, prompts[r : r + 1, :n], length=24, temperature=0, **opts)
        assert torch.equal(out[r], alone[0]), (r, out[r], alone[0])


def test_ragged_prompts_speculative_drafts_as_alone():
    """Tree speculative decoding with the feature drafter: a ragged batch emits the same tokens
    as each row alone, and (the drafter starting from the feature of each prompt's own last
    token) takes the same number of target passes per request."""
    demo = load_default()
    cfg = demo.cfg
    g = torch.Generator().manual_seed(1)
    prompts = torch.full((len(LENS), max(LENS)), -1, dtype=torch.long)
    for r, n in enumerate(LENS):
        prompts[r, 0] = cfg.vocab + r
        prompts[r, 1:n] = torch.randint(0, cfg.vocab, (n - 1,), generator=g)
    kw = dict(tree="dynamic", branch=3, depth=3, num_nodes=10, length=24, temperature=0)
    out, st = speculative(demo.target, demo.drafter, prompts, **kw)
    for r, n in enumerate(LENS):
        alone, st1 = speculative(demo.target, demo.drafter, prompts[r : r + 1, :n], **kw)
        assert torch.equal(out[r], alone[0])
        assert st.passes_per_request[r] == st1.passes_per_request[0]

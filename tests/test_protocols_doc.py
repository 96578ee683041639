"""docs/protocols.md's minimal model runs as written, and the loop treats it as the protocol
says: greedy SJD and SJD-PAC equal greedy AR (also with -1 padded ragged prompts), and the
model never advances the cache's seqlens."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from specops.decode import ar, sjd, sjd_pac

DOC = Path(__file__).resolve().parent.parent / "docs" / "protocols.md"


@pytest.fixture(scope="module")
def tiny():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    ns: dict = {}
    torch.manual_seed(0)
    exec(compile(blocks[-1], str(DOC), "exec"), ns)  # the minimal model and its usage line
    tokens, stats = ns["tokens"], ns["stats"]
    assert tokens.shape == (2, 32) and stats.tokens == 32
    return ns["TinyLM"]()


def test_model_writes_but_does_not_commit(tiny):
    cache = tiny.new_cache(2, 16)
    tok = torch.randint(0, 64, (2, 4))
    logits, hidden = tiny(tok, torch.arange(4).expand(2, 4), cache)
    assert logits.shape == (2, 4, 64) and hidden.shape == (2, 4, 64)
    assert cache.seqlens.tolist() == [0, 0] and bool(cache.kv[0, 0, :, :4].abs().sum() > 0)


@pytest.mark.parametrize("ragged", [False, True])
def test_greedy_methods_agree(tiny, ragged):
    prompt = torch.randint(0, 64, (3, 6), generator=torch.Generator().manual_seed(1))
    if ragged:
        prompt[1, 2:] = -1
        prompt[2, 4:] = -1
    ref, _ = ar(tiny, prompt, length=40, temperature=0)
    for fn, kw in ((sjd, {"window": 8}), (sjd_pac, {"window": 16, "branch": 3, "depth": 3})):
        got, _ = fn(tiny, prompt, length=40, temperature=0, **kw)
        assert torch.equal(got, ref), fn.__name__
    if ragged:
        alone, _ = ar(tiny, prompt[1:2, :2], length=40, temperature=0)
        assert torch.equal(alone[0], ref[1])


@pytest.mark.parametrize(
    "fn,kw", [(ar, {}), (sjd, {"window": 8}), (sjd_pac, {"window": 16, "branch": 3, "depth": 3})]
)
def test_eos_stops_requests(tiny, fn, kw):
    """A model with ``eos_token_ids``: each request stops at its first EOS (same tokens up to it
    as without EOS), and the loop stops when every request has."""
    prompt = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(2))
    free, st_free = fn(tiny, prompt, length=40, temperature=0, **kw)
    eos = torch.tensor([int(free[0, 3]), int(free[1, 6])])
    tiny.eos_token_ids = eos
    try:
        got, st = fn(tiny, prompt, length=40, temperature=0, **kw)
    finally:
        del tiny.eos_token_ids
    for r in range(2):
        first = int(torch.isin(free[r], eos).nonzero()[0])
        assert torch.equal(got[r, : first + 1], free[r, : first + 1])
    assert st.target_passes < st_free.target_passes

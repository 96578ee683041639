"""Top-k / top-p sampling and classifier-free guidance in the decoding loop: every lossless mode
samples the filtered (guided) chain of the exact Markov chain model (tests/markov_chain_lm.py),
and the unfiltered (unguided) chain fails the same test."""

from __future__ import annotations

import pytest
from markov_chain_lm import CLASSES, LENGTH, CFGMarkovLM, _check, _filtered

from specops import Tree
from specops.decode.ar import ar
from specops.decode.sjd import sjd
from specops.decode.sjd_pac import sjd_pac
from specops.decode.speculative import speculative

# top-k / top-p sampling: every lossless mode samples the filtered chain ------------------------
_FILTERED_MODES = {
    "ar": lambda m, d, **kw: ar(m, CLASSES, **kw),
    "chain": lambda m, d, **kw: speculative(m, d, CLASSES, tree=None, num_draft=3, **kw),
    "dynamic": lambda m, d, **kw: speculative(
        m, d, CLASSES, tree="dynamic", branch=2, depth=3, num_nodes=6, **kw
    ),
    "confidence": lambda m, d, **kw: speculative(
        m, d, CLASSES, tree="confidence", branch=3, depth=3, num_nodes=8, threshold=0.95, **kw
    ),
    "static-wor": lambda m, d, **kw: speculative(m, d, CLASSES, tree=Tree.kary(2, 3), **kw),
    "sjd": lambda m, d, **kw: sjd(m, CLASSES, window=4, **kw),
    "sjd-pac": lambda m, d, **kw: sjd_pac(m, CLASSES, window=6, branch=2, depth=2, **kw),
}


@pytest.mark.parametrize("sampling", [dict(top_k=2), dict(top_p=0.7)], ids=["top_k", "top_p"])
@pytest.mark.parametrize("mode", list(_FILTERED_MODES))
def test_filtered_sampling_lossless(markov, mode, sampling):
    m, d = markov
    tokens, _ = _FILTERED_MODES[mode](m, d, length=LENGTH, seed=22, **sampling)
    _check(_filtered(m, **sampling), tokens)


def test_filtered_sampling_detects_unfiltered(markov):
    """Negative control: output of the unfiltered chain fails the filtered chain's test."""
    m, _ = markov
    tokens, _ = ar(m, CLASSES, length=LENGTH, seed=22)
    _check(_filtered(m, top_k=2), tokens, expect_pass=False)


# classifier-free guidance: cond + uncond rows share the drafts --------------------------------
_CFG_MODES = {
    k: _FILTERED_MODES[k] for k in ("ar", "chain", "dynamic", "confidence", "sjd", "sjd-pac")
}


@pytest.mark.parametrize("mode", list(_CFG_MODES))
def test_cfg_lossless(markov, mode):
    """Every lossless mode under CFG samples the guided chain (cond and uncond rows of the
    target's cache read the same drafts; the drafter sees the cond rows only)."""
    _, d = markov
    m = CFGMarkovLM()
    tokens, _ = _CFG_MODES[mode](m, d, length=LENGTH, seed=23, cfg_scale=m.scale)
    _check(m.cfg_table(), tokens)


def test_cfg_detects_unguided(markov):
    """Negative controls: the unguided cond chain fails the guided chain's test, and so does
    a run whose uncond rows were never read (cfg_scale 1: logits = cond)."""
    m = CFGMarkovLM()
    tokens, _ = ar(m, CLASSES, length=LENGTH, seed=23)
    _check(m.cfg_table(), tokens, expect_pass=False)
    tokens, _ = ar(m, CLASSES, length=LENGTH, seed=23, cfg_scale=1.0)
    _check(m.cfg_table(), tokens, expect_pass=False)

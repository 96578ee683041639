"""SJD with a lossy acceptance (issue 48): ``sjd(relax=...)`` passes LANTERN's ``Relaxation`` or
GSD's ``Grouping`` to ``verify_jacobi``.  Relaxed, a step accepts at least as much as the exact
test on the same uniforms (the group holds x, and P/Q >= p(x)/q(x) is not implied, so the
check is statistical over many requests); greedy decoding and other kinds of ``relax`` are
errors naming the argument; ``relax=None`` is the exact method, token for token."""

from __future__ import annotations

import pytest
import torch
from markov_chain_lm import LENGTH, MarkovLM

import specops
from specops.decode import sjd

V = 4  # markov_chain_lm's states


@pytest.fixture(scope="module")
def markov():
    return MarkovLM()


def _grouping(d_threshold=1e9):
    codebook = torch.arange(V, dtype=torch.float32)[:, None]  # 1-D codes 0..3
    return specops.Grouping(codebook, window=3, p_threshold=1.0, d_threshold=d_threshold)


def test_relax_none_is_the_exact_method(markov):
    classes = torch.zeros(64, dtype=torch.long)
    a, sa = sjd(markov, classes, window=4, length=LENGTH, seed=3)
    b, sb = sjd(markov, classes, window=4, length=LENGTH, seed=3, relax=None)
    assert torch.equal(a, b) and sa.target_passes == sb.target_passes


@pytest.mark.parametrize("relax", ["gsd", "lantern"])
def test_a_relaxed_sjd_takes_fewer_passes(markov, relax):
    """Wide groups (every state within the thresholds, or every state a neighbour) accept more
    drafts than the exact test: fewer target passes for the same tokens out (2048 requests)."""
    classes = torch.zeros(2048, dtype=torch.long)
    if relax == "gsd":
        r = _grouping()
    else:
        r = specops.Relaxation(torch.arange(V).repeat(V, 1), delta=1.0)
    _, exact = sjd(markov, classes, window=4, length=LENGTH, seed=5)
    _, lossy = sjd(markov, classes, window=4, length=LENGTH, seed=5, relax=r)
    assert lossy.step_compression > exact.step_compression * 1.05, (
        lossy.step_compression, exact.step_compression)  # fmt: skip


def test_a_group_of_one_is_the_exact_test(markov):
    """d_threshold below every distance: each group is {x}, P/Q = p(x)/q(x): the exact method."""
    classes = torch.zeros(64, dtype=torch.long)
    a, _ = sjd(markov, classes, window=4, length=LENGTH, seed=9)
    b, _ = sjd(markov, classes, window=4, length=LENGTH, seed=9, relax=_grouping(1e-6))
    assert torch.equal(a, b)


def test_relax_errors_name_the_argument(markov):
    classes = torch.zeros(2, dtype=torch.long)
    with pytest.raises(ValueError, match="relax .* needs sampling"):
        sjd(markov, classes, window=4, length=LENGTH, temperature=0.0, relax=_grouping())
    with pytest.raises(TypeError, match="relax must be a specops.Relaxation or specops.Grouping"):
        sjd(markov, classes, window=4, length=LENGTH, seed=1, relax=0.3)

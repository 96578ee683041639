"""The Python-to-Triton boundary (issue #14), feature ops: gather_rows, drafter_inputs,
FeatureCache and path_similarity on strided and expanded views give the results of their
contiguous copies, with no access outside the tensor arguments (tests/triton_bounds.py)."""

from __future__ import annotations

import pytest
import torch
from triton_bounds import _expanded, _strided, check_bounds

import specops
from specops import reference


@pytest.fixture
def bounds(monkeypatch):
    yield from check_bounds(monkeypatch)


def test_gather_and_drafter_inputs_strided(bounds):
    g = torch.Generator().manual_seed(12)
    b, n, m, h, v, e, s = 2, 6, 4, 5, 9, 3, 2
    src = torch.randn(b, n, h, generator=g)
    index = torch.tensor([[0, 5, -1, 2], [3, 3, 1, 0]])
    want = reference.gather_rows(src, index)
    got = specops.gather_rows(_strided(src), _strided(index), backend="triton")
    assert torch.equal(got, want)
    emb = torch.randn(v, e, generator=g)
    tokens = torch.randint(-1, v, (b, m), generator=g)
    feats = torch.randn(b, m, h, generator=g)
    step = torch.randn(s, generator=g)
    want = reference.drafter_inputs(emb, tokens, feats, step.expand(b, m, s))
    got = specops.drafter_inputs(
        _strided(emb), _strided(tokens), _strided(feats), step.expand(b, m, s), backend="triton"
    )
    assert torch.equal(got, want)
    got = specops.drafter_inputs(emb, tokens, feats, _strided(step), backend="triton")
    assert torch.equal(got, want)


def test_feature_cache_strided_step_positions_and_feats(bounds):
    g = torch.Generator().manual_seed(13)
    b, cap, h, m = 3, 7, 4, 3
    pos = torch.tensor([[0, 3, -1], [6, 1, 2], [5, -1, -1]])
    feats = torch.randn(b, m, h, generator=g)
    steps = torch.tensor([4, 9, 2])
    for step, want_step in ((_strided(steps), steps), (_expanded(torch.tensor(5), b), 5)):
        want = specops.FeatureCache(b, cap, h, backend="reference")
        want.write(pos, feats, step=want_step)
        got = specops.FeatureCache(b, cap, h, backend="triton")
        got.write(_strided(pos), _strided(feats), step=step)
        assert torch.equal(got.stamps, want.stamps) and torch.equal(got.features, want.features)
        assert torch.equal(got.read(_strided(pos)), want.read(pos))


def test_feature_cache_write_into_strided_store_and_stamps(bounds):
    """The registered op writes the store and the stamps through their own strides."""
    g = torch.Generator().manual_seed(14)
    b, cap, h = 2, 5, 3
    pos = torch.tensor([[0, 4], [2, -1]])
    feats = torch.randn(b, 2, h, generator=g)
    store_w, stamps_w = torch.zeros(b, cap, h), torch.full((b, cap), -1, dtype=torch.int32)
    reference.feature_cache_write(store_w, stamps_w, pos, feats, torch.tensor([3, 8]))
    store = torch.zeros(h, cap, b).permute(2, 1, 0)
    stamps = _strided(torch.full((b, cap), -1, dtype=torch.int32))
    torch.ops.specops.feature_cache_write(
        store, stamps, pos, feats, _strided(torch.tensor([3, 8])), 0, "triton"
    )
    assert torch.equal(store, store_w) and torch.equal(stamps, stamps_w)


def test_path_similarity_strided(bounds):
    g = torch.Generator().manual_seed(15)
    paths = torch.randint(0, 11, (2, 3, 5), generator=g)
    codebook = torch.randn(11, 6, generator=g)
    want = reference.path_similarity(paths, codebook, alpha=0.8, stride=2)
    got = specops.path_similarity(
        _strided(paths), codebook.t().contiguous().t(), alpha=0.8, stride=2, backend="triton"
    )
    torch.testing.assert_close(got, want)

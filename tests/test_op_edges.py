"""Edges where backends used to differ or answer unclearly: every backend gives the reference's
answer, or every one raises a ValueError/TypeError naming the argument (and the backend asked
for), on the same input."""

from __future__ import annotations

import pytest
import torch

import specops
from specops import _build

CPP = pytest.mark.skipif(not _build.has_cpp(), reason="needs the compiled specops._C")
APPEND_BACKENDS = ["reference", "triton", pytest.param("cpu", marks=CPP)]
FEATURE_BACKENDS = ["reference", "triton", pytest.param("cpu", marks=CPP)]


@pytest.mark.parametrize("backend", APPEND_BACKENDS)
@pytest.mark.parametrize("which", ["k", "v"])
def test_append_kv_rejects_new_rows_that_alias_the_cache(backend, which):
    # k = k_cache[:, 2:5] written at 3..5 overlaps what it reads: the backends raced or copied
    # in different orders (reference 8 12 16, cpu and Triton 8 8 8); now one clear error
    kc = torch.arange(64, dtype=torch.float32).reshape(1, 16, 1, 4)
    vc = kc.clone() + 100
    new = {"k": kc[:, 2:5], "v": vc[:, 2:5]}
    other = {"k": torch.zeros(1, 3, 1, 4), "v": torch.zeros(1, 3, 1, 4)}
    other[which] = new[which]
    before = kc.clone(), vc.clone()
    with pytest.raises(
        ValueError, match=rf"specops\.append_kv: ._cache shares memory with {which}"
    ):
        specops.append_kv(
            kc, vc, other["k"], other["v"], torch.tensor([3], dtype=torch.int32), backend=backend
        )
    assert torch.equal(kc, before[0]) and torch.equal(vc, before[1])


@pytest.mark.parametrize("backend", APPEND_BACKENDS)
def test_append_kv_takes_k_and_v_caches_that_share_one_buffer(backend):
    # a stacked [B, S, 2, H, D] buffer: k_cache and v_cache interleave, k and v live elsewhere
    kv = torch.zeros(2, 8, 2, 1, 4)
    k, v = torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 4)
    specops.append_kv(kv[:, :, 0], kv[:, :, 1], k, v, torch.tensor([1, 4]), backend=backend)
    assert torch.equal(kv[0, 1:4, 0], k[0]) and torch.equal(kv[1, 4:7, 1], v[1])


@pytest.mark.parametrize("backend", FEATURE_BACKENDS)
def test_path_similarity_with_an_empty_codebook(backend):
    # fast mode: every id is outside an empty codebook, so every vector is zero and every pair's
    # similarity 0 (the reference raised IndexError while cpu and Triton returned 0)
    paths = torch.zeros(2, 3, 4, dtype=torch.int64)
    with specops.validation(False):
        got = specops.path_similarity(paths, torch.zeros(0, 5), backend=backend)
    assert got.tolist() == [0.0, 0.0]
    with specops.validation(), pytest.raises(ValueError, match="paths holds token id 0"):
        specops.path_similarity(paths, torch.zeros(0, 5), backend=backend)


def test_feature_cache_recent_positions_checks_its_arguments():
    fc = specops.FeatureCache(2, 8, 4)
    with pytest.raises(ValueError, match=r"recent_positions: width must be an int >= 0, got -1"):
        fc.recent_positions(torch.tensor([3, 4]), 2, -1)
    with pytest.raises(TypeError, match=r"recent_positions: width must be an int"):
        fc.recent_positions(3, 2, 2.0)
    with pytest.raises(
        ValueError, match=r"recent_positions: end must have shape \[\], \[1\] or \[2\]"
    ):
        fc.recent_positions(torch.tensor([3, 4, 5]), 2, 2)
    with pytest.raises(ValueError, match=r"recent_positions: count must have 0 or 1 dimensions"):
        fc.recent_positions(3, torch.tensor([[1, 2]]), 2)
    with pytest.raises(TypeError, match=r"recent_positions: count must be an int"):
        fc.recent_positions(3, 1.5, 2)
    with pytest.raises(TypeError, match=r"recent_positions: end must"):
        fc.recent_positions(torch.tensor([3.0, 4.0]), 1, 2)
    # ints and [1] tensors broadcast over the cache's batch
    assert fc.recent_positions(5, 2, 3).tolist() == [[3, 4, -1]] * 2
    assert fc.recent_positions(torch.tensor([5]), torch.tensor([1, 0]), 2).tolist() == [
        [4, -1],
        [-1, -1],
    ]
    assert fc.recent_positions(5, 2, 0).shape == (2, 0)


@pytest.mark.parametrize("backend", ["cpu", "cuda", "triton", "reference", "auto"])
def test_meta_inputs_name_the_backend_asked_for(backend):
    meta = torch.empty(2, 5, device="meta")
    with pytest.raises(ValueError, match=rf"probs is a meta tensor \(backend '{backend}'"):
        specops.sample(meta, backend=backend)
    with pytest.raises(ValueError, match=rf"probs is a meta tensor \(backend '{backend}'"):
        specops.sample_without_replacement(meta, 2, backend=backend)
    with pytest.raises(ValueError, match=rf"logits is a meta tensor \(backend '{backend}'"):
        specops.probs_from_logits(meta, backend=backend)
    tokens = torch.zeros(2, 1, dtype=torch.int64)
    with pytest.raises(ValueError, match=rf"target_probs is a meta tensor \(backend '{backend}'"):
        specops.verify_chain(torch.empty(2, 2, 5, device="meta"), tokens, backend=backend)

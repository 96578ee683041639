"""The features references against their contracts (plain loops / the paper's formula)."""

import math

import pytest
import torch

from specops import reference


def brute_path_similarity(paths, codebook, alpha, stride):
    """VVS Eq. 2 by a float64 loop over ordered pairs i != j."""
    b, p, length = paths.shape
    v = codebook.shape[0]
    out = []
    for r in range(b):
        num = den = 0.0
        for pos in range(0, length, stride):
            es = []
            for i in range(p):
                t = int(paths[r, i, pos])
                x = codebook[t].double() if 0 <= t < v else torch.zeros(codebook.shape[1]).double()
                es.append(x / max(float(x.norm()), 1e-12))
            if p == 1:
                s = 1.0
            else:
                s = sum(float(es[i] @ es[j]) for i in range(p) for j in range(p) if i != j)
                s /= p * (p - 1)
            w = alpha**pos
            num += w * s
            den += w
        out.append(num / den)
    return torch.tensor(out, dtype=torch.float64)


def test_gather_rows_loop():
    g = torch.Generator().manual_seed(0)
    src = torch.randn(3, 6, 5, generator=g)
    index = torch.tensor([[0, 5, -1, 2], [1, 1, 1, -1], [-1, -1, -1, -1]])
    out = reference.gather_rows(src, index)
    for b in range(3):
        for j in range(4):
            i = int(index[b, j])
            want = src[b, i] if i >= 0 else torch.zeros(5)
            assert torch.equal(out[b, j], want)
    # out of range reads zeros (fast-mode semantics)
    assert torch.equal(reference.gather_rows(src, torch.full((3, 1), 6)), torch.zeros(3, 1, 5))


def test_drafter_inputs_is_gather_plus_cat():
    g = torch.Generator().manual_seed(1)
    emb = torch.randn(11, 4, generator=g)
    tokens = torch.tensor([[3, 10, -1], [0, 0, 7]])
    feats = torch.randn(2, 3, 6, generator=g)
    step = torch.randn(2, generator=g)
    out = reference.drafter_inputs(emb, tokens, feats, step)
    assert out.shape == (2, 3, 4 + 6 + 2)
    for b in range(2):
        for j in range(3):
            t = int(tokens[b, j])
            e = emb[t] if t >= 0 else torch.zeros(4)
            assert torch.equal(out[b, j], torch.cat([e, feats[b, j], step]))
    per_row = torch.randn(2, 3, 2, generator=g)
    out = reference.drafter_inputs(emb, tokens, feats, per_row)
    assert torch.equal(out[..., 10:], per_row)
    assert torch.equal(reference.drafter_inputs(emb, tokens, feats)[..., 4:], feats)


@pytest.mark.parametrize("stride", [1, 2, 3])
@pytest.mark.parametrize("alpha", [0.9, 0.5, 1.0, 0.0])
def test_path_similarity_matches_pairwise_loop(stride, alpha):
    g = torch.Generator().manual_seed(stride)
    codebook = torch.randn(20, 8, generator=g)
    paths = torch.randint(0, 20, (3, 4, 7), generator=g)
    got = reference.path_similarity(paths, codebook, alpha=alpha, stride=stride)
    want = brute_path_similarity(paths, codebook, alpha, stride)
    assert got.dtype == torch.float32 and got.shape == (3,)
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-7)


def test_path_similarity_extremes():
    codebook = torch.randn(5, 3, generator=torch.Generator().manual_seed(2))
    same = torch.tensor([[[1, 2, 3]] * 4])
    assert math.isclose(float(reference.path_similarity(same, codebook)[0]), 1.0, rel_tol=1e-6)
    # two antipodal codes: cos = -1
    cb = torch.tensor([[1.0, 0.0], [-2.0, 0.0]])
    opp = torch.tensor([[[0, 0], [1, 1]]])
    assert math.isclose(float(reference.path_similarity(opp, cb)[0]), -1.0, rel_tol=1e-6)
    # P = 1: defined as 1.0
    one = torch.tensor([[[0, 1, 2]]])
    assert reference.path_similarity(one, codebook).tolist() == [1.0]
    # out-of-range ids are zero vectors
    bad = torch.tensor([[[0, 9], [0, 1]]])
    want = brute_path_similarity(bad, codebook, 0.9, 1)
    torch.testing.assert_close(reference.path_similarity(bad, codebook).double(), want)


def test_feature_cache_write_and_age_loop():
    g = torch.Generator().manual_seed(3)
    b, cap, h = 3, 9, 4
    store = torch.zeros(b, cap, h)
    stamps = torch.full((b, cap), -1, dtype=torch.int32)
    want_store, want_stamps = store.clone(), stamps.clone()
    for step in range(5):
        pos = torch.stack([torch.randperm(cap, generator=g)[:4] for _ in range(b)])
        pos[torch.rand(b, 4, generator=g) < 0.3] = -1
        pos[0, 0] = cap + 2  # out of range: dropped
        feats = torch.randn(b, 4, h, generator=g)
        st = step if step % 2 else torch.tensor([step, step + 10, step + 20])
        reference.feature_cache_write(store, stamps, pos, feats, st)
        for r in range(b):
            for j in range(4):
                p = int(pos[r, j])
                if 0 <= p < cap:
                    want_store[r, p] = feats[r, j]
                    want_stamps[r, p] = step if step % 2 else step + 10 * r
        assert torch.equal(store, want_store) and torch.equal(stamps, want_stamps)
    q = torch.tensor([[0, 1, -1], [2, 3, 4], [cap - 1, 5, 6]])
    age = reference.feature_cache_age(stamps, q, 30)
    for r in range(3):
        for j in range(3):
            p = int(q[r, j])
            s = int(stamps[r, p]) if p >= 0 else -1
            assert int(age[r, j]) == (30 - s if s >= 0 else -1)


def test_recent_positions():
    pos = reference.recent_positions(torch.tensor([5, 2, 7]), torch.tensor([3, 4, 0]), 4)
    assert pos.tolist() == [[2, 3, 4, -1], [-1, -1, 0, 1], [-1, -1, -1, -1]]
    assert reference.recent_positions(6, 2, 3).tolist() == [[4, 5, -1]]

"""specops.models: the procedural data, the patch VQ, the decoder's cached/tree forward against
its plain causal forward, CFG pairs, the drafter's tree extension, the embedded weights and the
training script."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import specops
from specops import Tree
from specops.models.data import CLASSES, make_dataset
from specops.models.drafter import Drafter
from specops.models.loading import WEIGHTS, load_default
from specops.models.transformer import ARConfig, Transformer
from specops.models.vq import PatchVQ, kmeans


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(0)
    cfg = ARConfig(vocab=64, grid=4, max_seq=64)
    model = Transformer(cfg).eval().requires_grad_(False)
    drafter = Drafter(cfg).bind(model).eval().requires_grad_(False)
    return model, drafter


def test_data_is_deterministic_and_covers_every_class():
    a, la = make_dataset(3, seed=5)
    b, lb = make_dataset(3, seed=5)
    c, _ = make_dataset(3, seed=6)
    assert a.shape == (3 * len(CLASSES), 64, 64, 3) and a.dtype == np.uint8
    assert np.array_equal(a, b) and np.array_equal(la, lb) and not np.array_equal(a, c)
    assert set(la.tolist()) == set(range(len(CLASSES)))


def test_vq_roundtrip_and_kmeans():
    imgs, _ = make_dataset(4, seed=0)
    vq = PatchVQ(torch.zeros(1, 48), 4)
    x = vq.patches(imgs).reshape(-1, 48)
    vq = PatchVQ(kmeans(x, 64, iters=5), 4)
    tok = vq.encode(imgs)
    assert tok.shape == (len(imgs), 16, 16) and int(tok.max()) < 64
    # decoding then re-encoding is (up to uint8 rounding of near-duplicate centroids) a fixed
    # point: codebook patches map to themselves
    rec = vq.decode(tok)
    assert rec.shape == imgs.shape
    assert (vq.encode(rec) == tok).float().mean() > 0.95


def _seq(model, b, t, seed=0):
    g = torch.Generator().manual_seed(seed)
    cls = torch.randint(0, model.cfg.num_classes, (b, 1), generator=g) + model.cfg.vocab
    return torch.cat([cls, torch.randint(0, model.cfg.vocab, (b, t - 1), generator=g)], 1)


def test_cached_chain_forward_matches_causal_forward(small):
    model, _ = small
    seq = _seq(model, 3, 12)
    ref, ref_h = model.forward_train(seq)
    cache = model.new_cache(3, 32)
    # prefill 5 tokens as a chain, commit, then the rest one by one
    pos = torch.arange(12).expand(3, 12)
    lg, h = model(seq[:, :5], pos[:, :5], cache)
    specops.commit_kv(cache.kv, cache.seqlens, torch.arange(5, dtype=torch.int32).expand(3, 5))
    outs = [lg]
    for i in range(5, 12):
        lg, _ = model(seq[:, i : i + 1], pos[:, i : i + 1], cache)
        specops.commit_kv(cache.kv, cache.seqlens, torch.zeros(3, 1, dtype=torch.int32))
        outs.append(lg)
    torch.testing.assert_close(torch.cat(outs, 1), ref, rtol=1e-4, atol=1e-4)
    assert cache.seqlens.tolist() == [12, 12, 12]


def test_tree_forward_and_commit_match_causal_forward(small):
    model, _ = small
    b = 2
    seq = _seq(model, b, 6, seed=1)
    cache = model.new_cache(b, 40)
    model(seq, torch.arange(6).expand(b, 6), cache)
    specops.commit_kv(cache.kv, cache.seqlens, torch.arange(6, dtype=torch.int32).expand(b, 6))
    tree = Tree.from_parents([-1, 0, 0, 1, 1, 2, 3])
    g = torch.Generator().manual_seed(3)
    tok = torch.randint(0, model.cfg.vocab, (b, 7), generator=g)
    pos = cache.seqlens.long()[:, None] + tree.depth
    lg, _ = model(tok, pos, cache, tree)
    # every node's logits equal the causal forward of prefix + its root-to-node path
    for path in tree.paths()[0].tolist():
        nodes = [n for n in path if n >= 0]
        ref, _ = model.forward_train(torch.cat([seq, tok[:, nodes]], 1))
        torch.testing.assert_close(lg[:, nodes], ref[:, 6:], rtol=1e-4, atol=1e-4)
    # keep the path 0 -> 1 -> 3 -> 6 and continue: the cache now holds exactly that sequence
    specops.commit_kv(cache.kv, cache.seqlens, torch.tensor([[0, 1, 3, 6]] * b, dtype=torch.int32))
    nxt = torch.randint(0, model.cfg.vocab, (b, 1), generator=g)
    lg2, _ = model(nxt, cache.seqlens.long()[:, None], cache)
    ref, _ = model.forward_train(torch.cat([seq, tok[:, [0, 1, 3, 6]], nxt], 1))
    torch.testing.assert_close(lg2[:, 0], ref[:, -1], rtol=1e-4, atol=1e-4)


def test_cfg_pairs_share_draft_tokens(small):
    """cond and uncond rows of one batch: the CFG-combined probabilities equal the combination of
    two separate runs."""
    model, _ = small
    cls = torch.tensor([[model.cfg.vocab + 2]])
    null = torch.tensor([[model.cfg.null_class]])
    body = _seq(model, 1, 5)[:, 1:]
    pair = torch.cat([torch.cat([cls, body], 1), torch.cat([null, body], 1)])
    cache = model.new_cache(2, 16)
    lg, _ = model(pair, torch.arange(5).expand(2, 5), cache)
    got = specops.probs_from_logits(lg[:1].float(), cfg_scale=3.0, uncond_logits=lg[1:].float())
    c, _ = model.forward_train(pair[:1])
    u, _ = model.forward_train(pair[1:])
    want = torch.softmax((u + 3.0 * (c - u)).float(), -1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_drafter_extend_matches_chain_forward(small):
    """Drafting depth by depth (dummy queries for earlier slots) equals one chain pass."""
    model, drafter = small
    b, m = 2, 4
    g = torch.Generator().manual_seed(4)
    feats = torch.randn(b, m, model.cfg.dim, generator=g, dtype=torch.float32)
    tok = torch.randint(0, model.cfg.vocab, (b, m), generator=g)
    cache = drafter.new_cache(b, 16)
    cache.seqlens.fill_(0)
    pos = torch.arange(m).expand(b, m)
    ref, ref_g = drafter(tok, feats, 1, pos, cache)
    cache2 = drafter.new_cache(b, 16)
    bits = Tree.chain(m, batch=b).mask_bits
    outs = []
    for j in range(m):
        lg, _ = drafter.extend(
            tok[:, j : j + 1],
            feats[:, j : j + 1],
            1,
            pos[:, j : j + 1],
            cache2,
            bits[:, : j + 1],
            j,
        )
        outs.append(lg)
    torch.testing.assert_close(torch.cat(outs, 1), ref, rtol=1e-4, atol=1e-4)


def test_embedded_weights_load_and_are_small():
    files = sorted(WEIGHTS.glob("*.pt"))
    shipped = {"ar.pt", "drafter.pt", "drafter_vsd.pt", "drafter_hivis.pt", "vq.pt"}
    assert {f.name for f in files} == shipped
    assert sum(f.stat().st_size for f in files) < 6 * 2**20
    m = load_default()
    assert m.cfg.grid == 16 and m.vq.vocab_size == m.cfg.vocab
    assert m.classes == CLASSES
    assert m.drafter is not None and m.drafter.target is m.target


def test_train_script_smoke(tmp_path):
    from specops.models import train

    train.main(
        [
            "--out", str(tmp_path), "--per-class", "4", "--codebook", "32", "--ar-steps", "2",
            "--batch", "2", "--drafter-steps", "1", "--drafter-batch", "2", "--threads", "1",
            "--objective", "vsd", "--vsd-steps", "1", "--vsd-samples", "2", "--vsd-prefixes", "2",
        ]
    )  # fmt: skip
    m = load_default(weights_dir=tmp_path)
    assert m.vq.vocab_size == 32 and m.drafter is not None
    assert load_default(weights_dir=tmp_path, drafter="vsd").train["drafter"]["objective"] == "vsd"

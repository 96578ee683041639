"""The feature drafter's prefill over the prompt (HiViS Eq. 3) and hidden visual tokens, on the
embedded model: prompts = [class token, image tokens ...], the image tokens standing in for an
image prefix that ``hide=`` takes out of the drafter's sequence."""

from __future__ import annotations

import pytest
import torch

from specops.decode import ar, speculative, vvs
from specops.decode._runners import DraftRunner
from specops.decode.stats import Recorder
from specops.models.loading import load_default

LENS = [6, 12, 9]  # ragged: class token + 5, 11, 8 image tokens
VIS = 4  # prompt positions 1 .. VIS are the "image" (hidden)


@pytest.fixture(scope="module")
def demo():
    return load_default()


def _prompts(cfg, lens=LENS, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = torch.full((len(lens), max(lens)), -1, dtype=torch.long)
    for r, n in enumerate(lens):
        p[r, 0] = cfg.vocab + r
        p[r, 1:n] = torch.randint(0, cfg.vocab, (n - 1,), generator=g)
    hide = torch.zeros_like(p, dtype=torch.bool)
    hide[:, 1 : VIS + 1] = True
    return p, hide


def _runner(demo, b, cap=64):
    return DraftRunner(demo.drafter, b, cap, Recorder("t", b, 1, 1, "cpu"), "cpu")


def test_first_entries_layout(demo):
    """Entry k = [e(x_{j_{k+1}}) || f_{j_k}] over the kept positions j, s_1 after the last one,
    -1 after that; without prefill the single entry [e(s_1) || f_{n-1}]."""
    prompt, hide = _prompts(demo.cfg)
    b, p = prompt.shape
    hidden = torch.randn(b, p, 8)
    root = torch.tensor([7, 8, 9], dtype=torch.int32)
    dr = _runner(demo, b)
    tok, feat, n = dr.first_entries(prompt, hidden, root)
    assert n.tolist() == LENS
    tok1, feat1, n1 = dr.first_entries(prompt, hidden, root, prefill=False)
    assert n1.tolist() == [1, 1, 1] and tok1[:, 0].tolist() == [7, 8, 9]
    th, fh, nh = dr.first_entries(prompt, hidden, root, hide=hide)
    assert nh.tolist() == [n - VIS for n in LENS]  # prefill length = text positions
    for r, nr in enumerate(LENS):
        # no hiding: the prompt shifted by one, then s_1; features f_0 .. f_{n-1}
        assert tok[r, : nr - 1].tolist() == prompt[r, 1:nr].tolist()
        assert tok[r, nr - 1] == root[r] and (tok[r, nr:] == -1).all()
        assert torch.equal(feat[r, :nr], hidden[r, :nr]) and (feat[r, nr:] == 0).all()
        assert torch.equal(feat1[r, 0], hidden[r, nr - 1])
        # hiding 1 .. VIS: kept j = 0, VIS + 1, .., n - 1
        j = [0] + list(range(VIS + 1, nr))
        m = len(j)
        assert th[r, : m - 1].tolist() == prompt[r, j[1:]].tolist()
        assert th[r, m - 1] == root[r] and (th[r, m:] == -1).all()
        assert torch.equal(fh[r, :m], hidden[r, j])


def test_last_prompt_position_is_always_kept(demo):
    prompt, _ = _prompts(demo.cfg)
    b, p = prompt.shape
    hidden = torch.randn(b, p, 8)
    root = torch.zeros(b, dtype=torch.int32)
    everything = torch.ones_like(prompt, dtype=torch.bool)
    tok, feat, n = _runner(demo, b).first_entries(prompt, hidden, root, hide=everything)
    assert n.tolist() == [1, 1, 1]
    for r, nr in enumerate(LENS):
        assert torch.equal(feat[r, 0], hidden[r, nr - 1])


@pytest.mark.parametrize("keep_positions", [False, True])
def test_prefill_call_equals_entries_one_by_one(demo, keep_positions):
    """One drafter call over the prefill entries leaves the same K/V in the drafter's cache, and
    the same prediction for the root's children, as feeding them one at a time."""
    torch.manual_seed(0)
    prompt, hide = _prompts(demo.cfg)
    b, p = prompt.shape
    hidden = torch.randn(b, p, demo.cfg.dim)
    root = torch.tensor([3, 4, 5], dtype=torch.int32)
    dr = _runner(demo, b)
    tok, feat, n = dr.first_entries(prompt, hidden, root, hide=hide, keep_positions=keep_positions)
    pos = dr._positions
    logits, g = dr.update(tok, feat, n)
    for r in range(b):
        one = _runner(demo, 1)
        m = int(n[r])
        for k in range(m):
            if keep_positions:  # the target's position of the entry, via the runner's shift
                one.shift = pos[r : r + 1, k] - k
            lg, gg = one.update(
                tok[r : r + 1, k : k + 1], feat[r : r + 1, k : k + 1], n[r : r + 1] * 0 + 1
            )
        assert int(one.cache.seqlens[0]) == m == int(dr.cache.seqlens[r])
        torch.testing.assert_close(one.cache.kv[:, :, 0, :m], dr.cache.kv[:, :, r, :m])
        torch.testing.assert_close(lg[0], logits[r])
        torch.testing.assert_close(gg[0], g[r])
    if keep_positions:  # later entries continue at the target's positions
        assert dr.shift.tolist() == [VIS] * b


KW = [
    dict(drafter_prefill=False),
    dict(),
    dict(hide=True),
    dict(hide=True, hide_positions="target"),
]
IDS = ["no-prefill", "prefill", "hide", "hide-target-pos"]


@pytest.mark.parametrize("kw", KW, ids=IDS)
@pytest.mark.parametrize("tree", [None, "dynamic"], ids=["chain", "dynamic"])
def test_greedy_equals_ar_ragged(demo, kw, tree):
    """Greedy speculative decoding equals greedy AR whatever the drafter's prefill, on a ragged
    batch, and each request drafts as it does alone (same target passes)."""
    prompt, hide = _prompts(demo.cfg)
    kw = dict(kw)
    if kw.get("hide"):
        kw["hide"] = hide
    ref, _ = ar(demo.target, prompt, length=20, temperature=0)
    opts = dict(tree=tree, num_draft=3, branch=3, depth=3, num_nodes=10, length=20, temperature=0)
    out, st = speculative(demo.target, demo.drafter, prompt, **opts, **kw)
    assert torch.equal(out, ref)
    expect = [1] * 3 if kw.get("drafter_prefill") is False else LENS
    if kw.get("hide") is not None:
        expect = [n - VIS for n in LENS]
    assert st.extra["drafter_prefill"] == pytest.approx(sum(expect) / 3)
    r = 2
    one = dict(kw)
    if "hide" in one:
        one["hide"] = hide[r : r + 1, : LENS[r]]
    alone, st1 = speculative(demo.target, demo.drafter, prompt[r : r + 1, : LENS[r]], **opts, **one)
    assert torch.equal(alone[0], out[r]) and st1.passes_per_request[0] == st.passes_per_request[r]


def test_vvs_greedy_with_hidden_prefix(demo):
    """VVS with its skips off (similarity threshold 2 > 1) verifies every step: greedy AR."""
    prompt, hide = _prompts(demo.cfg)
    ref, _ = ar(demo.target, prompt, length=20, temperature=0)
    opts = dict(branch=3, depth=3, num_nodes=10, length=20, temperature=0, threshold=2.0)
    out, st = vvs(demo.target, demo.drafter, prompt, demo.vq.latents, hide=hide, **opts)
    assert torch.equal(out, ref)
    assert st.extra["drafter_prefill"] == pytest.approx(sum(n - VIS for n in LENS) / 3)


def test_errors(demo):
    prompt, hide = _prompts(demo.cfg)
    with pytest.raises(ValueError, match="hide= needs drafter_prefill=True"):
        speculative(demo.target, demo.drafter, prompt, hide=hide, drafter_prefill=False)
    with pytest.raises(ValueError, match="hide must be a bool mask"):
        speculative(demo.target, demo.drafter, prompt, hide=hide[:, 1:])
    with pytest.raises(ValueError, match="hide_positions must be"):
        speculative(demo.target, demo.drafter, prompt, hide_positions="nope")

    class Standalone:
        reads_prompt = True

    with pytest.raises(ValueError, match="a standalone draft model reads the whole prompt"):
        speculative(demo.target, Standalone(), prompt, hide=hide)


def test_hivis_training_sequence_and_weights(demo):
    """The HiViS drafter's training keeps the class position and positions k .. (the visible
    prefix's last token on); its loss is finite and trains the drafter; the shipped weights load
    and decode greedily as AR with the prefix hidden."""
    from specops.models.train_hivis import hivis_loss, kept_positions, load_hivis_drafter

    assert kept_positions(1, 5).tolist() == [0, 1, 2, 3, 4]
    assert kept_positions(3, 6).tolist() == [0, 3, 4, 5]
    d = load_hivis_drafter(demo.target)
    seq = torch.randint(0, demo.cfg.vocab, (2, 40))
    seq[:, 0] = demo.cfg.vocab
    d.requires_grad_(True)
    loss = hivis_loss(d, demo.target, seq, 17, steps=1)
    loss.backward()
    assert torch.isfinite(loss) and d.fc.weight.grad.abs().sum() > 0
    d.requires_grad_(False)
    prompt, hide = _prompts(demo.cfg)
    ref, _ = ar(demo.target, prompt, length=20, temperature=0)
    kw = dict(hide=hide, hide_positions="target", length=20, temperature=0, num_nodes=10)
    out, _ = speculative(demo.target, d, prompt, **kw)
    assert torch.equal(out, ref)

"""The reference verify_tree and path_acceptance against their contract (DESIGN.md,
reference/verify.py); chi-square checks each paired with a negative control (verify_stats.py)."""

from __future__ import annotations

import pytest
import torch
from helpers import gen as _gen
from helpers import random_probs
from verify_stats import PASS, TREE_PARENTS, _draw, joint_pvalue, random_parents, tree_inputs

from specops import Tree
from specops.reference import verify as rv
from specops.reference.philox import row_uniforms


def tree_joint_pvalue(mode, *, seed=0, b=20000, wor=None):
    gen = _gen(200 + seed)
    m, t, tp, tok, dp = tree_inputs(b, gen, TREE_PARENTS, mode=mode)
    wor = (mode == "wor") if wor is None else wor
    r = rv.verify_tree(tp, t, tok, dp, without_replacement=wor, seed=seed, offset=3)
    seqs = m.complete(r.tokens, r.num_accepted.long() + 1, 3, gen)
    return joint_pvalue(seqs, m)


@pytest.mark.parametrize("mode,wor", [("iid", False), ("wor", True), ("det", False), ("det", True)])
def test_tree_is_lossless(mode, wor):
    assert tree_joint_pvalue(mode, wor=wor) > PASS


def test_tree_negative_control_residual_without_q(monkeypatch):
    monkeypatch.setattr(rv, "_residual", lambda p, q: p)
    assert tree_joint_pvalue("iid") < PASS


def test_tree_negative_control_det_residual_keeps_rejected_token(monkeypatch):
    # deterministic drafts must zero p(x) of a rejected child (q = one-hot)
    monkeypatch.setattr(rv, "_residual", lambda p, q: p)
    assert tree_joint_pvalue("det") < PASS


def test_tree_negative_control_no_renormalisation(monkeypatch):
    # without replacement, the next sibling's q must be renormalised after dropping x
    def drop_only(q, x):
        return torch.where(torch.arange(q.shape[-1])[None, :] == x[:, None], 0.0, q)

    monkeypatch.setattr(rv, "_drop_and_renormalise", drop_only)
    assert tree_joint_pvalue("wor") < PASS


def test_tree_negative_control_wor_drafts_verified_as_iid():
    # siblings drawn without replacement but verified as i.i.d. draws: biased
    gen = _gen(200)
    m, t, tp, tok, dp = tree_inputs(20000, gen, TREE_PARENTS, mode="wor")
    r = rv.verify_tree(tp, t, tok, dp, without_replacement=False, seed=0, offset=3)
    seqs = m.complete(r.tokens, r.num_accepted.long() + 1, 3, gen)
    assert joint_pvalue(seqs, m) < PASS


def _greedy_walk(p, parents, tok):
    n = len(parents)
    cur, path, out = 0, [0], []
    while True:
        g = int(p[cur].argmax())
        kids = [c for c in range(n) if parents[c] == cur and int(tok[c]) != -1]
        hit = [c for c in kids if int(tok[c]) == g]
        if not hit:
            return path, out + [g]
        cur = hit[0]
        path.append(cur)
        out.append(g)


def test_tree_greedy_matches_argmax_decoding():
    gen = _gen(7)
    b, n, v = 120, 12, 6
    parents = random_parents(b, n, gen)
    t = Tree.from_parents(parents)
    p = random_probs(b, n, v, generator=gen)
    am = p.argmax(-1)
    tok = torch.randint(0, v, (b, n), generator=gen)
    tok = torch.where(
        torch.rand(b, n, generator=gen) < 0.5, am.gather(1, parents.clamp(min=0)), tok
    )
    tok[:, 5] = -1  # a padding node
    r = rv.verify_tree(p, t, tok, None, greedy=True)
    w = r.path.shape[1]
    assert w == t.max_depth() + 1
    for i in range(b):
        path, out = _greedy_walk(p[i], parents[i].tolist(), tok[i])
        assert r.path[i].tolist() == path + [-1] * (w - len(path))
        assert r.tokens[i].tolist() == out + [-1] * (w - len(out))
        assert int(r.num_accepted[i]) == len(path) - 1


def test_tree_one_hot_targets_are_exact(device):
    gen = _gen(8)
    b, v = 400, 7
    parents = TREE_PARENTS
    n = len(parents)
    hot = torch.randint(0, v, (b, n), generator=gen)
    p = torch.nn.functional.one_hot(hot, v).float()
    tok = torch.randint(0, v, (b, n), generator=gen)
    par = torch.tensor(parents).clamp(min=0)
    tok = torch.where(torch.rand(b, n, generator=gen) < 0.6, hot[:, par], tok)
    q = random_probs(b, n, v, generator=gen)
    t = Tree.from_parents(parents).to(device)
    p, tok, q = p.to(device), tok.to(device), q.to(device)
    want = rv.verify_tree(p, t, tok, None, greedy=True)
    for seed in range(3):
        for dp in (q, None):
            for wor in (False, True):
                got = rv.verify_tree(p, t, tok, dp, seed=seed, without_replacement=wor)
                assert torch.equal(got.tokens, want.tokens) and torch.equal(got.path, want.path)


@pytest.mark.parametrize("relaxed", [False, True])
def test_tree_on_a_chain_equals_verify_chain(relaxed):
    gen = _gen(9)
    b, k, v = 2000, 5, 8
    p = random_probs(b, k + 1, v, generator=gen, zero_frac=0.2)
    q = random_probs(b, k, v, generator=gen)
    x = _draw(q.reshape(-1, v), gen).reshape(b, k)
    relax = rv.Relaxation(torch.randint(-1, v, (v, 3), generator=gen), 0.2) if relaxed else None
    seeds = torch.randint(0, 1000, (b,), generator=gen)
    tok = torch.cat([torch.full((b, 1), 77), x], 1)
    qt = torch.cat([q, torch.rand(b, 1, v, generator=gen)], 1)  # row K: never used
    for dp, dpt in ((q, qt), (None, None)):
        c = rv.verify_chain(p, x, dp, seed=seeds, offset=5, relax=relax)
        t = rv.verify_tree(p, Tree.chain(k + 1), tok, dpt, seed=seeds, offset=5, relax=relax)
        assert torch.equal(c.tokens, t.tokens) and torch.equal(c.num_accepted, t.num_accepted)
        acc = torch.arange(k)[None, :] < c.num_accepted[:, None]
        assert torch.equal(t.path[:, 1:] >= 0, acc)


def test_tree_path_and_tokens_consistent(device):
    gen = _gen(10)
    b, n, v = 600, 16, 5
    parents = random_parents(b, n, gen, window=3)
    t = Tree.from_parents(parents).to(device)
    p = random_probs(b, n, v, generator=gen).to(device)
    q = random_probs(b, n, v, generator=gen).to(device)
    tok = torch.randint(-1, v, (b, n), generator=gen).to(device)
    r = rv.verify_tree(p, t, tok, q, seed=1, without_replacement=True)
    a = r.num_accepted.long()
    w = r.path.shape[1]
    col = torch.arange(w, device=device)
    assert (r.path[:, 0] == 0).all()
    assert ((r.path >= 0) == (col <= a[:, None])).all()
    assert ((r.tokens >= 0) == (col <= a[:, None])).all()
    par = t.parents.long()
    pth = r.path.long()
    for i in range(1, w):
        ok = col[i] <= a
        node = pth[:, i].clamp(min=0)
        assert torch.where(ok, par.gather(1, node[:, None])[:, 0] == pth[:, i - 1], True).all()
        assert torch.where(ok, tok.gather(1, node[:, None])[:, 0] == r.tokens[:, i - 1], True).all()
    # padding nodes (-1) are never on the path
    onpath = tok.gather(1, pth.clamp(min=0))
    assert torch.where((col >= 1) & (col <= a[:, None]), onpath != -1, True).all()


def test_tree_batch_one_tree_broadcasts_and_uniforms():
    gen = _gen(11)
    b, v = 50, 6
    n = len(TREE_PARENTS)
    p = random_probs(b, n, v, generator=gen)
    q = random_probs(b, n, v, generator=gen)
    tok = torch.randint(0, v, (b, n), generator=gen)
    t1 = Tree.from_parents(TREE_PARENTS)
    tb = Tree.from_parents(torch.tensor(TREE_PARENTS).expand(b, -1))
    r1 = rv.verify_tree(p, t1, tok, q, seed=4)
    rb = rv.verify_tree(p, tb, tok, q, seed=4)
    ru = rv.verify_tree(p, t1, tok, q, uniforms=row_uniforms(4, 0, b, n))
    assert torch.equal(r1.tokens, rb.tokens) and torch.equal(r1.tokens, ru.tokens)


def test_tree_root_only():
    p = random_probs(7, 1, 5, generator=_gen(12))
    r = rv.verify_tree(p, Tree.chain(1), torch.zeros(7, 1, dtype=torch.long), None, seed=1)
    assert r.path.tolist() == [[0]] * 7 and (r.num_accepted == 0).all()
    assert (r.tokens >= 0).all()


# --------------------------------------------------------------------------------------------
# path acceptance (VSD)
# --------------------------------------------------------------------------------------------
def test_path_acceptance_matches_brute_force():
    gen = _gen(13)
    b, n, v = 6, 11, 5
    parents = random_parents(b, n, gen)
    t = Tree.from_parents(parents)
    p = random_probs(b, n, v, generator=gen, zero_frac=0.2)
    q = random_probs(b, n, v, generator=gen, zero_frac=0.2)
    tok = torch.randint(0, v, (b, n), generator=gen)
    paths = t.paths()
    for dp in (q, None):
        kappa, el = rv.path_acceptance(p, dp, t, tok)
        assert kappa.shape == paths.shape[:2] == el.shape
        for i in range(b):
            for j in range(paths.shape[1]):
                nodes = [x for x in paths[i, j].tolist() if x >= 0]
                s, e = 1.0, 0.0
                for par, node in zip(nodes[:-1], nodes[1:]):
                    pp = float(p[i, par, tok[i, node]])
                    qq = 1.0 if dp is None else float(q[i, par, tok[i, node]])
                    alpha = min(1.0, pp / qq) if qq > 0 else float(pp > 0)
                    s *= alpha
                    e += s
                if not nodes:
                    s, e = 0.0, 0.0
                assert kappa[i, j].item() == pytest.approx(s, abs=1e-6)
                assert el[i, j].item() == pytest.approx(e, abs=1e-5)


def test_path_acceptance_predicts_mean_accepted_length():
    # E[num_accepted] of verify_chain for fixed drafts = sum_k S_k (VSD Eq. 10)
    gen = _gen(14)
    k, v, b = 5, 6, 40000
    p = random_probs(1, k + 1, v, generator=gen)
    q = random_probs(1, k, v, generator=gen)
    x = _draw(q[0], gen)[:, 0][None]
    kappa, el = rv.path_acceptance(
        p, torch.cat([q, q[:, :1]], 1), Tree.chain(k + 1), torch.cat([x[:, :1], x], 1)
    )
    r = rv.verify_chain(p.expand(b, -1, -1), x.expand(b, -1), q.expand(b, -1, -1), seed=1)
    a = r.num_accepted.double()
    assert abs(a.mean().item() - el.item()) < 5 * a.std().item() / b**0.5 + 1e-6
    assert abs((a == k).double().mean().item() - kappa.item()) < 5 * (0.25 / b) ** 0.5

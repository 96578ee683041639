"""The reference verify_jacobi, chain and tree modes, against its contract (DESIGN.md,
reference/verify.py); chi-square checks each paired with a negative control (verify_stats.py)."""

from __future__ import annotations

import pytest
import torch
from helpers import gen as _gen
from verify_stats import (
    PASS,
    grouped_pvalue,
    jacobi_chain_inputs,
    jacobi_chain_pvalue,
    jacobi_slot_pvalue,
    jacobi_stale_rows,
    jacobi_tree_inputs,
    joint_pvalue,
)

from specops.reference import verify as rv


def chain_pvalue(cont, *, one_hot=False):
    kw = dict(continue_after_reject=cont, seed=3, offset=1)
    return jacobi_chain_pvalue(rv.verify_jacobi, b=10000, one_hot=one_hot, **kw)


@pytest.mark.parametrize("cont,one_hot", [(True, False), (False, False), (True, True)])
def test_jacobi_chain_every_slot_is_a_sample_of_its_p(cont, one_hot):
    assert chain_pvalue(cont, one_hot=one_hot) > PASS


def test_jacobi_chain_negative_control(monkeypatch):
    monkeypatch.setattr(rv, "_residual", lambda p, q: p)
    assert chain_pvalue(True) < PASS


@pytest.mark.parametrize("cont", [True, False])
def test_jacobi_chain_structure(cont):
    gen = _gen(301)
    b, L, v = 3000, 6, 5
    p, x, q, _ = jacobi_chain_inputs(b, gen, L=L, v=v)
    x[:7, 2] = -1  # no draft: always resampled
    r = rv.verify_jacobi(p, x, q, continue_after_reject=cont, num_candidates=3, seed=8)
    a = r.num_accepted.long()
    pos = torch.arange(L)
    assert (r.next_window >= 0).all() and r.path is None
    assert (r.first_reject == torch.where(a < L, a, -1)).all()
    assert (a[:7] <= 2).all()
    assert torch.where(pos < a[:, None], r.next_window == x, True).all()
    # candidates only after the first rejection
    c = r.candidates
    assert c.shape == (b, L, 3) and c.dtype == torch.int32
    after = (r.first_reject[:, None] >= 0) & (pos > r.first_reject[:, None])
    assert ((c[..., 0] >= 0) == after).all()
    pos_mass = (p > 0).sum(-1)  # candidates need positive mass; -1 where fewer than 3
    valid = c >= 0
    assert (valid.sum(-1) == torch.where(after, pos_mass.clamp(max=3), 0)).all()
    assert (p.gather(-1, c.long().clamp(min=0)) > 0)[valid].all()
    s = torch.sort(torch.where(valid, c, -1 - torch.arange(3)), -1).values
    assert (s[..., 1:] != s[..., :-1]).all()  # distinct
    # and with num_candidates = 1 the rest of the result does not change
    r1 = rv.verify_jacobi(p, x, q, continue_after_reject=cont, seed=8)
    assert torch.equal(r1.next_window, r.next_window) and r1.candidates is None


def test_jacobi_candidates_first_draw_is_a_sample_of_p():
    gen = _gen(302)
    b, L, groups = 10000, 4, 3
    p, x, q, g = jacobi_chain_inputs(b, gen, L=L, groups=groups)
    r = rv.verify_jacobi(p, x, q, num_candidates=2, seed=5)
    sel = (r.candidates[..., 0] >= 0).flatten()
    assert jacobi_slot_pvalue(p, g, r.candidates[..., 0], L, groups, sel) > PASS


def test_jacobi_explicit_uniforms_known_answer():
    p = torch.tensor([[[0.5, 0.3, 0.2], [0.1, 0.1, 0.8], [0.6, 0.2, 0.2]]])
    q = torch.tensor([[[0.2, 0.5, 0.3], [0.1, 0.1, 0.8], [0.2, 0.2, 0.6]]])
    x = torch.tensor([[1, 2, 2]])
    # slot 0: u*0.5 < 0.3 iff u < 0.6; slot 1: p = q, always; slot 2: u*0.6 < 0.2 iff u < 1/3
    u = torch.tensor([[0.7, 0.99, 0.5, 0.1, 0.15, 0.9]])
    r = rv.verify_jacobi(p, x, q, uniforms=u)
    # slot 0 -> residual (0.3, 0, 0) = token 0; slot 2 -> residual (0.4, 0, 0) = token 0
    assert r.next_window.tolist() == [[0, 2, 0]] and r.num_accepted.tolist() == [0]
    assert r.first_reject.tolist() == [0]
    r = rv.verify_jacobi(p, x, q, uniforms=u, continue_after_reject=False)
    # slots 1, 2 sampled afresh from p with u = 0.15, 0.9: tokens 1, 2
    assert r.next_window.tolist() == [[0, 1, 2]]


@pytest.mark.parametrize("cont", [True, False])
def test_jacobi_tree_mode(cont):
    gen = _gen(400)
    b = 15000
    m, t, tp, tok, dp = jacobi_tree_inputs(b, gen)
    L, v = tp.shape[1], tp.shape[2]
    k = 2 if cont else 1  # candidates do not depend on cont: check them once
    r = rv.verify_jacobi(
        tp, tok, dp, tree=t, continue_after_reject=cont, num_candidates=k, seed=6, offset=2
    )
    # 1. the accepted prefix is verify_tree without replacement, with the same draws (t: from
    # the unnormalised residual, equal but at rounding ties, none among these inputs)
    vt = rv.verify_tree(tp, t, tok, dp, without_replacement=True, seed=6, offset=2)
    w = vt.path.shape[1]
    assert torch.equal(r.path[:, :w], vt.path) and (r.path[:, w:] == -1).all()
    assert torch.equal(r.num_accepted, vt.num_accepted)
    a = r.num_accepted.long()
    pos = torch.arange(L)
    assert torch.equal(torch.where(pos[:w] <= a[:, None], r.next_window[:, :w], -1), vt.tokens)
    # 2. lossless: the committed tokens follow the target process
    seqs = m.complete(r.next_window, a + 1, 3, gen)
    assert joint_pvalue(seqs, m) > PASS
    # 3. continuation: every later position holds a sample of its stale target row l_d
    rej = r.first_reject >= 0
    assert (r.first_reject == torch.where(rej, a, -1)).all()
    line, rows_p, grp = jacobi_stale_rows(t, r, tp, tok)
    nodes_here = line >= 0
    has_tok = r.next_window >= 0
    child = t.first_child[0].long()[line.clamp(min=0)]
    assert torch.equal(has_tok & (pos > a[:, None]), nodes_here & (child >= 0))
    sel = (has_tok & (pos > a[:, None])).flatten()
    assert sel.sum() > 5000
    pv = grouped_pvalue(grp[sel], r.next_window.flatten()[sel], rows_p[sel], L * v)
    assert pv > PASS
    # 4. candidates after the first rejection, from the same stale rows
    if not cont:
        assert r.candidates is None
        return
    c0 = r.candidates[..., 0].flatten()
    csel = c0 >= 0
    assert torch.equal(csel, nodes_here.flatten() & (rows_p > 0).any(-1))
    assert grouped_pvalue(grp[csel], c0[csel], rows_p[csel], L * v) > PASS


def test_jacobi_tree_negative_control(monkeypatch):
    gen = _gen(400)
    b = 15000
    m, t, tp, tok, dp = jacobi_tree_inputs(b, gen)
    monkeypatch.setattr(rv, "_drop_and_renormalise", lambda q, x: q)  # with replacement
    r = rv.verify_jacobi(tp, tok, dp, tree=t, seed=6, offset=2)
    seqs = m.complete(r.next_window, r.num_accepted.long() + 1, 3, gen)
    assert joint_pvalue(seqs, m) < PASS

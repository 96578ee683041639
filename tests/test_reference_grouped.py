"""GSD grouped acceptance (``relax=Grouping(...)``, specops/reference/grouped.py) against the
authors' rule, its acceptance formula, and its distance from the target law."""

from __future__ import annotations

import pytest
import torch

from specops.reference import verify as rv
from specops.reference.grouped import Grouping, group_sums, group_window


# --------------------------------------------------------------------------------------------
# The authors' acceptance function, restated readably (github junhyukso/GSD,
# scheduler/jacobi_iteration_lumina_mgpt.py, the loop in __call__ of the rejection sampler):
#
#     logit_sort = advanced_logits.sort(dim=-1).indices           # the whole row, ascending
#     cur_idx = torch.nonzero(logit_sort[b, t] == cls_idx)
#     logit_sort_idx = logit_sort[b, t][cur_idx - 7 : cur_idx + 7]
#     is_in_p_thr = ((adv_super_prob - advanced_prob[b, t][cls_idx]).abs() < p_thr)
#     is_in_d_thr = (head_img_sims[cls_idx][logit_sort_idx] < d_thr)    # squared distances
#     final_p = (sum(p * mask) / sum(q * mask)).clamp(max=1);  accept iff r < final_p
#
# Restated with the documented differences (docs/reference_semantics.md, "Grouped acceptance"):
# the sort is stable on (p, id) (torch's sort leaves ties unspecified); the window is
# symmetric, [cur - w, cur + w] (their slice [cur - 7, cur + 7) takes 7 below and 6 above, and
# at cur < 7 its negative start empties the slice, an exception they catch by falling back to
# p(x) / q(x)); a window member outside the image range is left out (they skip the distance test
# for the whole window when any member is outside their 10000-token table).
# --------------------------------------------------------------------------------------------
def authors_accept(p_row, q_row, x, u, codebook, w, p_thr, d_thr, start=0) -> bool:
    order = torch.sort(p_row, stable=True).indices  # ascending p, ties by ascending id
    cur = int((order == x).nonzero()[0, 0])
    window = order[max(cur - w, 0) : cur + w + 1]
    sup_p, sup_q = p_row[window], q_row[window]
    in_p = (sup_p - p_row[x]).abs() < p_thr
    vi = codebook.shape[0]
    img = (window >= start) & (window < start + vi)
    if not start <= x < start + vi:
        in_d = window == x  # no code for x: judged alone
    else:
        e = codebook.double()
        d = ((e[(window - start).clamp(0, vi - 1)] - e[x - start]) ** 2).sum(-1)
        in_d = img & (d < d_thr)
    mask = in_p & in_d
    big_p = sup_p[mask].double().sum()
    big_q = sup_q[mask].double().sum()
    final_p = torch.clamp(big_p / big_q, max=1.0)
    return bool(u < final_p)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _case(seed, b, k, v, c=3, ties=False):
    """p [B, K+1, V], q [B, K, V], drafts x ~ q, a codebook [V, c]; ties: probabilities in
    multiples of 1/32 (many equal entries)."""
    g = _gen(seed)
    if ties:
        w = torch.randint(0, 4, (b, k + 1, v), generator=g).float()
        w[..., 0] += 1
        p = w / w.sum(-1, keepdim=True)
        wq = torch.randint(0, 4, (b, k, v), generator=g).float()
        wq[..., 0] += 1
        q = wq / wq.sum(-1, keepdim=True)
    else:
        p = torch.softmax(2.5 * torch.randn(b, k + 1, v, generator=g), -1)
        q = torch.softmax(2.5 * torch.randn(b, k, v, generator=g), -1)
    x = torch.multinomial(q.reshape(-1, v), 1, generator=g).reshape(b, k)
    cb = torch.randn(v, c, generator=g)
    u = torch.rand(b, k + 1, generator=g)
    return p, q, x, cb, u


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("w,p_thr,d_thr", [(7, 0.15, 0.5), (2, 0.05, 3.0), (1, 1.0, 1e9)])
def test_decisions_equal_the_authors_rule(ties, w, p_thr, d_thr):
    b, k, v = 64, 3, 40
    p, q, x, cb, u = _case(11 + w, b, k, v, ties=ties)
    relax = Grouping(cb, w, p_thr, d_thr)
    r = rv.verify_chain(p, x, q, relax=relax, uniforms=u)
    want = torch.zeros(b, dtype=torch.long)
    for i in range(b):
        a = 0
        while a < k and authors_accept(p[i, a], q[i, a], int(x[i, a]), u[i, a], cb, w, p_thr,
                                       d_thr):  # fmt: skip
            a += 1
        want[i] = a
    assert torch.equal(r.num_accepted.long(), want)
    # not monotone in the exact test: a neighbour with q > p lowers P / Q below p(x) / q(x)


def test_decisions_equal_the_authors_rule_per_slot_with_an_image_range():
    # every slot's test (verify_jacobi, SJD: no early stop) on a vocabulary whose image tokens
    # are ids [5, 35); text tokens outside never join a group and are judged alone
    b, L, v, start, vi = 24, 6, 40, 5, 30
    p, q, x, _, _ = _case(5, b, L - 1, v, ties=True)
    p, q = p[:, :L], torch.cat([q, q[:, :1]], 1)
    x = torch.multinomial(q.reshape(-1, v), 1, generator=_gen(1)).reshape(b, L)
    cb = torch.randn(vi, 2, generator=_gen(2))
    u = torch.rand(b, 2 * L, generator=_gen(3))
    relax = Grouping(cb, 3, 0.2, 1.0, image_range=(start, start + vi))
    r = rv.verify_jacobi(p, x, q, relax=relax, uniforms=u, continue_after_reject=False)
    ok = torch.tensor(
        [
            [
                authors_accept(p[i, j], q[i, j], int(x[i, j]), u[i, j], cb, 3, 0.2, 1.0, start)
                for j in range(L)
            ]  # fmt: skip
            for i in range(b)
        ]
    )
    assert torch.equal(r.num_accepted.long(), ok.long().cumprod(-1).sum(-1))


def test_window_is_the_sorted_neighbourhood_with_id_ties():
    p = torch.tensor([[0.1, 0.3, 0.1, 0.2, 0.1, 0.2, 0.0]])
    # (p, id) order: 6 (0.0), 0, 2, 4 (0.1), 3, 5 (0.2), 1 (0.3)
    nb = group_window(p, torch.tensor([2]), 2)
    assert nb.tolist() == [[0, 6, 4, 3]]  # below nearest first, then above nearest first
    nb = group_window(p, torch.tensor([1]), 3)
    assert nb.tolist() == [[5, 3, 4, -1, -1, -1]]  # the top of the order: nothing above
    nb = group_window(p, torch.tensor([6]), 9)  # w > V: padded with -1
    assert nb.tolist() == [[-1] * 9 + [0, 2, 4, 3, 5, 1, -1, -1, -1]]


# --------------------------------------------------------------------------------------------
# (b) the acceptance probability is min(1, P(G) / Q(G)), enumerated
# --------------------------------------------------------------------------------------------
def test_acceptance_probability_matches_the_formula_by_hand():
    # binary fractions: every sum exact.  Codes on a line: 0 at 0, 1 at 0.5, 2 at 3, 3 at 1.
    p = torch.tensor([[[0.25, 0.375, 0.125, 0.25], [0.25] * 4]])
    q = torch.tensor([[[0.5, 0.25, 0.125, 0.125]]])
    cb = torch.tensor([[0.0], [0.5], [3.0], [1.0]])
    grid = (torch.arange(1024) + 0.5) / 1024

    def rate(x, relax):
        x = torch.tensor([[x]])
        u = torch.stack([grid, torch.full_like(grid, 0.5)], -1)
        acc = [rv.verify_chain(p, x, q, relax=relax, uniforms=u[i : i + 1]).num_accepted
               for i in range(len(grid))]  # fmt: skip
        return torch.cat(acc).float().mean().item()

    g = Grouping(cb, 1, 0.2, 1.5)
    # x = 0 (p 0.25): order 2, 0, 3, 1 (ties 0 < 3 by id); window +-1 = {2, 3}; 2 is 0.125 away
    # in p but 9 away in code space; 3 is at distance 1 < 1.5 and 0 < 0.2 in p: G = {0, 3},
    # P = 0.5, Q = 0.625 -> 0.8
    assert rate(0, g) == pytest.approx(0.8, abs=1 / 1024)
    # x = 3: window {0, 1}; 1: |0.375 - 0.25| < 0.2, d 0.25: G = {3, 0, 1}, P 0.875 Q 0.875 -> 1
    assert rate(3, g) == 1.0
    # x = 2 (p 0.125, q 0.125, the bottom): window {0}, d 9: alone, min(1, 1) = 1
    assert rate(2, g) == 1.0
    # exact for comparison: x = 0 accepted with 0.25 / 0.5
    assert rate(0, None) == pytest.approx(0.5, abs=1 / 1024)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_acceptance_probability_matches_the_formula_enumerated(seed):
    # every draft token of small random rows: the fraction of a uniform grid accepted equals
    # min(1, P / Q) with P, Q summed over the group found by brute force from the definition
    g = _gen(seed)
    v = 6
    p = torch.randint(0, 3, (v,), generator=g).float() + 0.5 * (torch.rand(v, generator=g) < 0.5)
    p = p / p.sum()
    q = torch.softmax(torch.randn(v, generator=g), -1)
    cb = torch.randn(v, 2, generator=g)
    w, p_thr, d_thr = 2, 0.1, 2.0
    relax = Grouping(cb, w, p_thr, d_thr)
    grid = (torch.arange(512) + 0.5) / 512
    for x in range(v):
        order = sorted(range(v), key=lambda t: (p[t].item(), t))
        r = order.index(x)
        win = order[max(r - w, 0) : r + w + 1]
        grp = [y for y in win if abs((p[y] - p[x]).item()) < p_thr
               and ((cb[y].double() - cb[x].double()) ** 2).sum() < d_thr]  # fmt: skip
        want = min(1.0, sum(p[y].item() for y in grp) / sum(q[y].item() for y in grp))
        big_p, big_q = group_sums(p[None].expand(len(grid), v), q[None].expand(len(grid), v),
                                  torch.full((len(grid),), x), relax)  # fmt: skip
        got = (grid * big_q < big_p).float().mean().item()
        assert got == pytest.approx(want, abs=1 / 512)
        pr = p[None, None].expand(len(grid), 2, v).contiguous()
        u = torch.stack([grid, grid], -1)
        res = rv.verify_chain(pr, torch.full((len(grid), 1), x), q[None, None].expand(
            len(grid), 1, v), relax=relax, uniforms=u)  # fmt: skip
        assert res.num_accepted.float().mean().item() == pytest.approx(got, abs=1e-6)


# --------------------------------------------------------------------------------------------
# (c) total-variation distance from the target law, per token
# --------------------------------------------------------------------------------------------
def _output_law(p, q, accept):
    """Law of a one-draft chain's first token: x ~ q kept with prob a(x), else the residual."""
    r = (p - q).clamp_min(0)
    r = r / r.sum() if r.sum() > 0 else p
    kept = q * accept
    return kept + (1 - kept.sum()) * r


def _tv_per_token(seed, relax_of, v=64, rows=32):
    g = _gen(seed)
    tv = []
    for _ in range(rows):
        p = torch.softmax(2.0 * torch.randn(v, generator=g), -1).double()
        q = torch.softmax(torch.log(p) + 0.7 * torch.randn(v, generator=g).double(), -1)
        cb = torch.randn(v, 4, generator=g)
        relax = relax_of(cb)
        if relax is None:
            a = torch.clamp(p / q, max=1)
        else:
            big_p, big_q = group_sums(p.float()[None].expand(v, v), q.float()[None].expand(v, v),
                                      torch.arange(v), relax)  # fmt: skip
            a = torch.clamp(big_p.double() / big_q.double(), max=1)
        tv.append(0.5 * (_output_law(p, q, a) - p).abs().sum().item())
    return sum(tv) / len(tv)


def test_total_variation_from_the_target_per_token():
    # exact verification: 0 (to rounding); GSD at the authors' thresholds: lossy, reported
    exact = _tv_per_token(0, lambda cb: None)
    alone = _tv_per_token(0, lambda cb: Grouping(cb, 7, 1e-9, 0.5))  # nobody joins: exact
    gsd = _tv_per_token(0, lambda cb: Grouping(cb, 7, 0.15, 0.5))
    loose = _tv_per_token(0, lambda cb: Grouping(cb, 7, 0.15, 8.0))
    print(f"TV per token, V=64: exact {exact:.2e}, GSD(7, 0.15, 0.5) {gsd:.4f}, "
          f"GSD(7, 0.15, 8.0) {loose:.4f}")  # fmt: skip
    assert exact < 1e-6 and alone < 1e-6
    assert 0 < gsd <= loose < 0.5


def test_empirical_law_matches_the_computed_one():
    # sampled through verify_chain's Philox draws: the first token's histogram is the law
    # _output_law computes from the group sums
    g = _gen(9)
    v, n = 12, 40000
    p = torch.softmax(1.5 * torch.randn(v, generator=g), -1)
    q = torch.softmax(1.5 * torch.randn(v, generator=g), -1)
    cb = torch.randn(v, 2, generator=g)
    relax = Grouping(cb, 3, 0.15, 2.0)
    x = torch.multinomial(q, n, replacement=True, generator=g)[:, None]
    r = rv.verify_chain(p[None, None].expand(n, 2, v), x, q[None, None].expand(n, 1, v),
                        relax=relax, seed=4)  # fmt: skip
    hist = torch.bincount(r.tokens[:, 0].long(), minlength=v).double() / n
    big_p, big_q = group_sums(p[None].expand(v, v), q[None].expand(v, v), torch.arange(v), relax)
    law = _output_law(p.double(), q.double(), torch.clamp(big_p.double() / big_q.double(), max=1))
    assert (hist - law).abs().max().item() < 4 * (0.25 / n) ** 0.5 + 1e-3


# --------------------------------------------------------------------------------------------
# (d) bad input: one clear error naming the argument
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"window": 0}, "relax.window"),
        ({"window": 17}, "relax.window"),
        ({"window": 2.0}, "relax.window"),
        ({"p_threshold": 0.0}, "relax.p_threshold"),
        ({"p_threshold": 1.5}, "relax.p_threshold"),
        ({"d_threshold": 0.0}, "relax.d_threshold"),
        ({"d_threshold": float("inf")}, "relax.d_threshold"),
        ({"image_range": (2, 8)}, "relax.codebook has 8 rows.*\\[2, 8\\)"),
        ({"image_range": (0, 20)}, "relax.image_range"),
    ],
)
def test_bad_grouping_names_the_argument(kw, msg):
    p, q, x, cb, u = _case(0, 2, 2, 8)
    relax = Grouping(cb, **kw)
    err = TypeError if kw.get("window") == 2.0 else ValueError
    for call in (
        lambda: rv.verify_chain(p, x, q, relax=relax, uniforms=u),
        lambda: rv.verify_jacobi(p[:, :2], x, q, relax=relax),
    ):
        with pytest.raises(err, match=msg):
            call()


def test_codebook_size_must_match_the_whole_vocabulary_by_default():
    p, q, x, cb, u = _case(0, 2, 2, 8)
    with pytest.raises(ValueError, match="relax.codebook has 7 rows.*\\[0, 8\\)"):
        rv.verify_chain(p, x, q, relax=Grouping(cb[:7]), uniforms=u)

"""specops.compat.sglang_verify on the edges (issue 38): SGLang 0.5.23's kernels on input a
sampler never makes (drafts without draft probability, candidates outside the vocabulary,
retrive_index slots outside predicts), each against a plain-loop transcription of SGLang's
kernel, and bad arguments named in SGLang's words."""

from __future__ import annotations

import pytest
import torch
from helpers import CUDA_SIM, backend_device
from test_compat_sglang_verify import _kary, _run_tree, _sgl_vector_inputs

import specops
from specops.compat.sglang_verify import (
    chain_speculative_sampling_triton,
    tree_speculative_sampling_target_only,
    verify_tree_greedy,
)

_F32 = torch.float32


def _sgl_chain(cand, slot, coins, final, p, q, block, predicts, accept_index):
    """SGLang 0.5.23's chain rejection sampler (``reject_sampling.py``) as a plain loop, float32
    scalars, one request at a time: ``predicts`` and ``accept_index`` written in place, the
    accepted counts returned.  Checked against SGLang's own Triton kernel (run in the
    interpreter) on the random inputs of ``test_chain_matches_sglang_on_impossible_drafts``,
    bad draft probabilities included: 0 mismatches."""
    bs, k1 = cand.shape
    v = p.shape[2]
    one, zero = torch.tensor(1.0, dtype=_F32), torch.tensor(0.0, dtype=_F32)
    nums = []
    for b in range(bs):
        last = int(slot[b, 0])
        accept_index[b, 0] = last
        num, scale, norm = 0, one, None
        if block:
            prefix, prefixes = one, []
            for step in range(1, k1):
                x = int(cand[b, step])
                pp, qq = p[b, step - 1, x], q[b, step - 1, x]
                ok = bool((qq > 0) & (qq <= 1))  # a proposal must have draft probability
                prefix = torch.minimum(prefix * pp / qq, one) if ok else zero
                prefixes.append(prefix)
            for step in range(k1 - 1, 0, -1):
                pref, coin = prefixes[step - 1], coins[b, step - 1]
                if coin < pref:
                    accp, mass = pref, None
                    if step < k1 - 1 and 0 < pref < 1:
                        mass = torch.fmax(pref * p[b, step] - q[b, step], zero).sum()
                        accp = mass / (mass + 1 - pref)
                    if coin < accp:
                        num, scale, norm = step, pref, mass
                        break
        else:
            while num < k1 - 1:
                x = int(cand[b, num + 1])
                pp, qq = p[b, num, x], q[b, num, x]
                if not (bool((qq > 0) & (qq <= 1)) and bool(coins[b, num] * qq < pp)):
                    break
                num += 1
        for step in range(1, num + 1):
            predicts[last] = cand[b, step]
            last = int(slot[b, step])
            accept_index[b, step] = last
        if num == k1 - 1:
            val = p[b, num]
        else:
            qr = q[b, num]
            qr = torch.where((qr >= 0) & (qr <= 1), qr, zero)
            val = torch.clamp_min(scale * p[b, num] - qr, 0)
        if norm is None:
            norm = val.sum()
        hit = torch.nonzero(val.cumsum(0) > final[b] * norm)
        predicts[last] = int(hit[0, 0]) if len(hit) else v - 1
        nums.append(num)
    return nums


def _chain(cand, slot, coins, final, p, q, block=False, n_predicts=None, width=None):
    bs, k1 = cand.shape
    predicts = torch.full((n_predicts or bs * k1,), -7, dtype=torch.int32)
    accept_index = torch.full((bs, width or k1), -1, dtype=torch.int32)
    num = torch.full((bs,), -5, dtype=torch.int32)
    none = torch.full((bs, k1), -1)
    chain_speculative_sampling_triton(predicts, accept_index, num, cand, slot, none, none, coins,
                                      final, p, q, block_verification=block)  # fmt: skip
    return predicts, accept_index, num


def _one_hot_chain(v=4):
    """Request 0 drafts 1, 2, 3 after root 0; the target puts all its mass on each draft."""
    cand = torch.tensor([[0, 1, 2, 3]])
    p = torch.zeros(1, 4, v)
    p[0, 0, 1] = p[0, 1, 2] = p[0, 2, 3] = p[0, 3, 0] = 1.0
    q = torch.full((1, 3, v), 0.1)
    return cand, p, q


@pytest.mark.parametrize("qx", [0.0, float("nan"), float("inf"), -float("inf"), -0.1, 1.5])
@pytest.mark.parametrize("block", [False, True])
def test_chain_rejects_a_draft_without_draft_probability(qx, block):
    """SGLang's kernel accepts a proposal only when its draft probability is in (0, 1]: with the
    target's whole mass on each draft it accepts none of them (0.5.23's kernel in the
    interpreter: predicts [1, -7, -7, -7], accept_index [0, -1, -1, -1], 0 accepted), token-wise
    and with block verification alike."""
    cand, p, q = _one_hot_chain()
    q[0, torch.arange(3), cand[0, 1:]] = qx
    modes = [False] + ([True] if qx == 0.0 else [])  # 0 is a probability: valid input
    for validate in modes:
        with specops.validation(validate):
            predicts, accept_index, num = _chain(cand, torch.arange(4)[None],
                                                 torch.full((1, 3), 0.5), torch.tensor([0.5]),
                                                 p, q, block)  # fmt: skip
        assert predicts.tolist() == [1, -7, -7, -7]
        assert accept_index.tolist() == [[0, -1, -1, -1]]
        assert num.tolist() == [0]
    # the same draft with draft probability 1 is accepted
    q[0, torch.arange(3), cand[0, 1:]] = 1.0
    predicts, _, num = _chain(cand, torch.arange(4)[None], torch.full((1, 3), 0.5),
                              torch.tensor([0.5]), p, q, block)  # fmt: skip
    assert num.tolist() == [3] and predicts.tolist() == [1, 2, 3, 0]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("block", [False, True])
def test_chain_matches_sglang_on_impossible_drafts(seed, block):
    """Random chains where a quarter of the drafts carry a draft probability that no sampler
    gives them (0; token-wise also NaN, +-inf, negative): every output as SGLang's kernel
    writes it (``_sgl_chain``).  Fast mode (NaN and negative entries are errors in validation
    mode); the rows holding only 0 run in validation mode too."""
    g = torch.Generator().manual_seed(seed)
    bs, k, v = 64, 3, 5
    p = torch.softmax(torch.randn(bs, k + 1, v, generator=g) * 2, -1)
    q = torch.softmax(torch.randn(bs, k, v, generator=g) * 2, -1)
    cand = torch.randint(0, v, (bs, k + 1), generator=g)
    bad = torch.tensor([0.0] if block else [0.0, float("nan"), float("inf"), -float("inf"), -0.1])
    hit = torch.rand(bs, k, generator=g) < 0.25
    vals = bad[torch.randint(0, len(bad), (bs, k), generator=g)]
    x = cand[:, 1:, None]
    q.scatter_(2, x, torch.where(hit, vals, q.gather(2, x)[..., 0])[..., None])
    slot = torch.randperm(bs * (k + 1), generator=g).view(bs, k + 1)
    coins, final = torch.rand(bs, k + 1, generator=g), torch.rand(bs, generator=g)
    want_p = torch.full((bs * (k + 1),), -7, dtype=torch.int32)
    want_a = torch.full((bs, k + 1), -1, dtype=torch.int32)
    nums = _sgl_chain(cand, slot, coins, final, p, q, block, want_p, want_a)
    assert 0 < sum(nums) < bs * k  # both outcomes occur
    for validate in (False, True) if block else (False,):
        with specops.validation(validate):
            predicts, accept_index, num = _chain(cand, slot, coins, final, p, q, block)
        assert num.tolist() == nums
        assert torch.equal(accept_index, want_a)
        assert torch.equal(predicts, want_p)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf * 0, numpy
@pytest.mark.parametrize("backend", ["reference", "cpu", CUDA_SIM, "triton"])
@pytest.mark.parametrize("block", [False, True])
def test_an_infinite_coin_fails_every_test_on_every_backend(backend, block):
    """What the chain sampler relies on to reject as SGLang does: a coin of +inf fails the test of
    its draft (u * q < p: inf, or NaN where q = 0) and, with block verification, every position
    it is given to (u < h), on every backend of verify_chain; the other drafts and the final draw
    are untouched (the same tokens as the reference)."""
    dev = backend_device(backend)
    g = torch.Generator().manual_seed(5)
    bs, k, v = 16, 4, 7
    p = torch.softmax(torch.randn(bs, k + 1, v, generator=g), -1)
    q = torch.softmax(torch.randn(bs, k, v, generator=g), -1)
    x = torch.randint(0, v, (bs, k), generator=g)
    qx = q.gather(2, x[:, :, None])[..., 0]
    q.scatter_(
        2, x[:, :, None], torch.where(torch.arange(bs)[:, None] % 2 == 0, 0.0, qx)[..., None]
    )
    p.scatter_(2, x[:, :, None], 1.0)  # the drafts are certain to pass on a finite coin
    u = torch.rand(bs, k + 1, generator=g)
    first = torch.arange(bs) % k  # the first position given an infinite coin
    u[:, :k] = torch.where(torch.arange(k)[None, :] >= first[:, None], float("inf"), u[:, :k])
    r = specops.verify_chain(p.to(dev), x.to(dev), q.to(dev), uniforms=u.to(dev), block=block,
                             backend=backend)  # fmt: skip
    want = specops.verify_chain(p, x, q, uniforms=u, block=block, backend="reference")
    assert torch.equal(r.num_accepted.cpu(), want.num_accepted)
    assert torch.equal(r.tokens.cpu(), want.tokens)
    if not block:
        assert torch.equal(want.num_accepted.long(), first)
    else:  # block verification: never past the first infinite coin
        assert bool((want.num_accepted.long() <= first).all())


@pytest.mark.parametrize("bad", [-1, 4, 1000, -(2**40)])
def test_chain_candidate_outside_the_vocabulary(bad):
    """Fast mode: a draft id outside [0, V) is a draft without target (or draft) probability:
    rejected, the token after it drawn from that row's residual max(p - q, 0) (not the bonus
    row, as a -1 ending specops's drafts would give), nothing read or written outside its tensor.
    Validation mode raises naming ``candidates``."""
    v = 4
    cand = torch.tensor([[0, 1, bad, 3]])
    p = torch.zeros(1, 4, v)
    p[0, 0, 1] = 1.0
    p[0, 1] = torch.tensor([0.0, 0.5, 0.5, 0.0])
    p[0, 2, 3] = p[0, 3, 0] = 1.0
    q = torch.full((1, 3, v), 0.25)
    q[0, 1] = torch.tensor([0.0, 0.5, 0.0, 0.5])  # residual of row 1: token 2 only
    coins, final = torch.full((1, 3), 0.5), torch.tensor([0.1])  # row 1 alone would give 1
    with specops.validation(False):
        predicts, accept_index, num = _chain(cand, torch.arange(4)[None], coins, final, p, q)
    assert num.tolist() == [1]
    assert predicts.tolist() == [1, 2, -7, -7]
    assert accept_index.tolist() == [[0, 1, -1, -1]]
    with specops.validation(True), pytest.raises(ValueError, match="candidates"):
        _chain(cand, torch.arange(4)[None], coins, final, p, q)


def test_chain_retrive_index_outside_predicts():
    """Validation mode names ``retrive_index``; fast mode writes nothing through a slot outside
    ``predicts`` (the other slots get exactly their tokens: nothing lands on predicts[0]) and
    records the slots in ``accept_index`` as given, as SGLang copies them."""
    cand, p, q = _one_hot_chain()
    q[0, torch.arange(3), cand[0, 1:]] = 1.0  # all three accepted: 1, 2, 3, then bonus 0
    args = (torch.full((1, 3), 0.5), torch.tensor([0.5]), p, q)
    for slot in ([[2, -3, 4, 1]], [[2, 99, 4, 1]], [[-1, 3, 0, 4]]):
        slot = torch.tensor(slot)
        with specops.validation(True), pytest.raises(ValueError, match="retrive_index"):
            _chain(cand, slot, *args, n_predicts=5)
        with specops.validation(False):
            predicts, accept_index, num = _chain(cand, slot, *args, n_predicts=5)
        want = [-7] * 5
        for s, tok in zip(slot[0].tolist(), [1, 2, 3, 0]):
            if 0 <= s < 5:
                want[s] = tok
        assert num.tolist() == [3]
        assert predicts.tolist() == want
        assert accept_index.tolist() == slot.tolist()
    with specops.validation(True), pytest.raises(ValueError, match="retrive_index"):
        _chain(cand, torch.tensor([[0, 1, 1, 2]]), *args)  # a slot twice in one request


def _slot_case():
    """SGLang's 2-request vector with an accepted node's slot outside predicts in each request
    (request 0: node 3 at -4; request 1: node 4 at 12, one past the end)."""
    cand, ri, nt, ns, probs = _sgl_vector_inputs()
    ri = ri.clone()
    ri[0, 3], ri[1, 4] = -4, 12
    return cand, ri, nt, ns, probs


@pytest.mark.parametrize("fn", ["greedy", "target_only"])
def test_tree_retrive_index_outside_predicts(fn):
    """The tree functions treat an out-of-range slot as the chain sampler does: an error naming
    ``retrive_index`` in validation mode; in fast mode the writes through that slot are dropped
    (the other entries exactly as SGLang writes them, nothing on predicts[0]) and
    ``accept_index`` holds the slot as given."""
    cand, ri, nt, ns, probs = _slot_case()

    def run():
        predicts = torch.full((12,), -1, dtype=torch.int32)
        accept_index = torch.full((2, 4), -1, dtype=torch.int32)
        num = torch.zeros(2, dtype=torch.int32)
        if fn == "greedy":
            verify_tree_greedy(predicts, accept_index, num, cand, ri, nt, ns, probs.argmax(-1))
        else:
            tree_speculative_sampling_target_only(predicts, accept_index, num, cand, ri, nt, ns,
                                                  torch.rand(2, 6), torch.rand(2), probs,
                                                  torch.zeros_like(probs))  # fmt: skip
        return predicts, accept_index, num

    with specops.validation(True), pytest.raises(ValueError, match="retrive_index"):
        run()
    with specops.validation(False):
        predicts, accept_index, num = run()
    if fn == "target_only":
        # SGLang's vector [3, -1, -1, 4, 5, 18, 11, -1, -1, -1, 12, 18] less slots 3's and 10's
        # writes (the nodes whose slots moved out of range)
        assert predicts.tolist() == [3, -1, -1, -1, 5, 18, 11, -1, -1, -1, -1, 18]
        assert accept_index.tolist() == [[0, -4, 4, 5], [6, 12, 11, -1]]
        assert num.tolist() == [3, 2]
    else:
        # greedy reads the target's token through the slot too: a read outside target_predict
        # finds nothing, so no child of that node matches (and its final write is dropped)
        assert predicts.tolist() == [3, -1, -1, -1, -1, -1, 11, -1, -1, -1, -1, -1]
        assert accept_index.tolist() == [[0, -4, -1, -1], [6, 12, -1, -1]]
        assert num.tolist() == [1, 1]


@pytest.mark.parametrize("bad", [20, 23, -1, -5])
def test_target_only_candidate_outside_the_vocabulary(bad):
    """A candidate outside [0, vocab) has no target probability: never accepted, never written
    to ``predicts``, its (absent) mass not copied into ``draft_probs`` at some other id; the
    final token is drawn from the target (fast mode).  Validation mode names ``candidates``."""
    v = 20
    cand = torch.tensor([[0, bad, 5]])
    ri = torch.arange(3)[None]
    nt = torch.tensor([[1, -1, -1]])
    ns = torch.tensor([[-1, 2, -1]])
    p = torch.zeros(1, 3, v)
    p[0, 0, 0] = p[0, 0, v - 1] = 0.5  # the ids a clamp would read
    p[0, 1:, 7] = 1.0

    def run():
        predicts = torch.full((3,), -1, dtype=torch.int32)
        accept_index = torch.full((1, 2), -1, dtype=torch.int32)
        num = torch.zeros(1, dtype=torch.int32)
        draft = torch.zeros_like(p)
        tree_speculative_sampling_target_only(predicts, accept_index, num, cand, ri, nt, ns,
                                              torch.zeros(1, 3), torch.tensor([0.75]), p,
                                              draft)  # fmt: skip
        return predicts, accept_index, num, draft

    with specops.validation(False):
        predicts, accept_index, num, draft = run()
    assert num.tolist() == [0]
    assert accept_index.tolist() == [[0, -1]]
    assert predicts.tolist() == [v - 1, -1, -1]  # u = 0.75 of the target [0.5 at 0, 0.5 at 19]
    assert not draft.any()  # token 5 has no mass (nothing to copy); bad has none either
    with specops.validation(True), pytest.raises(ValueError, match="candidates"):
        run()


def _chain_args(bs=2, k=3, v=6):
    g = torch.Generator().manual_seed(0)
    return dict(
        predicts=torch.zeros(bs * (k + 1), dtype=torch.int32),
        accept_index=torch.full((bs, k + 1), -1, dtype=torch.int32),
        accept_token_num=torch.zeros(bs, dtype=torch.int32),
        candidates=torch.randint(0, v, (bs, k + 1), generator=g),
        retrive_index=torch.arange(bs * (k + 1)).view(bs, k + 1),
        retrive_next_token=torch.full((bs, k + 1), -1),
        retrive_next_sibling=torch.full((bs, k + 1), -1),
        uniform_samples=torch.rand(bs, k + 1, generator=g),
        uniform_samples_for_final_sampling=torch.rand(bs, generator=g),
        target_probs=torch.softmax(torch.randn(bs, k + 1, v, generator=g), -1),
        draft_probs=torch.softmax(torch.randn(bs, k + 1, v, generator=g), -1),
    )


_FINAL = "uniform_samples_for_final_sampling"
_BAD_ARGS = [  # (argument, replacement given the valid arguments, error type)
    ("candidates", lambda a: a["candidates"].flatten(), ValueError),
    ("candidates", lambda a: a["candidates"].float(), TypeError),
    ("accept_index", lambda a: a["accept_index"][:, :2], ValueError),
    ("accept_index", lambda a: a["accept_index"][:1], ValueError),
    ("accept_index", lambda a: a["accept_index"].float(), TypeError),
    ("accept_token_num", lambda a: a["accept_token_num"][:1], ValueError),
    ("accept_token_num", lambda a: a["accept_token_num"][:, None], ValueError),
    ("predicts", lambda a: a["predicts"].float(), TypeError),
    ("predicts", lambda a: a["predicts"].view(-1, 2).t(), ValueError),
    ("retrive_index", lambda a: a["retrive_index"][:, :2], ValueError),
    ("retrive_index", lambda a: a["retrive_index"][:1], ValueError),
    ("uniform_samples", lambda a: a["uniform_samples"][:, :1], ValueError),
    ("uniform_samples", lambda a: a["uniform_samples"][0], ValueError),
    (_FINAL, lambda a: a[_FINAL][:1], ValueError),
    (_FINAL, lambda a: a[_FINAL].long(), TypeError),
    ("target_probs", lambda a: a["target_probs"][:, :2], ValueError),
    ("target_probs", lambda a: a["target_probs"][0], ValueError),
    ("draft_probs", lambda a: a["draft_probs"][:, :, :4], ValueError),
    ("draft_probs", lambda a: a["draft_probs"][:, :2], ValueError),
    ("draft_probs", lambda a: a["draft_probs"].long(), TypeError),
]


@pytest.mark.parametrize("name,edit,err", _BAD_ARGS)
def test_chain_bad_arguments_are_named(name, edit, err):
    """Every malformed argument of the chain sampler gives a ValueError/TypeError naming it in
    SGLang's words (never an IndexError or RuntimeError from inside, never ``draft_tokens``)."""
    a = _chain_args()
    a[name] = edit(a)
    with pytest.raises(err, match=rf"\b{name}\b"):
        chain_speculative_sampling_triton(**a)


_TREE_BAD_ARGS = [
    ("candidates", lambda a: a["candidates"].flatten(), ValueError),
    ("candidates", lambda a: a["candidates"].float(), TypeError),
    ("accept_index", lambda a: a["accept_index"][:, :0], ValueError),
    ("accept_index", lambda a: a["accept_index"][:1], ValueError),
    ("accept_token_num", lambda a: a["accept_token_num"][:1], ValueError),
    ("accept_token_num", lambda a: a["accept_token_num"][:, None], ValueError),
    ("predicts", lambda a: a["predicts"].float(), TypeError),
    ("retrive_index", lambda a: a["retrive_index"][:, :2], ValueError),
    ("retrive_next_token", lambda a: a["retrive_next_token"].float(), TypeError),
    ("uniform_samples", lambda a: a["uniform_samples"][:, :1], ValueError),
    (_FINAL, lambda a: a[_FINAL][:1], ValueError),
    ("target_probs", lambda a: a["target_probs"][:, :, :4], ValueError),
    ("draft_probs", lambda a: a["draft_probs"][:, :2], ValueError),
]


@pytest.mark.parametrize(
    "edit",
    [lambda t: t.flatten(), lambda t: t[:, :, None], lambda t: t[:, :3], lambda t: t.float()],
)
def test_greedy_bad_target_predict_is_named(edit):
    cand, ri, nt, ns, probs = _sgl_vector_inputs()
    predicts = torch.full((12,), -1, dtype=torch.int32)
    accept_index = torch.full((2, 4), -1, dtype=torch.int32)
    num = torch.zeros(2, dtype=torch.int32)
    with pytest.raises((ValueError, TypeError), match="target_predict"):
        verify_tree_greedy(predicts, accept_index, num, cand, ri, nt, ns, edit(probs.argmax(-1)))


@pytest.mark.parametrize("name,edit,err", _TREE_BAD_ARGS)
def test_target_only_bad_arguments_are_named(name, edit, err):
    a = _chain_args()  # a chain is a tree too: node i's first child i + 1
    k1 = a["candidates"].shape[1]
    a["retrive_next_token"] = torch.arange(1, k1 + 1).where(torch.arange(k1) < k1 - 1, -1).expand(
        2, k1).contiguous()  # fmt: skip
    a["draft_probs"] = torch.zeros_like(a["target_probs"])
    a[name] = edit(a)
    with pytest.raises(err, match=rf"\b{name}\b"):
        tree_speculative_sampling_target_only(**a)


@pytest.mark.parametrize("bs,n,steps,v", [(1, 4, 4, 32), (2, 8, 5, 64), (4, 16, 8, 128),
                                          (1, 1, 1, 32)])  # fmt: skip
def test_greedy_jit_kernel_cases(bs, n, steps, v):
    """SGLang's jit_kernel test_verify_tree_greedy_smoke / accept_all / accept_none inputs (a
    chain, absolute slots b * n + i), the one-node tree included."""
    predicts = torch.zeros(bs * n, dtype=torch.int32)
    accept_index = torch.zeros(bs, steps, dtype=torch.int32)
    num = torch.zeros(bs, dtype=torch.int32)
    ri = torch.arange(bs * n).view(bs, n)
    nt = torch.arange(1, n + 1).where(torch.arange(n) < n - 1, -1).expand(bs, n).contiguous()
    ns = torch.full((bs, n), -1)
    cand = (torch.arange(n) % v).expand(bs, n).contiguous()
    verify_tree_greedy(predicts, accept_index, num, cand, ri, nt, ns, cand.clone())
    assert 0 <= int(num.min()) and int(num.max()) < steps
    tp = cand.clone()
    tp[:, :-1] = cand[:, 1:]  # accept all
    verify_tree_greedy(predicts, accept_index, num, cand, ri, nt, ns, tp)
    assert (num == min(steps, n) - 1).all()
    verify_tree_greedy(predicts, accept_index, num, cand, ri, nt, ns, torch.zeros_like(tp))
    assert (num == (1 if n > 1 and steps > 1 and cand[0, 1] == 0 else 0)).all()


def test_tree_with_draft_probs_candidate_outside_the_vocabulary():
    """specops's own tree sampler keeps the rule: never accepted (fast mode), named in
    validation mode."""
    from specops.compat.sglang_verify import tree_speculative_sampling

    data, g = _kary(8, 12, False, 3)
    cand, nt, ns, target, draft = data
    cand = cand.clone()
    cand[:, 1] = torch.tensor([-1, 12, 99, -7] * 2)
    target[:, 0, :] = 0.0
    target[:, 0, 0] = target[:, 0, 11] = 0.5  # what a clamp would read
    with specops.validation(False):
        predicts, accept_index, num, _, _ = _run_tree(
            tree_speculative_sampling, (cand, nt, ns, target, draft), g
        )
    assert bool((accept_index[:, 1] != torch.arange(8) * 7 + 1).all())  # node 1 never accepted
    assert bool(((predicts >= -7) & (predicts < 12)).all())
    with specops.validation(True), pytest.raises(ValueError, match="candidates"):
        _run_tree(tree_speculative_sampling, (cand, nt, ns, target, draft), g)

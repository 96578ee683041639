"""specops.compat.flashinfer.chain_speculative_sampling: FlashInfer's signature and conventions.

FlashInfer's own test (tests/utils/test_sampling.py, test_chain_speculative_sampling) re-expressed
on the CPU, plus what it leaves out: the counters are added to in place, "accepted" counts each
position on its own (its mean is sum_i min(1, p_i/q_i)) and "emitted" the accepted prefix (its
mean is sum_k prod_{i<=k} min(1, p_i/q_i)), and with seed / offset the call is specops's
verify_chain on its Philox stream, token for token."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import gen, random_probs

import specops
from specops.compat.flashinfer import chain_speculative_sampling


@pytest.mark.parametrize("batch_size", [1, 7])
@pytest.mark.parametrize("vocab_size", [111, 1000])
@pytest.mark.parametrize("num_speculate_tokens", [1, 3, 5])
@pytest.mark.parametrize("onehot_target", [False, True])
def test_flashinfer_assertions(batch_size, vocab_size, num_speculate_tokens, onehot_target):
    torch.manual_seed(42)
    b, n, v = batch_size, num_speculate_tokens, vocab_size
    draft = torch.rand(b, n, v)
    draft = draft / draft.sum(-1, keepdim=True)
    draft_ids = torch.randint(v, (b, n))
    if not onehot_target:
        target = torch.rand(b, n + 1, v)
        target = target / target.sum(-1, keepdim=True)
    else:
        target_ids = torch.randint(v, (b, n + 1))
        target_ids[:, :n] = draft_ids
        target = torch.zeros(b, n + 1, v).scatter_(2, target_ids[..., None], 1)
    for _ in range(10):
        accepted = torch.zeros(b, dtype=torch.int32)
        emitted = torch.zeros(b, dtype=torch.int32)
        out, accepted, emitted = chain_speculative_sampling(
            draft, draft_ids, target, accepted, emitted
        )
        if onehot_target:
            assert torch.equal(out, target_ids.int())
        else:
            assert out.shape == (b, n + 1) and out.dtype == torch.int32
            assert bool((out[out >= 0] < v).all())
            mismatch = out[:, :-1] != draft_ids
            for row in range(b):
                idx = torch.nonzero(mismatch[row], as_tuple=True)[0]
                if len(idx):
                    assert torch.equal(idx[1:], idx[:-1] + 1)  # contiguous
                    assert bool((out[row, idx[0] + 1 :] == -1).all())
        assert torch.equal(emitted + 1, (out != -1).sum(1).int())
        assert bool((accepted >= emitted).all())


def test_seed_and_offset_are_verify_chain_on_its_stream():
    g = gen(3)
    b, n, v = 5, 4, 30
    draft, target = random_probs(b, n, v, generator=g), random_probs(b, n + 1, v, generator=g)
    ids = torch.randint(0, v, (b, n), generator=g)
    for seed, offset in ((0, 0), (7, 3), (2**40, 11)):
        out, _, emitted = chain_speculative_sampling(draft, ids, target, seed=seed, offset=offset)
        r = specops.verify_chain(target, ids, draft, seed=seed, offset=offset)
        assert torch.equal(out, r.tokens)
        assert torch.equal(emitted, r.num_accepted)
    with_tensors = chain_speculative_sampling(
        draft, ids, target, seed=torch.tensor(7), offset=torch.tensor([3])
    )
    assert torch.equal(with_tensors[0], chain_speculative_sampling(draft, ids, target, seed=7,
                                                                   offset=3)[0])  # fmt: skip


def test_counters_are_added_to_in_place_and_returned():
    g = gen(4)
    b, n, v = 3, 3, 20
    draft, target = random_probs(b, n, v, generator=g), random_probs(b, n + 1, v, generator=g)
    ids = torch.randint(0, v, (b, n), generator=g)
    acc = torch.full((b,), 5, dtype=torch.int32)
    emit = torch.full((b,), 9, dtype=torch.int32)
    _, acc2, emit2 = chain_speculative_sampling(draft, ids, target, acc, emit, seed=1, offset=0)
    assert acc2 is acc and emit2 is emit
    _, a0, e0 = chain_speculative_sampling(draft, ids, target, seed=1, offset=0)
    assert torch.equal(acc, a0 + 5) and torch.equal(emit, e0 + 9)


def test_generator_reproduces():
    g = gen(5)
    b, n, v = 4, 3, 25
    draft, target = random_probs(b, n, v, generator=g), random_probs(b, n + 1, v, generator=g)
    ids = torch.randint(0, v, (b, n), generator=g)
    one = chain_speculative_sampling(draft, ids, target, generator=torch.Generator().manual_seed(9))
    two = chain_speculative_sampling(draft, ids, target, generator=torch.Generator().manual_seed(9))
    assert all(torch.equal(x, y) for x, y in zip(one, two))


def test_accepted_and_emitted_have_their_means():
    """Fixed drafts, 4000 seeds: accepted averages sum_i r_i and emitted sum_k prod_{i<=k} r_i,
    r_i = min(1, p_i(x_i) / q_i(x_i)); counting only the prefix as accepted, or the bonus as
    emitted, is many standard errors off."""
    g = gen(6)
    n, v, trials = 4, 12, 4000
    draft = random_probs(1, n, v, generator=g)
    target = random_probs(1, n + 1, v, generator=g)
    ids = torch.randint(0, v, (1, n), generator=g)
    r = (target[0, torch.arange(n), ids[0]] / draft[0, torch.arange(n), ids[0]]).clamp(max=1)
    r = r.double()
    want_acc, want_emit = float(r.sum()), float(torch.cumprod(r, 0).sum())
    b = trials
    d, t, x = draft.expand(b, -1, -1), target.expand(b, -1, -1), ids.expand(b, -1)
    acc = torch.zeros(b, dtype=torch.int32)
    emit = torch.zeros(b, dtype=torch.int32)
    # one call, every request on its own Philox row: 4000 independent trials
    chain_speculative_sampling(d, x, t, acc, emit, seed=123, offset=0)
    for got, want in ((acc, want_acc), (emit, want_emit)):
        se = float(got.double().std()) / math.sqrt(b)
        assert abs(float(got.double().mean()) - want) < 5 * se + 1e-9, (got.double().mean(), want)


def test_bad_counters_are_named():
    p = random_probs(2, 3, 5, generator=gen(1))
    q = random_probs(2, 2, 5, generator=gen(2))
    ids = torch.zeros(2, 2, dtype=torch.int32)
    with pytest.raises(ValueError, match="maybe_output_accepted_token_num"):
        chain_speculative_sampling(q, ids, p, torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match="maybe_output_emitted_draft_token_num"):
        chain_speculative_sampling(q, ids, p, None, torch.zeros(3, dtype=torch.int32))


# issue 38: edges -------------------------------------------------------------------------------
def _inputs(b=4, n=3, v=9, seed=8):
    g = gen(seed)
    draft, target = random_probs(b, n, v, generator=g), random_probs(b, n + 1, v, generator=g)
    return draft, torch.randint(0, v, (b, n), generator=g), target


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_out_of_range_draft_is_a_draft_of_target_probability_zero(dtype):
    """Fast mode: a draft id >= vocab (or < -1) stays in bounds and is rejected, exactly as a draft
    whose target probability is 0 (same residual, same draws, same counters)."""
    draft, ids, target = _inputs()
    v = target.shape[-1]
    target[..., v - 1] = 0.0  # token v - 1: target probability 0 everywhere
    target /= target.sum(-1, keepdim=True)
    big = 2**31 - 1 if dtype == torch.int32 else 2**40
    bad, alike = ids.clone().to(dtype), ids.clone().to(dtype)
    where = [(0, 0, v), (1, 1, v + 3), (2, 2, big), (3, 1, -7)]
    for row, col, x in where:
        bad[row, col], alike[row, col] = x, v - 1
    with specops.validation(False):
        for kw in ({"seed": 5, "offset": 2}, {"seed": torch.tensor([1, 2, 3, 4]), "offset": 0}):
            got = chain_speculative_sampling(draft, bad, target, **kw)
            want = chain_speculative_sampling(draft, alike, target, **kw)
            assert all(torch.equal(x, y) for x, y in zip(got, want))
            out, acc, emit = got
            assert bool((out < v).all()) and all(int(emit[r]) <= c for r, c, _ in where)


def test_out_of_range_draft_is_named_under_validation():
    draft, ids, target = _inputs()
    for x in (target.shape[-1], -2):
        bad = ids.clone()
        bad[1, 2] = x
        with pytest.raises(ValueError, match=rf"draft_token_ids holds id {x} outside"):
            chain_speculative_sampling(draft, bad, target, seed=0, offset=0)


def test_seed_and_offset_forms_flashinfer_takes():
    """0.7.2: an int, or a 1-D int64/uint64 tensor of length 1 (the batch) or B (per request)."""
    draft, ids, target = _inputs(b=3)
    one = chain_speculative_sampling(draft, ids, target, seed=7, offset=4)[0]
    for s, o in (
        (torch.tensor([7]), torch.tensor([4])),
        (torch.tensor([7], dtype=torch.uint64), torch.tensor([4], dtype=torch.uint64)),
        (torch.tensor([7, 7, 7]), torch.tensor([4, 4, 4])),
        (torch.tensor(7), 4),
        (7, torch.tensor([4])),
    ):
        assert torch.equal(chain_speculative_sampling(draft, ids, target, seed=s, offset=o)[0], one)
    # 64-bit patterns: 2**64 - 1 is the uint64 of int64 -1
    top = torch.tensor([2**64 - 1], dtype=torch.uint64)
    a = chain_speculative_sampling(draft, ids, target, seed=2**64 - 1, offset=0)[0]
    assert torch.equal(a, chain_speculative_sampling(draft, ids, target, seed=-1, offset=0)[0])
    assert torch.equal(a, chain_speculative_sampling(draft, ids, target, seed=top, offset=0)[0])
    # one value per request: request r is the batch call's row r under (seed_r, offset_r)
    seeds, offsets = torch.tensor([3, 2**40, -5]), torch.tensor([0, 9, 2**33])
    per = chain_speculative_sampling(draft, ids, target, seed=seeds, offset=offsets)[0]
    for r in range(3):
        row = chain_speculative_sampling(draft, ids, target, seed=int(seeds[r]),
                                         offset=int(offsets[r]))[0][r]  # fmt: skip
        assert torch.equal(per[r], row)
    same_offset = chain_speculative_sampling(draft, ids, target, seed=seeds, offset=0)[0]
    assert torch.equal(same_offset, specops.verify_chain(target, ids, draft, seed=seeds).tokens)


@pytest.mark.parametrize(
    "kw, err, name",
    [
        ({"seed": 1.5, "offset": 0}, TypeError, "seed"),
        ({"seed": 1, "offset": 0.5}, TypeError, "offset"),
        ({"seed": True, "offset": 0}, TypeError, "seed"),
        ({"seed": 3, "offset": "0"}, TypeError, "offset"),
        ({"seed": torch.tensor([1.0]), "offset": 0}, TypeError, "seed"),
        ({"seed": torch.tensor([1], dtype=torch.int32), "offset": 0}, TypeError, "seed"),
        ({"seed": torch.tensor([1, 2]), "offset": 0}, ValueError, "seed"),
        ({"seed": 1, "offset": torch.tensor([[1]])}, ValueError, "offset"),
        ({"seed": 2**64, "offset": 0}, ValueError, "seed"),
        ({"seed": 0, "offset": -(2**63) - 1}, ValueError, "offset"),
        ({"generator": 3}, TypeError, "generator"),
    ],
)
def test_bad_seed_offset_generator_are_named(kw, err, name):
    draft, ids, target = _inputs(b=3)
    with pytest.raises(err, match=rf"chain_speculative_sampling: {name} "):
        chain_speculative_sampling(draft, ids, target, **kw)


def test_shape_errors_name_the_argument_at_fault():
    draft, ids, target = _inputs(b=3, n=2, v=6)
    cases = [
        ((draft, ids, target[:, :2]), ValueError, "target_probs"),  # one row short
        ((draft, ids, target[..., :5]), ValueError, "target_probs"),  # vocab differs
        ((draft, ids, target[:2]), ValueError, "target_probs"),
        ((draft, ids, target[0]), ValueError, "target_probs"),
        ((draft[:, :1], ids, target), ValueError, "draft_probs"),
        ((draft[0], ids, target), ValueError, "draft_probs"),
        ((draft, ids[0], target), ValueError, "draft_token_ids"),
        ((draft, ids.float(), target), TypeError, "draft_token_ids"),
        ((draft, ids, target.int()), TypeError, "target_probs"),
        (([[0.5]], ids, target), TypeError, "draft_probs"),
    ]
    for args, err, name in cases:
        with pytest.raises(err, match=rf"chain_speculative_sampling: {name} "):
            chain_speculative_sampling(*args)


def test_float64_is_cast_and_mixed_dtypes_run():
    """FlashInfer casts the probabilities to float32; so does the compat layer."""
    draft, ids, target = _inputs()
    want = chain_speculative_sampling(draft.float(), ids, target.float(), seed=2, offset=0)[0]
    got = chain_speculative_sampling(draft.double(), ids.int(), target.double(), seed=2, offset=0)
    assert torch.equal(got[0], want)
    half = chain_speculative_sampling(draft.half(), ids, target, seed=2, offset=0)[0]
    assert half.shape == (4, 4)

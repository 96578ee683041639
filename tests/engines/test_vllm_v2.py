"""specops.vllm against vLLM 0.33.0's Model Runner V2 rejection sampler, side by side on the CPU
(the vLLM stage, scripts/vllm_stage.sh).  specops reproduces V2's acceptance draws (Triton's
tl.rand keyed by seed and position) bit for bit, so greedy rows and the accepted counts of
one-hot drafts equal vLLM's; the emitted tokens follow the target (chi-square)."""

from __future__ import annotations

import importlib.util
import os

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (scripts/vllm_stage.sh)", allow_module_level=True)
os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from scipy import stats  # noqa: E402
from vllm.v1.worker.gpu.sample.gumbel import tl_rand32  # noqa: E402
from vllm.v1.worker.gpu.spec_decode import rejection_sampler as v2  # noqa: E402

import specops.vllm as sv  # noqa: E402

VLLM_V2 = v2.rejection_sample


@triton.jit
def _draws(out_ptr, seeds_ptr, pos_ptr):
    i = tl.program_id(0)
    tl.store(out_ptr + i, tl_rand32(tl.load(seeds_ptr + i), tl.load(pos_ptr + i), False))


def test_acceptance_draws_are_vllms():
    g = torch.Generator().manual_seed(0)
    seeds = torch.randint(-(2**63), 2**63 - 1, (300,), dtype=torch.int64, generator=g)
    pos = torch.randint(0, 2**40, (300,), dtype=torch.int64, generator=g)
    pos[:10] = torch.arange(10)
    want = torch.empty(300, dtype=torch.float32)
    _draws[(300,)](want, seeds, pos)
    assert torch.equal(sv.tl_rand(seeds, pos), want)


def test_install_patches_v2():
    try:
        assert sv.V2_MODULE in sv.install()
        assert v2.rejection_sample is sv.rejection_sample_v2
    finally:
        sv.uninstall()
    assert v2.rejection_sample is VLLM_V2


def _batch(g, reqs, steps, v, greedy_every=0):
    n = torch.randint(0, steps + 1, (reqs,), generator=g)
    cu = torch.cat([torch.zeros(1, dtype=torch.long), (n + 1).cumsum(0)]).to(torch.int32)
    rows = int(cu[-1])
    logits = torch.randn(rows, v, generator=g) * 2
    am = logits.argmax(-1)
    sampled = torch.randint(0, v, (rows,), generator=g)
    half = torch.rand(rows, generator=g) < 0.5
    sampled = torch.where(half, torch.cat([am[-1:], am[:-1]]), sampled)  # argmax of row r - 1
    local = torch.cat([torch.arange(int(k) + 1) for k in n])
    req = torch.cat([torch.full((int(k) + 1,), i) for i, k in enumerate(n)])
    pos = (100 * req + local).long()
    temp = torch.ones(reqs)
    if greedy_every:
        temp[::greedy_every] = 0.0
    seed = torch.randint(-(2**40), 2**40, (reqs,), generator=g)
    idx = torch.arange(reqs, dtype=torch.int32)
    return (logits, None, sampled, cu, pos, idx, req.to(torch.int32), local.to(torch.int32), temp,
            seed, steps)  # fmt: skip


def _valid(sampled, num):
    return [sampled[i, : int(num[i])].tolist() for i in range(len(num))]


@pytest.mark.parametrize("seed", range(3))
def test_same_decisions_as_vllm_on_one_hot_drafts(seed):
    args = _batch(torch.Generator().manual_seed(seed), 40, 3, 12, greedy_every=3)
    tok, num = sv.rejection_sample_v2(*args)
    vt, vn = VLLM_V2(*args)
    assert torch.equal(num, vn)  # the same draws decide the same acceptances
    temp = args[8]
    greedy = (temp == 0).nonzero()[:, 0].tolist()
    assert [_valid(tok, num)[i] for i in greedy] == [_valid(vt, vn)[i] for i in greedy]
    # accepted drafts are the same tokens; only the final (resampled) token's draw differs
    for i in range(len(num)):
        assert tok[i, : int(num[i]) - 1].tolist() == vt[i, : int(vn[i]) - 1].tolist()


@pytest.mark.parametrize("with_draft_logits", [False, True])
def test_first_token_law(with_draft_logits):
    g = torch.Generator().manual_seed(9)
    reqs, v = 5000, 6
    t = torch.randn(v, generator=g) * 1.5
    d = torch.randn(v, generator=g)
    q = torch.softmax(d, -1)
    x = torch.multinomial(q if with_draft_logits else torch.softmax(t, -1), reqs,
                          replacement=True, generator=g)  # fmt: skip
    cu = torch.arange(0, 2 * reqs + 1, 2, dtype=torch.int32)
    logits = t.expand(2 * reqs, v).contiguous()
    sampled = torch.stack([torch.zeros(reqs, dtype=torch.long), x], 1).reshape(-1)
    pos = torch.arange(2 * reqs) % 2 + 7
    idx = torch.arange(reqs, dtype=torch.int32)
    req = torch.arange(reqs).repeat_interleave(2).to(torch.int32)
    local = torch.arange(2).repeat(reqs).to(torch.int32)
    dl = d.expand(reqs, 1, v).contiguous() if with_draft_logits else None
    seeds = torch.arange(reqs, dtype=torch.long) * 7919
    tok, num = sv.rejection_sample_v2(logits, dl, sampled, cu, pos, idx, req, local,
                                      torch.ones(reqs), seeds, 1)  # fmt: skip
    counts = torch.bincount(tok[:, 0], minlength=v).double()
    target = torch.softmax(t.double(), -1)
    assert stats.chisquare(counts, target * reqs).pvalue > 1e-3


def test_smaller_draft_vocabulary():
    """A draft vocabulary padded smaller than the target's: both cut to the smaller, as vLLM."""
    g = torch.Generator().manual_seed(4)
    args = list(_batch(g, 6, 2, 10))
    args[1] = torch.randn(6, 2, 8, generator=g)
    args[2] = args[2] % 8  # drafts come from the draft vocabulary
    tok, num = sv.rejection_sample_v2(*args)
    assert int(tok.max()) < 8 and (num >= 1).all()

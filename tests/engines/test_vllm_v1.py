"""specops.vllm against vLLM 0.33.0's V1 rejection sampler, side by side on the CPU (its own
stage: scripts/vllm_stage.sh makes a venv with vLLM installed --no-deps; skipped where vLLM is not
installed).  vLLM's own greedy tables through its RejectionSampler with the plugin installed,
greedy rows token-identical to vLLM's implementation on random logits in mixed batches, the law
of sampled rows (chi-square, for specops and for vLLM on the same inputs), seeded determinism,
the -1 draft placeholder, top-k's kept set, and the fallback for synthetic acceptance."""

from __future__ import annotations

import importlib.util
import os

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (scripts/vllm_stage.sh)", allow_module_level=True)
os.environ["CUDA_VISIBLE_DEVICES"] = ""  # else vLLM swaps Triton for a placeholder on a CPU host
os.environ["TRITON_INTERPRET"] = "1"

from unittest.mock import Mock  # noqa: E402

import torch  # noqa: E402
from scipy import stats  # noqa: E402
from vllm.v1.sample import rejection_sampler as rs  # noqa: E402
from vllm.v1.sample.logits_processor import LogitsProcessors  # noqa: E402
from vllm.v1.sample.metadata import SamplingMetadata  # noqa: E402
from vllm.v1.sample.sampler import Sampler, SamplerOutput  # noqa: E402
from vllm.v1.spec_decode.metadata import SpecDecodeMetadata  # noqa: E402

import specops.vllm as sv  # noqa: E402

VLLM_REJECTION_SAMPLE = rs.rejection_sample


@pytest.fixture(autouse=True)
def plugin():
    sv.install()
    yield
    sv.uninstall()


def md(temperature=None, generators=None):
    if temperature is None:
        greedy, rand = True, False
    else:
        greedy, rand = bool((temperature == 0).all()), bool((temperature != 0).all())
    return SamplingMetadata(
        temperature=temperature, all_greedy=greedy, all_random=rand, top_p=None, top_k=None,
        generators=generators or {}, max_num_logprobs=None, no_penalties=True,
        prompt_token_ids=None, frequency_penalties=torch.tensor([]),
        presence_penalties=torch.tensor([]), repetition_penalties=torch.tensor([]),
        output_token_ids=[], allowed_token_ids_mask=None, bad_words_token_ids={},
        logitsprocs=LogitsProcessors(),
    )  # fmt: skip


def _call(fn, drafts, target_logits, bonus, meta, draft_probs=None):
    n = [len(d) for d in drafts]
    ids = torch.tensor(sum(drafts, []), dtype=torch.int32)
    cu = torch.tensor(n, dtype=torch.int32).cumsum(0).to(torch.int32)
    return fn(ids, n, max(n), cu, draft_probs, target_logits.clone(), bonus, meta)


def test_install_replaces_the_module_function():
    assert rs.rejection_sample is sv.rejection_sample and sv.installed()
    sv.uninstall()
    assert rs.rejection_sample is VLLM_REJECTION_SAMPLE


def test_vllm_loads_the_plugin_from_the_entry_point(monkeypatch):
    """The installed specops declares vllm.general_plugins; vLLM's loader runs it."""
    from importlib.metadata import entry_points

    import vllm.plugins as vp

    assert "specops.vllm:install" in {e.value for e in entry_points(group="vllm.general_plugins")}
    sv.uninstall()
    monkeypatch.setattr(vp, "plugins_loaded", False)
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    vp.load_general_plugins()
    assert rs.rejection_sample is sv.rejection_sample


# vLLM's tests/v1/sample/test_rejection_sampler.py greedy tables, through its RejectionSampler
@pytest.mark.parametrize(
    "spec,output,expected",
    [
        ([[1, 2, 3]], [[1, 2, 3, 4]], [[1, 2, 3, 4]]),
        ([[1, 2, 3]], [[1, 5, 3, 4]], [[1, 5, -1, -1]]),
        ([[1, 2], [3]], [[1, 2, 5], [3, 4]], [[1, 2, 5], [3, 4, -1]]),
        ([[1]], [[1, 2]], [[1, 2]]),
        ([[]], [[5]], [[5]]),
        ([[1, 2, 3], [4, 5, 6]], [[1, 2, 7, 6], [4, 8, 6, 9]], [[1, 2, 7, -1], [4, 8, -1, -1]]),
        ([[1, 2]], [[1, 2, 3]], [[1, 2, 3]]),
        ([[1]], [[2, 3]], [[2, -1]]),
        ([[1, 2], [3, 4]], [[1, 5, 6], [3, 4, 7]], [[1, 5, -1], [3, 4, 7]]),
    ],
)
def test_vllm_greedy_tables(spec, output, expected):
    sampler = Mock(spec=Sampler)
    sampler.logprobs_mode = "raw_logprobs"
    rsm = rs.RejectionSampler(sampler)
    bonus = torch.tensor([o[-1] for o in output])
    sampler.return_value = SamplerOutput(sampled_token_ids=bonus.view(-1, 1),
                                         logprobs_tensors=None)  # fmt: skip
    logits = torch.full((sum(len(s) for s in spec), 100), -100.0)
    r = 0
    for s, o in zip(spec, output):
        for j in range(len(s)):
            logits[r, o[j]] = 100.0
            r += 1
    meta = SpecDecodeMetadata.make_dummy(spec, device=torch.device("cpu"))
    meta.target_logits_indices = torch.arange(logits.shape[0])
    meta.bonus_logits_indices = torch.empty(0, dtype=torch.int32)
    out = rsm(meta, draft_probs=None, logits=logits, sampling_metadata=md())
    assert out.sampled_token_ids.tolist() == expected


def _ragged(g, b, k, v):
    drafts = [torch.randint(0, v, (int(torch.randint(0, k + 1, (1,), generator=g)),),
                            generator=g).tolist() for _ in range(b)]  # fmt: skip
    n = sum(len(d) for d in drafts)
    return drafts, torch.randn(n, v, generator=g) * 2, torch.randint(0, v, (b, 1), generator=g)


@pytest.mark.parametrize("seed", range(4))
def test_greedy_rows_identical_to_vllm_in_mixed_batches(seed):
    g = torch.Generator().manual_seed(seed)
    drafts, logits, bonus = _ragged(g, 12, 4, 6)
    # drafts that often match: take the argmax for half of them
    am = logits.argmax(-1).tolist()
    flat = [t for d in drafts for t in d]
    flat = [a if i % 2 else t for i, (t, a) in enumerate(zip(flat, am))]
    it = iter(flat)
    drafts = [[next(it) for _ in d] for d in drafts]
    temp = torch.tensor([0.0, 1.0] * 6)
    ours = _call(sv.rejection_sample, drafts, logits, bonus, md(temp))
    theirs = _call(VLLM_REJECTION_SAMPLE, drafts, logits, bonus, md(temp))
    greedy = temp == 0
    assert torch.equal(ours[greedy], theirs[greedy])
    all_greedy = _call(sv.rejection_sample, drafts, logits, bonus, md())
    assert torch.equal(all_greedy, _call(VLLM_REJECTION_SAMPLE, drafts, logits, bonus, md()))


@pytest.mark.parametrize("with_draft_probs", [True, False])
def test_sampled_law_matches_the_target_like_vllm(with_draft_probs):
    """One draft per request, 6000 requests sharing one target row and one draft row: the first
    emitted token follows the target for specops and for vLLM alike (chi-square)."""
    g = torch.Generator().manual_seed(7)
    v, b = 6, 6000
    t_logits = torch.randn(v, generator=g) * 1.5
    target = torch.softmax(t_logits, -1)
    q = torch.softmax(torch.randn(v, generator=g), -1)
    drafts = torch.multinomial(q, b, replacement=True, generator=g)[:, None].tolist()
    logits = t_logits.expand(b, v).contiguous()
    dp = q.expand(b, v).contiguous() if with_draft_probs else None
    bonus = torch.zeros(b, 1, dtype=torch.long)
    for fn in (sv.rejection_sample, VLLM_REJECTION_SAMPLE):
        torch.manual_seed(1)
        out = _call(fn, drafts, logits, bonus, md(torch.ones(b)), dp)
        counts = torch.bincount(out[:, 0].long(), minlength=v).double()
        expected = target.double() / target.double().sum() * b
        assert stats.chisquare(counts, expected).pvalue > 1e-3, fn


def test_seeded_requests_are_deterministic_and_unseeded_are_not():
    g = torch.Generator().manual_seed(3)
    drafts, logits, bonus = _ragged(g, 8, 3, 50)
    temp = torch.ones(8)
    outs = []
    for _ in range(3):
        gens = {i: torch.Generator().manual_seed(100 + i) for i in range(0, 8, 2)}
        outs.append(_call(sv.rejection_sample, drafts, logits, bonus, md(temp, gens)))
    assert all(torch.equal(o[::2], outs[0][::2]) for o in outs)


def test_placeholder_draft_is_rejected():
    logits = torch.full((3, 8), -50.0)
    logits[:, 2] = 50.0  # every row: token 2 certainly
    bonus = torch.tensor([[7]])
    for temp in (None, torch.ones(1)):
        out = _call(sv.rejection_sample, [[2, -1, 2]], logits, bonus, md(temp))
        assert out.tolist() == [[2, 2, -1, -1]]  # accepted, -1 rejected with 2 drawn, stop


def test_top_k_kept_set():
    """Target logits masked to a kept set (as vLLM's apply_top_k_top_p leaves them): every
    emitted token of a sampled row lies in it."""
    g = torch.Generator().manual_seed(5)
    b, k, v = 100, 3, 100
    drafts = torch.randint(0, v, (b, k), generator=g).tolist()
    logits = torch.randn(b * k, v, generator=g)
    keep = torch.stack([torch.randperm(v, generator=g)[:5] for _ in range(b)])
    mask = torch.ones(b, v, dtype=torch.bool).scatter_(1, keep, False)
    logits = logits.masked_fill(mask.repeat_interleave(k, 0), float("-inf"))
    dp = torch.softmax(torch.randn(b * k, v, generator=g), -1)
    bonus = keep[:, :1]
    out = _call(sv.rejection_sample, drafts, logits, bonus, md(torch.ones(b)), dp)
    for i in range(b):
        row = [t for t in out[i].tolist() if t >= 0]
        emitted = row[-1]  # the recovered or bonus token
        assert emitted in keep[i].tolist()


def test_synthetic_mode_falls_back_to_vllm():
    logits = torch.randn(2, 8)
    bonus = torch.tensor([[3]])
    out = sv.rejection_sample(
        torch.tensor([1, 2], dtype=torch.int32), [2], 2, torch.tensor([2], dtype=torch.int32),
        None, logits, bonus, md(torch.ones(1)), synthetic_mode=True,
        synthetic_conditional_rates=torch.tensor([1.0, 1.0]),
    )  # fmt: skip
    assert out.tolist() == [[1, 2, 3]]

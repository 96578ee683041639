"""specops's Model Runner V2 substitute driven through V2's own caller: vLLM 0.33.0's
``vllm.v1.worker.gpu.spec_decode.rejection_sampler.RejectionSampler``, called as the model runner
calls it (``RejectionSampler(sampler, spec_config, device)(logits, input_batch, draft_logits,
invalid_drafts)``) on a decode step laid out by vLLM's own code (``RequestState.add_request``,
``Sampler.add_request``, and the runner's ``prepare_inputs`` steps ``expand_idx_mapping``,
``prepare_pos_seq_lens``, ``combine_sampled_and_draft_tokens``).  The same step runs twice, with
vLLM's ``rejection_sample`` and with specops's plugin installed, and the ``SamplerOutput``s are
compared: greedy rows token for token, sampled rows' accepted drafts and counts (V2's acceptance
draws are reproduced bit for bit), the emitted token's law against vLLM's on the same inputs
(chi-square homogeneity) and against the processed target.

The vLLM stage (scripts/vllm_stage.sh) runs it on the CPU with the Triton interpreter.  Three CPU
stand-ins, none in the code under test: vLLM's UVA buffers pin host memory (no pinned allocator
without CUDA), so ``buffer_utils.UvaBuffer`` is replaced by one whose device view is the host
tensor itself (what UVA is on a CPU); host-to-device copies are not staged in pinned memory
(``torch_utils.PIN_MEMORY = False``); and the speculative config is a namespace of the
fields ``RejectionSampler.__init__`` reads (a real ``SpeculativeConfig`` needs a model)."""

from __future__ import annotations

import importlib.util
import os
from types import SimpleNamespace

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (scripts/vllm_stage.sh)", allow_module_level=True)
os.environ["CUDA_VISIBLE_DEVICES"] = ""  # else vLLM swaps Triton for a placeholder on a CPU host
os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
from scipy import stats  # noqa: E402
from vllm.config import DeviceConfig, VllmConfig  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils import torch_utils  # noqa: E402
from vllm.v1.worker.gpu import buffer_utils  # noqa: E402
from vllm.v1.worker.gpu.input_batch import (  # noqa: E402
    InputBatch,
    InputBuffers,
    combine_sampled_and_draft_tokens,
    expand_idx_mapping,
    prepare_pos_seq_lens,
)
from vllm.v1.worker.gpu.sample.sampler import Sampler  # noqa: E402
from vllm.v1.worker.gpu.spec_decode import rejection_sampler as v2  # noqa: E402
from vllm.v1.worker.gpu.states import RequestState  # noqa: E402

import specops.vllm as sv  # noqa: E402

DEV = torch.device("cpu")
VLLM_REJECTION_SAMPLE = v2.rejection_sample
PROMPT = 5


class _HostBuffer:
    """``UvaBuffer`` on a CPU: the device view of host memory is the host tensor (unpinned)."""

    def __init__(self, size, dtype):
        self.cpu = torch.zeros(size, dtype=dtype)
        self.np = self.cpu.numpy()
        self._uva = self.cpu

    def uva(self, n=None):
        return self._uva[:n] if n is not None else self._uva


@pytest.fixture(autouse=True, scope="module")
def _cpu_host():
    """The CPU stand-ins (module docstring), for this module's tests only."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(buffer_utils, "UvaBuffer", _HostBuffer)
        mp.setattr(torch_utils, "PIN_MEMORY", False)  # no pinned staging of host copies
        yield


@pytest.fixture(autouse=True)
def _vllm_own():
    sv.uninstall()
    yield
    sv.uninstall()


def _spec_config(k, method="strict"):
    return SimpleNamespace(
        num_speculative_tokens=k, enable_adaptive_verification=False,
        rejection_sample_method=method, fly_entropy_threshold=0.3, fly_entropy_top_k=3,
        synthetic_acceptance_rates=None, fly_window_size=None,
    )  # fmt: skip


class Step:
    """One decode step of ``reqs`` requests with ``drafts[i]`` draft tokens each, laid out as
    Model Runner V2's ``prepare_inputs`` lays it out (no prefill, no adaptive verification)."""

    def __init__(self, drafts, v, params, *, seed=0, method="strict", draft_logits=False):
        g = torch.Generator().manual_seed(seed)
        reqs, k = len(drafts), max(1, max(len(d) for d in drafts))
        self.k, self.v = k, v
        rs = RequestState(reqs, 64, reqs * (k + 1), k, v, DEV)
        self.sampler = Sampler(VllmConfig(device_config=DeviceConfig(device="cpu")), reqs, v, DEV,
                               rs, num_speculative_tokens=k)  # fmt: skip
        idx = []
        for i in range(reqs):
            rs.add_request(f"r{i}", PROMPT, list(range(PROMPT)), PROMPT, 16)
            j = rs.req_id_to_index[f"r{i}"]  # vLLM hands out state slots from the top
            self.sampler.add_request(j, params[i])
            rs.last_sampled_tokens[j, 0] = int(torch.randint(v, (), generator=g))
            rs.draft_tokens[j, : len(drafts[i])] = torch.tensor(drafts[i], dtype=torch.int64)
            idx.append(j)
        rs.apply_staged_writes()
        self.sampler.apply_staged_writes()
        self.rejection_sampler = v2.RejectionSampler(self.sampler, _spec_config(k, method), DEV)

        n = np.array([len(d) for d in drafts], dtype=np.int32)
        sched = n + 1
        num_tokens = int(sched.sum())
        buf = InputBuffers(reqs, num_tokens, DEV)
        idx_np = np.array(idx, dtype=np.intp)
        idx_t = torch.from_numpy(idx_np).to(torch.int64)
        cu_np = np.zeros(reqs + 1, dtype=np.int32)
        np.cumsum(n + 1, out=cu_np[1:])
        cu = torch.from_numpy(cu_np.copy())
        exp_idx, exp_pos = expand_idx_mapping(idx_t, num_tokens, cu, k + 1)
        qsl_np = cu_np.copy()  # every scheduled token gives a logit in a pure decode step
        buf.query_start_loc[: reqs + 1] = torch.from_numpy(qsl_np)
        qsl = buf.query_start_loc[: reqs + 1]
        prepare_pos_seq_lens(idx_t, qsl, rs.num_computed_tokens.gpu, buf.positions, buf.seq_lens)
        seq_lens = buf.seq_lens[:reqs]
        logits_indices = combine_sampled_and_draft_tokens(
            buf.input_ids, idx_t, rs.last_sampled_tokens, qsl, seq_lens, rs.prefill_len.gpu,
            rs.draft_tokens, cu, num_tokens, 1,
        )  # fmt: skip
        computed = rs.num_computed_tokens_np[idx_np]
        zeros = np.zeros(reqs, dtype=np.int32)
        self.batch = InputBatch(
            req_ids=[f"r{i}" for i in range(reqs)], num_reqs=reqs, num_reqs_after_padding=reqs,
            idx_mapping=idx_t, idx_mapping_np=idx_np, expanded_idx_mapping=exp_idx,
            expanded_local_pos=exp_pos, num_scheduled_tokens=sched, num_tokens=num_tokens,
            num_tokens_after_padding=num_tokens, num_draft_tokens=int(n.sum()),
            num_draft_tokens_per_req=n, query_start_loc=qsl, query_start_loc_np=qsl_np,
            seq_lens=seq_lens, seq_lens_cpu_upper_bound=torch.from_numpy(computed + sched),
            dcp_local_seq_lens=None, num_computed_tokens_np=computed,
            prefill_len_np=np.full(reqs, PROMPT, dtype=np.int32),
            num_computed_prefill_tokens_np=np.full(reqs, PROMPT, dtype=np.int32),
            is_prefilling_np=zeros.astype(bool), has_prefill=False, decode_graph_eligible=True,
            input_ids=buf.input_ids[:num_tokens], positions=buf.positions[:num_tokens],
            is_padding=buf.is_padding[:num_tokens], logits_indices=logits_indices,
            cu_num_logits=cu, cu_num_logits_np=cu_np, has_structured_output_reqs=False,
            prompt_lens=None,
        )  # fmt: skip
        self.n = n
        self.logits = torch.randn(num_tokens, v, generator=g) * 2
        self.draft_logits = None
        if draft_logits:  # V2 keeps them per request state: [max_num_reqs, K, V]
            self.draft_logits = torch.randn(reqs, k, v, generator=g)

    def argmax_drafts(self, which):
        """Make draft j of request i the target argmax of its row where ``which(i, j)``, so that
        rows run past their first draft."""
        am = self.logits.argmax(-1)
        cu = self.batch.cu_num_logits_np
        for i in range(len(self.n)):
            for j in range(int(self.n[i])):
                if which(i, j):
                    self.batch.input_ids[cu[i] + 1 + j] = am[cu[i] + j]

    def run(self, plugin: bool, invalid=None):
        """-> (sampled [R, K + 1], num_sampled [R], num_rejected [R]) from V2's RejectionSampler,
        with vLLM's rejection_sample or with specops's installed."""
        if plugin:
            assert sv.V2_MODULE in sv.install()
            assert v2.rejection_sample is sv.rejection_sample_v2
        try:
            out = self.rejection_sampler(self.logits.clone(), self.batch, self.draft_logits,
                                         invalid)  # fmt: skip
        finally:
            sv.uninstall()
        assert v2.rejection_sample is VLLM_REJECTION_SAMPLE
        return out.sampled_token_ids, out.num_sampled, out.num_rejected


def _rows(sampled, num):
    return [sampled[i, : int(num[i])].tolist() for i in range(len(num))]


def test_the_runner_lays_the_step_out_as_expected():
    """The batch the stage builds is a decode step: each request's logits rows read
    [last sampled, drafts...] at consecutive positions after its prompt."""
    step = Step([[3, 1], [], [4, 4, 2]], 7, [SamplingParams(temperature=0.0)] * 3)
    ids = step.batch.input_ids.tolist()
    assert ids[1:3] == [3, 1] and ids[5:8] == [4, 4, 2]
    assert step.batch.positions.tolist() == [5, 6, 7, 5, 5, 6, 7, 8]
    assert step.batch.expanded_local_pos.tolist() == [0, 1, 2, 0, 0, 1, 2, 3]


@pytest.mark.parametrize("seed", range(3))
def test_greedy_step_is_vllms(seed):
    """All-greedy batch: specops's output equals vLLM's, bonus tokens included."""
    g = torch.Generator().manual_seed(100 + seed)
    reqs, k, v = 12, 3, 9
    drafts = [torch.randint(v, (int(torch.randint(k + 1, (), generator=g)),), generator=g)
              for _ in range(reqs)]  # fmt: skip
    step = Step([d.tolist() for d in drafts], v, [SamplingParams(temperature=0.0)] * reqs,
                seed=seed)  # fmt: skip
    step.argmax_drafts(lambda i, j: (i + j) % 2 == 0)
    want, got = step.run(False), step.run(True)
    assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])
    assert _rows(got[0], got[1]) == _rows(want[0], want[1])  # vLLM leaves the rest unwritten
    assert int(want[1].max()) > 1  # some drafts accepted


@pytest.mark.parametrize("method", ["strict", "block"])
def test_mixed_step_decisions_are_vllms(method):
    """Greedy and sampled requests (temperatures, seeded and not) in one step, one-hot
    drafts: the same accepted drafts and counts as vLLM's (its acceptance draws, reproduced),
    greedy rows identical; only a sampled row's final token is drawn differently."""
    g = torch.Generator().manual_seed(7)
    reqs, k, v = 16, 3, 8
    params = []
    for i in range(reqs):
        if i % 4 == 0:
            params.append(SamplingParams(temperature=0.0))
        elif i % 4 == 1:
            params.append(SamplingParams(temperature=0.8, seed=1000 + i))
        elif i % 4 == 2:
            params.append(SamplingParams(temperature=1.0, seed=2000 + i))
        else:
            params.append(SamplingParams(temperature=1.3))  # a random seed, the same both runs
    drafts = [torch.randint(v, (k - (i % 3 == 2),), generator=g).tolist() for i in range(reqs)]
    step = Step(drafts, v, params, seed=8, method=method)
    step.argmax_drafts(lambda i, j: (i + j) % 3 != 2)
    want, got = step.run(False), step.run(True)
    assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])
    assert int(want[1].min()) == 1 and int(want[1].max()) > 1  # rejections and acceptances
    gr, wr = _rows(got[0], got[1]), _rows(want[0], want[1])
    for i in range(reqs):
        if params[i].temperature == 0.0:
            assert gr[i] == wr[i]
        else:
            assert gr[i][:-1] == wr[i][:-1]


def test_invalid_drafts_are_rejected_as_vllm_rejects_them():
    """The runner's grammar mask (``invalid_drafts``) turns drafts into -1 for verification
    only: specops stops there as vLLM does."""
    reqs, k, v = 8, 3, 6
    params = [SamplingParams(temperature=0.0 if i % 2 else 1.0, seed=i) for i in range(reqs)]
    step = Step([[1, 2, 3]] * reqs, v, params, seed=3)
    cu = step.batch.cu_num_logits_np
    step.argmax_drafts(lambda i, j: True)  # greedy rows would accept all
    invalid = torch.zeros(int(cu[-1]), dtype=torch.bool)
    for i in range(reqs):
        invalid[cu[i] + 1 + i % 3] = True  # request i: draft i % 3 masked
    want, got = step.run(False, invalid), step.run(True, invalid)
    assert torch.equal(got[1], want[1]) and int(got[1].max()) <= k
    for i in range(1, reqs, 2):
        assert got[0][i, : int(got[1][i])].tolist() == want[0][i, : int(want[1][i])].tolist()


def _one_draft_step(reqs, v, *, seed, draft_logits, temperature=0.7):
    """``reqs`` requests with one draft each, all on the same target row, at ``temperature`` (V2's
    sampler applies it; its top-k/top-p kernel does not run in the interpreter, and specops reads
    the logits after it either way) -> (step, the tempered target law)."""
    g = torch.Generator().manual_seed(seed)
    row, d = torch.randn(v, generator=g) * 1.5, torch.randn(v, generator=g)
    # drafts drawn from the draft distribution, softmax(draft logits / temperature) as V2 reads
    # them, or (one-hot drafts, ngram-like) from anything: here the target's own law
    q = torch.softmax((d if draft_logits else row) / temperature, -1)
    draft = torch.multinomial(q, reqs, replacement=True, generator=g)
    params = [SamplingParams(temperature=temperature) for _ in range(reqs)]  # random seeds
    step = Step([[int(x)] for x in draft], v, params, seed=seed + 1, draft_logits=draft_logits)
    step.logits[:] = row
    if draft_logits:
        step.draft_logits[:] = d
    return step, torch.softmax(row.double() / temperature, -1)


@pytest.mark.parametrize("draft_logits", [False, True])
def test_emitted_token_law(draft_logits):
    """The first emitted token follows the tempered target (chi-square), with one-hot drafts
    and with draft logits (V2's kernel for draft logits calls libdevice log1p, which the
    interpreter cannot run, so this is specops's side alone).  At these inputs, reading the draft
    logits without the temperature would give a chi-square statistic of ~180 (5 degrees)."""
    reqs, v = 600, 6
    step, target = _one_draft_step(reqs, v, seed=13, draft_logits=draft_logits, temperature=0.5)
    tok, num, _ = step.run(True)
    assert bool((num >= 1).all())
    counts = torch.bincount(tok[:, 0], minlength=v).double()
    assert stats.chisquare(counts, target * reqs).pvalue > 1e-3


def test_emitted_token_law_is_vllms():
    """One-hot drafts: specops's first tokens and vLLM's on the same step are samples of one law
    (chi-square homogeneity; vLLM's kernels in the interpreter cost ~50 ms a request here)."""
    reqs, v = 250, 4
    step, _ = _one_draft_step(reqs, v, seed=21, draft_logits=False)
    ours = torch.bincount(step.run(True)[0][:, 0], minlength=v)
    theirs = torch.bincount(step.run(False)[0][:, 0], minlength=v)
    assert stats.chi2_contingency(torch.stack([ours, theirs]).numpy()).pvalue > 1e-3

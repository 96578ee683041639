"""specops.vllm's substitutes on malformed arguments, without vLLM (issue 47): one line naming
the argument, never torch's reshape error or an IndexError from inside."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import specops
import specops.vllm as sv


def _v1(b=2, k=2, v=8, **over):
    n = [k] * b
    args = dict(
        draft_token_ids=torch.zeros(b * k, dtype=torch.long),
        num_draft_tokens=n,
        max_spec_len=k,
        cu_num_draft_tokens=torch.tensor(n).cumsum(0),
        draft_probs=None,
        target_logits=torch.randn(b * k, v),
        bonus_token_ids=torch.zeros(b, 1, dtype=torch.long),
        sampling_metadata=SimpleNamespace(
            all_greedy=True, all_random=False, temperature=torch.zeros(b), generators={}
        ),
    )
    return args | over


def test_v1_well_formed():
    assert sv.rejection_sample(**_v1()).shape == (2, 3)


@pytest.mark.parametrize(
    "over, words",
    [
        (dict(num_draft_tokens=[2, 2, 0]), "cu_num_draft_tokens must hold one count per request"),
        (dict(bonus_token_ids=torch.zeros(3, 1, dtype=torch.long)), "bonus_token_ids must hold"),
    ],
)
def test_v1_request_count_mismatch_is_named(over, words):
    with pytest.raises(ValueError, match=words):
        sv.rejection_sample(**_v1(**over))


def _v2(r=2, k=2, v=8, idx=None):
    rows = r * (k + 1)
    return dict(
        target_logits=torch.randn(rows, v),
        draft_logits=None,
        draft_sampled=torch.zeros(rows, dtype=torch.long),
        cu_num_logits=torch.arange(r + 1) * (k + 1),
        pos=torch.arange(rows),
        idx_mapping=torch.arange(r) if idx is None else idx,
        expanded_idx_mapping=torch.arange(r).repeat_interleave(k + 1),
        expanded_local_pos=torch.arange(k + 1).repeat(r),
        temperature=torch.zeros(r),
        seed=torch.arange(r),
        num_speculative_steps=k,
    )


@pytest.mark.parametrize("validate", [True, False])
def test_v2_idx_mapping_past_temperature_is_named(validate):
    with specops.validation(validate), pytest.raises(ValueError, match="idx_mapping"):
        sv.rejection_sample_v2(**_v2(idx=torch.tensor([0, 5])))
    if validate:  # a negative entry would wrap: only validation mode reads the values
        with specops.validation(True), pytest.raises(ValueError, match=r"idx_mapping.*\[0, 2\)"):
            sv.rejection_sample_v2(**_v2(idx=torch.tensor([-1, 0])))

"""specops.sglang.install(): SGLang's EAGLE module attributes replaced (a stand-in module with
0.5.23's names: SGLang is not installed in CI), the replacements called exactly as 0.5.23's
eagle_sample and tree wrapper call them, uninstall, SPECOPS_SGLANG=0, the entry point."""

from __future__ import annotations

import os
import sys
import types

import pytest
import torch
from test_compat_sglang_build_tree import _buffers, _sglang_case
from test_compat_sglang_verify import _sgl_vector_inputs

import specops.sglang as sg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sglang_originals():
    def orig(*a, **k):
        raise AssertionError("SGLang's own function ran")

    return {name: orig for name in sg.REPLACEMENTS}


@pytest.fixture
def fake_sglang(monkeypatch):
    """sglang.srt.speculative.eagle_utils as a module with SGLang's names bound."""
    names = ["sglang", "sglang.srt", "sglang.srt.speculative", sg.TARGET_MODULE]
    mods = {n: types.ModuleType(n) for n in names}
    for name, fn in _sglang_originals().items():
        setattr(mods[sg.TARGET_MODULE], name, fn)
    for n, m in mods.items():
        monkeypatch.setitem(sys.modules, n, m)
    yield mods[sg.TARGET_MODULE]
    sg.uninstall()


def test_install_replaces_and_uninstall_restores(fake_sglang):
    before = {n: getattr(fake_sglang, n) for n in sg.REPLACEMENTS}
    assert not sg.installed()
    assert sorted(sg.install()) == sorted(sg.REPLACEMENTS)
    assert sg.installed()
    for name, fn in sg.REPLACEMENTS.items():
        assert getattr(fake_sglang, name) is fn
    sg.install()  # idempotent: uninstall still restores SGLang's
    sg.uninstall()
    assert {n: getattr(fake_sglang, n) for n in sg.REPLACEMENTS} == before


def test_disabled_by_env(fake_sglang, monkeypatch):
    monkeypatch.setenv("SPECOPS_SGLANG", "0")
    assert sg.install() == []
    assert not sg.installed()


def test_another_sglang_is_refused(fake_sglang):
    delattr(fake_sglang, "verify_tree_greedy_func")
    with pytest.raises(AttributeError, match="verify_tree_greedy_func"):
        sg.install()


def test_calls_as_eagle_sample_makes_them(fake_sglang):
    """The keyword calls of SGLang 0.5.23's eagle_sample (greedy and target-only) and of its
    build_tree_kernel_efficient wrapper, through the patched module."""
    sg.install()
    cand, ri, nt, ns, probs = _sgl_vector_inputs()
    predict = torch.full((12,), -1, dtype=torch.int32)
    accept_index = torch.full((2, 4), -1, dtype=torch.int32)
    num = torch.empty(2, dtype=torch.int32)
    out = fake_sglang.verify_tree_greedy_func(
        predicts=predict, accept_index=accept_index, accept_token_num=num, candidates=cand,
        retrieve_index=ri, retrieve_next_token=nt, retrieve_next_sibling=ns,
        target_predict=probs.argmax(-1), topk=4,
    )  # fmt: skip
    assert out[0] is predict and out[1] is accept_index and out[2] is num
    assert accept_index.tolist() == [[0, 3, 4, 5], [6, 10, 11, -1]]

    predict = torch.zeros(12, dtype=torch.int32)
    accept_index = torch.full((2, 4), -1, dtype=torch.int32)
    fake_sglang.tree_speculative_sampling_target_only(
        predicts=predict, accept_index=accept_index, accept_token_num=num, candidates=cand,
        retrive_index=ri, retrive_next_token=nt, retrive_next_sibling=ns,
        uniform_samples=torch.rand_like(cand, dtype=torch.float32),
        uniform_samples_for_final_sampling=torch.rand(2), target_probs=probs,
        draft_probs=torch.zeros_like(probs), threshold_single=1.0, threshold_acc=1.0,
        deterministic=True,
    )  # fmt: skip
    assert predict.tolist() == [3, 0, 0, 4, 5, 18, 11, 0, 0, 0, 12, 18]
    assert num.tolist() == [3, 2]

    parent_list, top, _ = _sglang_case()
    seq_lens = torch.tensor([5, 10])
    mask, positions, r_i, r_n, r_s = _buffers(2, 8, seq_lens, 1)
    fake_sglang.build_tree_kernel_efficient_func(parent_list, top, seq_lens, mask, positions, r_i,
                                                 r_n, r_s, 4, 4, 8, 1)  # fmt: skip
    assert positions.tolist() == [5, 6, 6, 7, 7, 8, 8, 9, 10, 11, 12, 12, 12, 12, 13, 14]


def test_entry_point_and_no_engine_import():
    """pyproject declares SGLang's general-plugin entry point; importing specops (and
    specops.sglang) imports no SGLang."""
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    assert '[project.entry-points."sglang.srt.plugins"]\nspecops = "specops.sglang:install"' in text
    import subprocess

    code = "import specops, specops.sglang, sys; print('sglang' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert r.stdout.strip() == "False", r.stderr

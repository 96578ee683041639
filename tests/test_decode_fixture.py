"""Every decoding method's outputs stay bit-identical to the recorded ones: tokens and statistics
counters of each case in tests/decode_fixture.py (AR, chain / dynamic / confidence / static
speculative decoding, SJD and SJD-PAC with their couplings, VVS, specops.hf.generate; greedy,
sampled, filtered, CFG, ragged and HiViS prompts), on every backend the CPU has, against
tests/data/decode_fixture.json.  A change that moves them on purpose re-records the fixture
(``python tests/decode_fixture.py``) and says why in its commit."""

from __future__ import annotations

import json

import pytest
import torch
from decode_fixture import PATH, all_cases, available, decode_tokens, run_all

RECORDED = json.loads(PATH.read_text())


@pytest.fixture(scope="module")
def cases():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # as recorded (a thread count may change float sums' order)
    try:
        import transformers

        same_hf = transformers.__version__ == RECORDED["transformers"]
    except ImportError:
        same_hf = False
    got = all_cases()
    if not same_hf:  # the tiny Llama's random init is transformers' own
        got = {k: v for k, v in got.items() if not k.startswith("hf-")}
    yield got
    torch.set_num_threads(n)


def _diff(name, want, got) -> str | None:
    if want == got:
        return None
    if want is None:
        return f"{name}: not recorded (re-record: python tests/decode_fixture.py)"
    if want["tokens"] != got["tokens"] or want["shape"] != got["shape"]:
        w = decode_tokens(want["tokens"], want["shape"])
        g = decode_tokens(got["tokens"], got["shape"])
        if w.shape != g.shape:
            return f"{name}: shape {tuple(g.shape)} != recorded {tuple(w.shape)}"
        r, c = (w != g).nonzero()[0].tolist()
        return f"{name}: tokens differ first at [{r}, {c}]: {int(g[r, c])} != {int(w[r, c])}"
    keys = [k for k in want if want[k] != got.get(k)]
    return f"{name}: " + ", ".join(f"{k} {got.get(k)} != recorded {want[k]}" for k in keys)


@pytest.mark.parametrize("backend", ["reference", "cpu", "cuda_sim"])
def test_outputs_equal_the_recorded_ones(cases, backend):
    if backend not in available():
        pytest.skip(f"{backend} is not built")
    got = run_all(cases, [backend])
    want = {k: v for k, v in RECORDED["runs"].items() if k.startswith(backend + ":")}
    missing = sorted(set(want) - set(got) - {k for k in want if ":hf-" in k})
    assert not missing, f"cases recorded but not run: {missing}"
    bad = [d for k in sorted(got) if (d := _diff(k, want.get(k), got[k])) is not None]
    assert not bad, "\n".join(bad)

"""The recorded decoding fixture (tests/data/decode_fixture.json): every method of specops.decode
(and specops.hf.generate) run with fixed seeds, greedy and sampled, on each backend the CPU has
(reference, cpu, cuda_sim), its tokens and statistics counters recorded so that a refactoring of
the loop can be held to bit-identical outputs (tests/test_decode_fixture.py replays them).

    .venv/bin/python tests/decode_fixture.py          # re-record (only when outputs may change)

Every op a run calls is pinned to one backend by resolving "auto" to it (``forced``).  Tokens are
stored as base64 of zlib-compressed int32 bytes."""

from __future__ import annotations

import base64
import contextlib
import json
import sys
import zlib
from pathlib import Path

import numpy as np
import torch

import specops
from specops import Tree, _build
from specops.decode import ar, lantern, sjd, sjd_pac, speculative, vvs
from specops.ops import _backends, _dispatch

PATH = Path(__file__).parent / "data" / "decode_fixture.json"
BACKENDS = ("reference", "cpu", "cuda_sim")
C2 = torch.arange(2)  # two classes of the embedded model
GREEDY, SAMPLED = dict(temperature=0), dict(temperature=1.3, seed=7)
FILTERED = dict(temperature=1.2, top_k=40, top_p=0.95, seed=5)
CFG = dict(temperature=1.0, cfg_scale=2.0, seed=3)


def _ragged(cfg):
    """Three ragged prompts (class token + 5, 11, 8 image tokens) and their hidden prefix."""
    g = torch.Generator().manual_seed(0)
    lens = [6, 12, 9]
    p = torch.full((3, 12), -1, dtype=torch.long)
    for r, n in enumerate(lens):
        p[r, 0] = cfg.vocab + r
        p[r, 1:n] = torch.randint(0, cfg.vocab, (n - 1,), generator=g)
    hide = torch.zeros_like(p, dtype=torch.bool)
    hide[:, 1:5] = True
    return p, hide


def _spec(m, cls, **kw):
    return speculative(m.target, m.drafter, cls, length=40, **kw)


def _vvs(m, cls, **kw):
    opts = dict(branch=3, depth=3, num_nodes=10, length=40)
    return vvs(m.target, m.drafter, cls, m.vq.latents, **{**opts, **kw})


def demo_cases(m) -> dict:
    """name -> thunk on the embedded model ``m`` (specops.models.loading.load_default())."""
    dyn = dict(tree="dynamic", branch=3, depth=3, num_nodes=10)
    conf = dict(tree="confidence", branch=3, depth=4, num_nodes=12, threshold=0.5)
    relax = lantern(m.vq.latents, 8, 0.2)
    prompt, hide = _ragged(m.cfg)
    pac = dict(window=8, branch=2, depth=2, length=48)
    P = prompt  # ragged prompts with image tokens: varied outputs (a class alone is peaked)
    sj = dict(window=8, length=48)
    cases = {
        "ar/greedy": lambda: ar(m.target, P, length=24, **GREEDY),
        "ar/sampled": lambda: ar(m.target, P, length=24, **SAMPLED),
        "ar/filtered": lambda: ar(m.target, P, length=24, **FILTERED),
        "ar/cfg": lambda: ar(m.target, C2, length=24, **CFG),
        "sjd/greedy": lambda: sjd(m.target, P, **sj, **GREEDY),
        "sjd/sampled": lambda: sjd(m.target, P, **sj, **SAMPLED),
        "sjd/uniform-cfg": lambda: sjd(m.target, C2, **sj, init="uniform", **CFG),
        "sjd/maximal": lambda: sjd(m.target, P, **sj, coupling="maximal", **SAMPLED),
        "sjd/gumbel": lambda: sjd(m.target, P, **sj, coupling="gumbel", **FILTERED),
        "sjd/gumbel-cfg": lambda: sjd(m.target, C2, **sj, coupling="gumbel", **CFG),
        "sjd_pac/greedy": lambda: sjd_pac(m.target, P, **pac, **GREEDY),
        "sjd_pac/sampled": lambda: sjd_pac(m.target, P, **pac, **SAMPLED),
        "sjd_pac/cfg": lambda: sjd_pac(m.target, C2, **pac, **CFG),
        "sjd_pac/gumbel": lambda: sjd_pac(m.target, P, **pac, coupling="gumbel", **SAMPLED),
        "sjd_pac/no-bc-uniform": lambda: sjd_pac(m.target, P, **pac, branch_continuation=False,
                                                 init="uniform", **SAMPLED),
        "sjd_pac/no-ac-pd": lambda: sjd_pac(m.target, P, **pac, continuation=False,
                                            proactive=False, **FILTERED),
        "spec-chain/greedy": lambda: _spec(m, P, tree=None, num_draft=3, **GREEDY),
        "spec-chain/sampled": lambda: _spec(m, P, tree=None, num_draft=3, **SAMPLED),
        "spec-chain/block": lambda: _spec(m, P, tree=None, num_draft=3, block=True, **FILTERED),
        "spec-chain/relax": lambda: _spec(m, P, tree=None, num_draft=3, relax=relax, **SAMPLED),
        "spec-chain/no-prefill": lambda: _spec(m, P, tree=None, num_draft=3,
                                               drafter_prefill=False, **SAMPLED),
        "spec-tree/greedy": lambda: _spec(m, P, **dyn, **GREEDY),
        "spec-tree/sampled": lambda: _spec(m, P, **dyn, **SAMPLED),
        "spec-tree/cfg": lambda: _spec(m, C2, **dyn, **CFG),
        "spec-tree/relax": lambda: _spec(m, P, **dyn, relax=relax, **FILTERED),
        "spec-tree/hide": lambda: _spec(m, P, **dyn, hide=hide, **SAMPLED),
        "spec-tree/hide-target-pos": lambda: _spec(m, P, **dyn, hide=hide,
                                                   hide_positions="target", **GREEDY),
        "spec-conf/greedy": lambda: _spec(m, P, **conf, **GREEDY),
        "spec-conf/top1": lambda: _spec(m, P, **conf, confidence="top1", **SAMPLED),
        "spec-static/wor": lambda: _spec(m, P, tree=Tree.kary(2, 3), **SAMPLED),
        "spec-static/iid": lambda: _spec(m, P, tree=Tree.kary(2, 3), without_replacement=False,
                                         **FILTERED),
        "spec-static/greedy": lambda: _spec(m, P, tree=Tree.kary(2, 3), **GREEDY),
        "vvs/greedy": lambda: _vvs(m, P, **GREEDY),
        "vvs/sampled": lambda: _vvs(m, P, **SAMPLED),
        "vvs/interval-relax": lambda: _vvs(m, P, schedule="interval", relax=relax, **SAMPLED),
        "vvs/frontier-cfg": lambda: _vvs(m, C2, paths="frontier", threshold=0.5, **CFG),
        "vvs/hide": lambda: _vvs(m, P, hide=hide, hide_positions="target", **FILTERED),
    }  # fmt: skip
    return cases


def hf_cases():
    """name -> thunk through specops.hf.generate on a tiny random Llama (tests/test_hf.py's)."""
    import transformers

    import specops.hf

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        initializer_range=0.3, bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 96, (2, 7), generator=torch.Generator().manual_seed(2))
    opts = {"ar": {}, "sjd": {"window": 6}, "sjd_pac": {"window": 16, "branch": 3, "depth": 3}}

    def run(method, **kw):
        return specops.hf.generate(model, ids, method=method, max_new_tokens=16, **opts[method],
                                   **kw)  # fmt: skip

    cases = {}
    for method in opts:
        cases[f"hf-{method}/greedy"] = lambda m=method: run(m, do_sample=False)
        cases[f"hf-{method}/sampled"] = lambda m=method: run(m, do_sample=True, seed=4)
    return cases


@contextlib.contextmanager
def forced(backend: str):
    """Every op resolves "auto" to ``backend`` where it has it (the fast path included)."""
    orig = _backends._resolve

    def resolve(op, be, device, have):
        if be == "auto":
            want = "cuda" if backend == "cuda_sim" else backend
            if want in have:
                return orig(op, backend, device, have)
        return orig(op, be, device, have)

    def clear():
        _backends._RESOLVED.clear()
        _dispatch._FAST.clear()

    clear()
    _backends._resolve = resolve
    try:
        yield
    finally:
        _backends._resolve = orig
        clear()


def available() -> list[str]:
    have = ["reference"]
    if _build.has_cpp():
        have.append("cpu")
    if _build.has_cuda_sim():
        have.append("cuda_sim")
    return have


def encode(tokens: torch.Tensor) -> str:
    a = tokens.to(torch.int32).numpy().astype("<i4").tobytes()
    return base64.b64encode(zlib.compress(a, 9)).decode()


def decode_tokens(s: str, shape) -> torch.Tensor:
    a = np.frombuffer(zlib.decompress(base64.b64decode(s)), dtype="<i4")
    return torch.from_numpy(a.copy()).reshape(shape)


def summary(tokens, stats) -> dict:
    """What the fixture holds of one run: tokens and every counter (never the timings)."""
    extra = {k: (round(v, 12) if isinstance(v, float) else v) for k, v in stats.extra.items()}
    return {
        "shape": list(tokens.shape),
        "tokens": encode(tokens),
        "method": stats.method,
        "passes_per_request": list(stats.passes_per_request),
        "target_passes": stats.target_passes,
        "drafter_passes": stats.drafter_passes,
        "accept_hist": list(stats.accept_hist),
        "extra": extra,
    }


def run_all(cases: dict, backends) -> dict:
    out = {}
    with specops.validation(False):
        for be in backends:
            with forced(be):
                for name, fn in cases.items():
                    torch.manual_seed(0)  # nothing should read it; pinned all the same
                    tokens, stats = fn()
                    out[f"{be}:{name}"] = summary(tokens, stats)
                    print(be, name, stats.step_compression, file=sys.stderr, flush=True)
    return out


def all_cases() -> dict:
    from specops.models.loading import load_default

    cases = demo_cases(load_default())
    try:
        cases.update(hf_cases())
    except ImportError:  # no transformers: the demo's cases only
        pass
    return cases


def main() -> None:
    torch.set_num_threads(1)
    runs = run_all(all_cases(), available())
    try:
        import transformers

        tf = transformers.__version__
    except ImportError:
        tf = None
    data = {"torch": torch.__version__, "transformers": tf, "runs": runs}
    PATH.write_text(json.dumps(data, indent=0, sort_keys=True) + "\n")
    print(f"{len(runs)} runs -> {PATH} ({PATH.stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()

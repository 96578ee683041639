"""specops.hf: transformers models in the decoding loop (tiny random-weight configs).

- the adapter's tree pass gives every node the logits / last hidden state that transformers'
  own forward gives the root-to-node path (tree attention, positions from depth, the cache);
- greedy ``specops.hf.generate`` is token-identical to ``model.generate(do_sample=False)`` for
  every method, with and without EOS;
- (other architectures: tests/test_hf_models.py)
- sampled AR / SJD / SJD-PAC reproduce the model's exact joint distribution of the first three
  new tokens (chi-square), with top-k and with CFG on a negative prompt;
- the model is left as it was (attention implementation), and bad input gets clear errors.
"""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest
import torch
from helpers import chi2_pvalue

transformers = pytest.importorskip("transformers")

import specops  # noqa: E402
import specops.hf  # noqa: E402
from specops import Tree  # noqa: E402

METHOD_OPTIONS = {
    "ar": {},
    "sjd": {"window": 6},
    "sjd_pac": {"window": 16, "branch": 3, "depth": 3},
}


def llama(vocab=96, seed=0, init=0.3, **kw):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        initializer_range=init, bos_token_id=None, eos_token_id=None, pad_token_id=None, **kw,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def model():
    return llama()


def hf_greedy(m, ids, n, **kw):
    with torch.no_grad():
        return m.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n, **kw
        )


def test_tree_pass_matches_hf_forward(model):
    """Prefill a prompt, then one pass over a 2-ary tree of 7 nodes: node n's logits and hidden
    state equal transformers' forward over prompt + the path root..n (no cache)."""
    ad = specops.hf.HFModel(model)
    b, p = 2, 5
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, 96, (b, p), generator=g)
    cache = ad.new_cache(b, 32)
    ad(prompt, torch.arange(p).expand(b, p), cache)
    specops.commit_kv(cache.kv, cache.seqlens, torch.arange(p, dtype=torch.int32).expand(b, p))
    tree = Tree.kary(2, 3)
    nodes = torch.randint(0, 96, (b, 7), generator=g)
    pos = cache.seqlens.long()[:, None] + tree.depth.long()
    logits, hidden = ad(nodes, pos, cache, tree)
    assert logits.shape == (b, 7, 96) and hidden.shape == (b, 7, 64)
    paths = {0: [0], 1: [0, 1], 2: [0, 2], 3: [0, 1, 3], 4: [0, 1, 4], 5: [0, 2, 5], 6: [0, 2, 6]}
    for n, path in paths.items():
        seq = torch.cat([prompt, nodes[:, path]], 1)
        with torch.no_grad():
            ref = model(seq, output_hidden_states=True)
        torch.testing.assert_close(logits[:, n], ref.logits[:, -1], atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(hidden[:, n], ref.hidden_states[-1][:, -1], atol=2e-5, rtol=1e-4)
    assert cache.seqlens.tolist() == [p, p]  # the model never advances seqlens


@pytest.mark.parametrize("method", sorted(METHOD_OPTIONS))
def test_greedy_matches_generate(model, method):
    ids = torch.randint(0, 96, (3, 7), generator=torch.Generator().manual_seed(2))
    ref = hf_greedy(model, ids, 24)
    out, stats = specops.hf.generate(
        model, ids, method=method, max_new_tokens=24, do_sample=False, **METHOD_OPTIONS[method]
    )
    assert out.dtype == torch.int64 and out.shape == ref.shape
    assert torch.equal(out, ref)
    assert stats.tokens == 24
    assert model.config._attn_implementation == "sdpa"  # switched only inside the adapter's calls


@pytest.mark.parametrize("method", sorted(METHOD_OPTIONS))
def test_greedy_eos_matches_generate(model, method):
    ids = torch.randint(0, 96, (3, 7), generator=torch.Generator().manual_seed(2))
    free = hf_greedy(model, ids, 24)[:, 7:]
    # EOS = a token each row emits, at different steps; a row without EOS keeps generating; the
    # last set stops every row within 4 tokens, and the loop with it
    early = [int(free[r, 3 - r]) for r in range(3)]
    for eos in (int(free[0, 5]), [int(free[0, 3]), int(free[1, 9])], early):
        ref = hf_greedy(model, ids, 24, eos_token_id=eos, pad_token_id=95)
        out, stats = specops.hf.generate(
            model, ids, method=method, max_new_tokens=24, do_sample=False, eos_token_id=eos,
            pad_token_id=95, **METHOD_OPTIONS[method],
        )  # fmt: skip
        assert torch.equal(out, ref), (eos, out, ref)
    assert out.shape[1] <= 7 + 4 and stats.target_passes <= 4


def test_progress_hook(model):
    ids = torch.randint(0, 96, (2, 5), generator=torch.Generator().manual_seed(11))
    seen = []
    out, stats = specops.hf.generate(
        model, ids, method="sjd", window=6, max_new_tokens=12, do_sample=False,
        progress=lambda counts, length: seen.append((counts.tolist(), length)),
    )  # fmt: skip
    assert len(seen) == stats.target_passes and seen[-1][1] == 12
    assert min(seen[-1][0]) >= 12  # the last call sees every request done
    ref, _ = specops.hf.generate(model, ids, method="sjd", window=6, max_new_tokens=12,
                                 do_sample=False)  # fmt: skip
    assert torch.equal(out, ref)


class _Collect:
    """A transformers-style streamer (put / end) that records what it is given."""

    def __init__(self):
        self.puts, self.ended = [], False

    def put(self, value):
        assert not self.ended
        self.puts.append(value.reshape(-1).tolist())

    def end(self):
        self.ended = True


@pytest.mark.parametrize("method", ["ar", "sjd"])
def test_streamer_gets_prompt_then_tokens_up_to_eos(model, method):
    ids = torch.randint(0, 96, (1, 6), generator=torch.Generator().manual_seed(5))
    free = hf_greedy(model, ids, 20)[0, 6:].tolist()
    opts = {"window": 5} if method == "sjd" else {}
    for eos in (None, free[9]):
        s = _Collect()
        out, stats = specops.hf.generate(
            model, ids, method=method, max_new_tokens=20, do_sample=False, eos_token_id=eos,
            pad_token_id=95, streamer=s, **opts,
        )  # fmt: skip
        assert s.ended and s.puts[0] == ids[0].tolist()  # the prompt first, as transformers
        streamed = [t for put in s.puts[1:] for t in put]
        want = free if eos is None else free[: free.index(eos) + 1]
        assert streamed == want, (eos, streamed, want)
        assert out[0, 6 : 6 + len(want)].tolist() == want
        assert len(s.puts) - 1 <= stats.target_passes  # at most one put a step
    with pytest.raises(ValueError, match="streamer needs a batch of 1"):
        specops.hf.generate(model, ids.expand(2, 6), method="ar", max_new_tokens=3,
                            do_sample=False, streamer=_Collect())  # fmt: skip


def test_seed_tensors(model):
    """Seeds as int64 tensors (one compilation under torch.compile), also one per request."""
    ids = torch.randint(0, 95, (2, 5), generator=torch.Generator().manual_seed(3))
    run = lambda seed: specops.hf.generate(
        model, ids, method="sjd", window=6, max_new_tokens=10, seed=seed
    )[0]
    a = run(5)
    assert torch.equal(run(torch.tensor(5)), a)
    per = run(torch.tensor([5, 6]))
    assert torch.equal(per[0], a[0]) and not torch.equal(per[1], a[1])


@pytest.mark.parametrize(
    "method,how", [("ar", True), ("sjd_pac", "aot_eager")]
)  # Inductor on the one-token step (~15-30 s of compiling on 2 CPU cores), a tree under aot_eager
def test_compiled_step_matches_generate(model, method, how):
    """``compile_step`` (fullgraph: a graph break is an error) traces the adapter's call, whose
    decoder hook is registered once per model, not per call; tokens == transformers' greedy."""
    ids = torch.randint(0, 96, (2, 5), generator=torch.Generator().manual_seed(12))
    ref = hf_greedy(model, ids, 8)
    with specops.validation(False):  # validation's value checks read the data: no whole graph
        out, _ = specops.hf.generate(
            model, ids, method=method, max_new_tokens=8, do_sample=False, compile_step=how,
            **METHOD_OPTIONS[method],
        )  # fmt: skip
    assert torch.equal(out, ref)
    assert len(model.get_decoder()._forward_hooks) == 1  # after every earlier test's adapters


def test_no_deprecated_cache_keyword(model):
    """The cache goes by the keyword the model's forward takes (transformers 5.24 renamed
    ``past_key_values`` to ``cache``, the old name to be removed in 5.40): no FutureWarning."""
    import warnings

    ids = torch.randint(0, 96, (2, 5), generator=torch.Generator().manual_seed(13))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        out, _ = specops.hf.generate(
            model, ids, method="sjd", window=4, max_new_tokens=6, do_sample=False
        )
    assert torch.equal(out, hf_greedy(model, ids, 6))


@pytest.mark.parametrize("method", sorted(METHOD_OPTIONS))
def test_ragged_prompts_match_generate(model, method):
    """Prompts of lengths 7, 3, 5, left-padded with the pad token as a tokenizer pads them."""
    g = torch.Generator().manual_seed(6)
    lens = [7, 3, 5]
    ids = torch.full((3, 7), 95, dtype=torch.long)
    mask = torch.zeros(3, 7, dtype=torch.long)
    for r, n in enumerate(lens):
        ids[r, 7 - n :] = torch.randint(0, 95, (n,), generator=g)
        mask[r, 7 - n :] = 1
    with torch.no_grad():
        ref = model.generate(
            ids, attention_mask=mask, do_sample=False, max_new_tokens=20, pad_token_id=95
        )
    out, _ = specops.hf.generate(
        model, ids, attention_mask=mask, method=method, max_new_tokens=20, do_sample=False,
        **METHOD_OPTIONS[method],
    )  # fmt: skip
    assert torch.equal(out, ref)
    for r, n in enumerate(lens):  # each row alone, unpadded
        alone, _ = specops.hf.generate(
            model, ids[r : r + 1, 7 - n :], method=method, max_new_tokens=20, do_sample=False,
            **METHOD_OPTIONS[method],
        )  # fmt: skip
        assert torch.equal(alone[0, n:], out[r, 7:])


@pytest.mark.parametrize("method", ["ar", "sjd"])
def test_custom_generate(model, method):
    """The same loop through hf_model.generate(custom_generate=...), ragged prompts included."""
    ids = torch.randint(0, 95, (2, 6), generator=torch.Generator().manual_seed(7))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    ref = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=16)
    with torch.no_grad():
        out = model.generate(
            ids, attention_mask=mask, do_sample=False, max_new_tokens=16,
            custom_generate=specops.hf.custom_generate, specops_method=method,
            specops_options=METHOD_OPTIONS[method],
        )  # fmt: skip
    assert torch.equal(out, ref)
    with pytest.raises(ValueError, match="RepetitionPenaltyLogitsProcessor"):
        model.generate(
            ids, max_new_tokens=4, repetition_penalty=1.3,
            custom_generate=specops.hf.custom_generate,
        )  # fmt: skip


@pytest.mark.parametrize("method", sorted(METHOD_OPTIONS))
def test_cfg_greedy_matches_generate(model, method):
    """CFG with a negative prompt of another length (left-padded in one row) and with none (the
    prompt's last token): transformers' guidance_scale / negative_prompt_ids."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 95, (3, 7), generator=g)
    neg = torch.randint(0, 95, (3, 4), generator=g)
    neg_mask = torch.ones_like(neg)
    neg_mask[2, :2] = 0
    one = torch.ones_like(ids)
    for kw in ({}, {"negative_prompt_ids": neg, "negative_prompt_attention_mask": neg_mask}):
        with torch.no_grad():
            ref = model.generate(
                ids, attention_mask=one, do_sample=False, max_new_tokens=16, guidance_scale=2.5,
                **kw,
            )  # fmt: skip
        out, _ = specops.hf.generate(
            model, ids, method=method, max_new_tokens=16, do_sample=False, cfg_scale=2.5,
            negative_input_ids=kw.get("negative_prompt_ids"),
            negative_attention_mask=kw.get("negative_prompt_attention_mask"),
            **METHOD_OPTIONS[method],
        )  # fmt: skip
        assert torch.equal(out, ref), kw.keys()


# ---------------------------------------------------------------- standalone draft model

SPEC_TREES = {
    "chain": dict(tree=None, num_draft=4),
    "dynamic": dict(tree="dynamic", branch=2, depth=3, num_nodes=6),
    "static": dict(tree=Tree.kary(2, 3)),
}


def test_identical_draft_model_accepts_every_draft(model):
    """A draft model identical to the target: chain speculative decoding accepts all K = 4
    drafts at every step (24 tokens = the prefill's + 23 in 5 passes of 5), greedy and sampled;
    the drafter reads the prompt first."""
    ids = torch.randint(0, 95, (2, 7), generator=torch.Generator().manual_seed(3))
    twin = copy.deepcopy(model)
    ref = hf_greedy(model, ids, 24)
    for sample in (False, True):
        out, stats = specops.hf.generate(
            model, ids, method="speculative", drafter=twin, max_new_tokens=24,
            do_sample=sample, seed=1, **SPEC_TREES["chain"],
        )  # fmt: skip
        assert stats.step_compression == pytest.approx(24 / 6), stats.accept_hist
        if not sample:
            assert torch.equal(out, ref)


@pytest.mark.parametrize("tree", sorted(SPEC_TREES))
def test_draft_model_greedy_matches_generate(model, tree):
    ids = torch.randint(0, 95, (2, 7), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=20)
    out, _ = specops.hf.generate(
        model, ids, attention_mask=mask, method="speculative", drafter=llama(seed=9),
        max_new_tokens=20, do_sample=False, **SPEC_TREES[tree],
    )  # fmt: skip
    assert torch.equal(out, ref)


# ---------------------------------------------------------------- statistical losslessness

V, BATCH, NEW = 8, 2000, 3


@pytest.fixture(scope="module")
def small():
    return llama(vocab=V, seed=3, init=0.15)


def exact_joint(m, prompt, top_k=None, cfg_scale=None, negative=None):
    """P(x_1, x_2, x_3 | prompt) [V, V, V] from transformers' forward on every prefix, the
    sampling distribution of each step given by specops.probs_from_logits (top-k; CFG with the
    uncond logits of the negative prompt + the same prefix)."""
    pre = [list(t) for k in range(NEW) for t in itertools.product(range(V), repeat=k)]

    def last_logits(p, rows, k):
        tail = torch.tensor(rows).long().view(len(rows), k)
        return m(torch.cat([p.expand(len(rows), -1), tail], 1)).logits[:, -1].float()

    with torch.no_grad():
        out = {}
        for k in range(NEW):
            rows = [t for t in pre if len(t) == k]
            cfg = {}
            if cfg_scale is not None:
                cfg = dict(cfg_scale=cfg_scale, uncond_logits=last_logits(negative, rows, k))
            logits = last_logits(prompt, rows, k)
            probs = specops.probs_from_logits(logits, top_k=top_k, **cfg).double().numpy()
            out.update({tuple(t): probs[i] for i, t in enumerate(rows)})
    joint = np.zeros((V, V, V))
    for x, y, z in itertools.product(range(V), repeat=3):
        joint[x, y, z] = out[()][x] * out[(x,)][y] * out[(x, y)][z]
    return joint


@pytest.mark.parametrize(
    "method,opts,top_k,cfg",
    [("ar", {}, None, None), ("sjd", {"window": 4}, None, None), ("sjd", {"window": 4}, 5, None),
     ("sjd_pac", {"window": 6, "branch": 2, "depth": 2}, None, None),
     ("sjd", {"window": 4}, None, 1.5),
     ("speculative", {"tree": None, "num_draft": 2}, None, None),
     ("speculative", {"tree": Tree.kary(2, 2)}, 5, None)],
)  # fmt: skip
def test_sampled_lossless(small, method, opts, top_k, cfg):
    prompt = torch.tensor([[1, 5, 2]])
    negative = torch.tensor([[6, 3]])  # CFG's unconditional prompt (another length)
    ids = prompt.expand(BATCH, -1).contiguous()
    extra = {}
    if method == "speculative":
        extra["drafter"] = llama(vocab=V, seed=4, init=0.15)
    if cfg is not None:
        extra = dict(cfg_scale=cfg, negative_input_ids=negative.expand(BATCH, -1).contiguous())
    out, stats = specops.hf.generate(
        small, ids, method=method, max_new_tokens=NEW, top_k=top_k, seed=21, **opts, **extra
    )
    x = out[:, 3:].numpy()
    counts = np.bincount(x[:, 0] * V * V + x[:, 1] * V + x[:, 2], minlength=V**3)
    p = chi2_pvalue(counts, exact_joint(small, prompt, top_k, cfg, negative))
    assert p > 1e-3, p
    if method != "ar":
        assert stats.step_compression > 1.0


# ---------------------------------------------------------------- errors


def test_bad_inputs(model):
    ids = torch.zeros(2, 3, dtype=torch.long)
    gen = specops.hf.generate
    with pytest.raises(ValueError, match="method must be one of"):
        gen(model, ids, method="beam", max_new_tokens=4)
    with pytest.raises(ValueError, match="needs a feature drafter and a VQ codebook"):
        gen(model, ids, method="vvs", max_new_tokens=4)
    with pytest.raises(ValueError, match="'speculative' needs a drafter="):
        gen(model, ids, method="speculative", max_new_tokens=4)
    with pytest.raises(ValueError, match="'sjd' takes no drafter"):
        gen(model, ids, method="sjd", max_new_tokens=4, drafter=model)
    with pytest.raises(ValueError, match=r"drafter's vocabulary \(64 tokens\) differs"):
        gen(model, ids, method="speculative", max_new_tokens=4, drafter=llama(vocab=64))
    with pytest.raises(TypeError, match="takes the options"):
        gen(model, ids, method="sjd", max_new_tokens=4, branch=3)
    with pytest.raises(ValueError, match=r"input_ids must have shape \[B, P\]"):
        gen(model, ids[0], method="ar", max_new_tokens=4)
    with pytest.raises(TypeError, match="input_ids must be integer"):
        gen(model, ids.float(), method="ar", max_new_tokens=4)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        gen(model, ids, method="ar", max_new_tokens=0)
    with pytest.raises(ValueError, match=r"input_ids must lie in \[0, 96\)"):
        gen(model, ids + 96, method="ar", max_new_tokens=4)
    with specops.validation(False), pytest.raises(ValueError, match=r"input_ids must lie in"):
        gen(model, ids - 5, method="ar", max_new_tokens=4)  # named as input_ids in fast mode too
    pad = torch.tensor([[1, 2, 3], [500, 4, 5]])  # the masked-out entry is never read
    mask = torch.tensor([[1, 1, 1], [0, 1, 1]])
    gen(model, pad, attention_mask=mask, method="ar", max_new_tokens=2)
    with pytest.raises(ValueError, match="attention_mask leaves a request with no token"):
        gen(
            model,
            ids,
            method="ar",
            max_new_tokens=4,
            attention_mask=torch.tensor([[0, 1, 1], [0] * 3]),
        )
    with pytest.raises(ValueError, match=r"attention_mask must be a tensor of shape \(2, 3\)"):
        gen(model, ids, method="ar", max_new_tokens=4, attention_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="negative_input_ids needs cfg_scale"):
        gen(model, ids, method="ar", max_new_tokens=4, negative_input_ids=ids)
    with pytest.raises(ValueError, match="negative_input_ids must have input_ids' batch 2"):
        gen(model, ids, method="ar", max_new_tokens=4, cfg_scale=2.0, negative_input_ids=ids[:1])
    with pytest.raises(TypeError, match="PreTrainedModel"):
        specops.hf.HFModel(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"allowed_tokens must lie in \[0, 96\)"):
        gen(model, ids, method="ar", max_new_tokens=4, allowed_tokens=[3, 96])
    with pytest.raises(ValueError, match=r"allowed_tokens as a mask must have shape \[96\]"):
        specops.hf.HFModel(model, allowed_tokens=torch.ones(95, dtype=torch.bool))
    with pytest.raises(TypeError, match="cache must come from new_cache"):
        specops.hf.HFModel(model)(ids, ids, None)


def test_unsupported_models():
    torch.manual_seed(0)
    cfg = transformers.MistralConfig(
        vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, sliding_window=8,
    )  # fmt: skip
    with pytest.raises(ValueError, match="only full-attention decoders"):
        specops.hf.HFModel(transformers.MistralForCausalLM(cfg))
    with pytest.raises(ValueError, match="output head"):
        specops.hf.HFModel(transformers.LlamaModel(llama().config))


def test_tree_attention_outside_adapter_is_an_error(model):
    m = llama(seed=5)
    m.config._attn_implementation = specops.hf.ATTN_NAME
    with pytest.raises(ValueError, match="runs only inside calls made by"):
        m(torch.zeros(1, 3, dtype=torch.long))

"""specops inside vLLM (tested against 0.33.0 on the CPU): the rejection-sampling core of vLLM's
speculative decoding replaced by ``specops.verify_chain``.

With specops installed, vLLM does this by itself in every process: specops declares the general
plugin ``vllm.general_plugins: specops = specops.vllm:install`` (``VLLM_PLUGINS`` filters
plugins by name; ``SPECOPS_VLLM=0`` makes ``install()`` do nothing).  By hand:
``import specops.vllm; specops.vllm.install()``.

Replaced: ``vllm.v1.sample.rejection_sampler.rejection_sample`` (the V1 model runner's
``RejectionSampler.forward`` looks it up at call time), keeping its contract:

- output [B, max_spec_len + 1] int32, accepted drafts, then the recovered token at the first
  rejection or vLLM's bonus token (``bonus_token_ids``) after all of a request's drafts, -1 after;
- greedy requests (temperature 0; ``all_greedy``): a draft is accepted while it equals the
  argmax of its target logits, the argmax emitted at the first mismatch (vLLM's rule, token for
  token); sampled requests: ``verify_chain`` on softmax(target logits) (already tempered and
  top-k/top-p masked by vLLM), with ``draft_probs`` or, without them (ngram, suffix, EAGLE/MTP
  greedy drafting), one-hot drafts; both kinds mixed in one batch;
- a -1 draft is rejected (the request's drafts end there; the token emitted there is drawn from
  its target row, as vLLM's recovery from an unmodified row);
- uniforms: a request with a ``torch.Generator`` in ``sampling_metadata.generators`` draws its
  K + 1 from it (deterministic per seed), the others from torch's default generator.  The law of
  every emitted token is vLLM's; its draws are not reproduced (vLLM races exponentials for the
  recovered token).

vLLM modes specops does not implement (synthetic acceptance rates, FLy) call vLLM's own
function.  Model Runner V2's sampler (vLLM 0.33.0's default runner) is not replaced yet: it
keeps running vLLM's code (issue 25).  Importing this module imports nothing of vLLM."""

from __future__ import annotations

import importlib
import os

import torch

import specops

__all__ = ["install", "installed", "uninstall", "rejection_sample", "V1_MODULE"]

V1_MODULE = "vllm.v1.sample.rejection_sampler"
_saved: dict[str, object] = {}


def _original():
    fn = _saved.get("rejection_sample")
    if fn is None:
        fn = importlib.import_module(V1_MODULE).rejection_sample
    return fn


def rejection_sample(
    draft_token_ids: torch.Tensor,
    num_draft_tokens: list[int],
    max_spec_len: int,
    cu_num_draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_logits: torch.Tensor,
    bonus_token_ids: torch.Tensor,
    sampling_metadata,
    synthetic_mode: bool = False,
    synthetic_conditional_rates: torch.Tensor | None = None,
    use_fp64_gumbel: bool = False,
    fly_window_size: int | None = None,
    fly_entropy_threshold: float | None = None,
    fly_entropy_top_k: int = 3,
) -> torch.Tensor:
    """vLLM 0.33.0's V1 ``rejection_sample`` contract (module docstring)."""
    if synthetic_mode or fly_window_size:
        return _original()(
            draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
            target_logits, bonus_token_ids, sampling_metadata, synthetic_mode=synthetic_mode,
            synthetic_conditional_rates=synthetic_conditional_rates,
            use_fp64_gumbel=use_fp64_gumbel, fly_window_size=fly_window_size,
            fly_entropy_threshold=fly_entropy_threshold, fly_entropy_top_k=fly_entropy_top_k,
        )  # fmt: skip
    b, k = len(num_draft_tokens), int(max_spec_len)
    dev = target_logits.device
    out_cols = torch.arange(k + 1, device=dev)[None, :]
    bonus = bonus_token_ids.reshape(b, 1).long()
    cu = cu_num_draft_tokens.long().reshape(b)
    n = cu - torch.cat([cu.new_zeros(1), cu[:-1]])  # drafts per request, on the device
    total = draft_token_ids.numel()
    if total == 0 or k == 0:  # no drafts: the bonus token at column 0
        return torch.where(out_cols == 0, bonus, -1).to(torch.int32)
    j = torch.arange(k, device=dev)[None, :]
    valid = j < n[:, None]
    rows = (cu[:, None] - n[:, None] + j).clamp(0, total - 1)  # flat row of draft j
    x = torch.where(valid, draft_token_ids.reshape(-1).long()[rows], -1)
    md = sampling_metadata
    all_greedy, all_random = bool(md.all_greedy), bool(md.all_random)
    tokens = None
    if not all_greedy:
        tokens = _sampled(x, rows, n, k, draft_probs, target_logits, bonus, md, num_draft_tokens)
    if not all_random:
        greedy = _greedy(x, rows, n, k, target_logits, bonus)
        if all_greedy:
            return greedy
        is_greedy = (md.temperature.reshape(b) == 0)[:, None]
        tokens = torch.where(is_greedy, greedy, tokens)
    return tokens


def _greedy(x, rows, n, k, target_logits, bonus):
    """vLLM's greedy rule: accept while draft == argmax(target logits); the argmax at the first
    mismatch, else the bonus after all n drafts."""
    dev = x.device
    am = target_logits.argmax(-1)[rows]  # [B, K]
    a = (x == am).long().cumprod(-1).sum(-1).clamp(max=n)  # accepted prefix
    cols = torch.arange(k + 1, device=dev)[None, :]
    am_pad = torch.cat([am, am[:, :1]], 1)
    last = torch.where(a < n, am_pad.gather(1, a[:, None])[:, 0], bonus[:, 0])
    tok = torch.where(cols < a[:, None], am_pad, -1)
    return torch.where(cols == a[:, None], last[:, None], tok).to(torch.int32)


def _sampled(x, rows, n, k, draft_probs, target_logits, bonus, md, num_draft_tokens):
    """verify_chain on softmax(target logits); vLLM's bonus token after all n drafts."""
    b = x.shape[0]
    dev = x.device
    probs = target_logits.float().softmax(-1)[rows]  # [B, K, V]
    target = torch.cat([probs, probs[:, :1]], 1)  # row K: a placeholder (the bonus is vLLM's)
    q = draft_probs.float()[rows] if draft_probs is not None else None
    u = torch.rand(b, k + 1, device=dev)
    for i, g in (md.generators or {}).items():
        if num_draft_tokens[i] > 0:
            u[i] = torch.rand(k + 1, generator=g, device=g.device).to(dev)
    r = specops.verify_chain(target, x, q, uniforms=u)
    cols = torch.arange(k + 1, device=dev)[None, :]
    all_in = (r.num_accepted.long() == n)[:, None]
    return torch.where(all_in & (cols == n[:, None]), bonus, r.tokens.long()).to(torch.int32)


def install() -> list[str]:
    """Put specops's ``rejection_sample`` in vLLM's V1 sampler; returns the names replaced (none
    when ``SPECOPS_VLLM=0``).  Idempotent.  Raises ImportError when vLLM's module does not
    import, AttributeError when it has no ``rejection_sample`` (another vLLM version)."""
    if os.environ.get("SPECOPS_VLLM", "1") == "0":
        return []
    mod = importlib.import_module(V1_MODULE)
    current = getattr(mod, "rejection_sample", None)
    if current is None:
        raise AttributeError(
            f"specops.vllm.install: {V1_MODULE} has no rejection_sample "
            "(specops follows vLLM 0.33.0)"
        )
    if current is not rejection_sample:
        _saved["rejection_sample"] = current
        mod.rejection_sample = rejection_sample
    return ["rejection_sample"]


def installed() -> bool:
    import sys

    mod = sys.modules.get(V1_MODULE)
    return mod is not None and getattr(mod, "rejection_sample", None) is rejection_sample


def uninstall() -> None:
    import sys

    mod = sys.modules.get(V1_MODULE)
    if mod is not None and "rejection_sample" in _saved:
        mod.rejection_sample = _saved["rejection_sample"]
    _saved.clear()

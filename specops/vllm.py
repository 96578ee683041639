"""specops inside vLLM (tested against 0.33.0 on the CPU): the rejection-sampling core of vLLM's
speculative decoding replaced by ``specops.verify_chain``.

With specops installed, vLLM does this by itself in every process: specops declares the general
plugin ``vllm.general_plugins: specops = specops.vllm:install`` (``VLLM_PLUGINS`` filters
plugins by name; ``SPECOPS_VLLM=0`` makes ``install()`` do nothing).  By hand:
``import specops.vllm; specops.vllm.install()``.

Replaced, keeping vLLM's contracts: ``vllm.v1.sample.rejection_sampler.rejection_sample`` (V1;
greedy rows by vLLM's argmax rule, sampled rows by ``verify_chain``, the law vLLM's, its draws
not reproduced) and Model Runner V2's ``rejection_sample`` (by ``rejection_sample_v2``, whose
acceptance draws are vLLM's own, token for token).  vLLM modes specops does not implement
(synthetic acceptance rates, FLy, watermarking) call vLLM's own function.  Importing this module
imports nothing of vLLM.  Each contract in full, checks and tests: docs/engines.md, "vLLM".
"""

from __future__ import annotations

import importlib
import os

import torch

import specops

__all__ = [
    "install",
    "installed",
    "uninstall",
    "rejection_sample",
    "rejection_sample_v2",
    "tl_rand",
    "V1_MODULE",
    "V2_MODULE",
]

V1_MODULE = "vllm.v1.sample.rejection_sampler"
V2_MODULE = "vllm.v1.worker.gpu.spec_decode.rejection_sampler"
_saved: dict[tuple[str, str], object] = {}


def _original(module: str = V1_MODULE):
    fn = _saved.get((module, "rejection_sample"))
    if fn is None:
        fn = importlib.import_module(module).rejection_sample
    return fn


def tl_rand(seed: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """Triton's ``tl.rand(seed, offset)`` for int64 tensors, as vLLM's ``tl_rand32(...,
    includes_zero=False)``: Philox4x32-10 with key (seed lo, seed hi) and counter (offset lo,
    offset hi, 0, 0); word 0 as a signed int32 x, ~x if negative, times 4.6566127342e-10 in
    float32, at least that constant."""
    from specops.reference.philox import philox4x32_10

    m = 0xFFFFFFFF
    x0, _, _, _ = philox4x32_10(offset & m, (offset >> 32) & m, 0, 0, seed & m, (seed >> 32) & m)
    x = torch.where(x0 >= 2**31, x0 - 2**32, x0)  # the int32 bit pattern
    x = torch.where(x < 0, ~x, x)
    c = torch.full((), 4.6566127342e-10, dtype=torch.float32, device=x.device)
    return torch.maximum(x.to(torch.float32) * c, c)


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
    _check_v1(b, cu_num_draft_tokens, bonus_token_ids)
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
        am = target_logits.argmax(-1)[rows]  # [B, K]; vLLM's bonus token after n drafts
        am = torch.cat([am, bonus], 1).scatter(1, n[:, None], bonus)
        greedy = _greedy(x, am, n)[0].to(torch.int32)
        if all_greedy:
            return greedy
        is_greedy = (md.temperature.reshape(b) == 0)[:, None]
        tokens = torch.where(is_greedy, greedy, tokens)
    return tokens


def _check_v1(b: int, cu_num_draft_tokens, bonus_token_ids) -> None:
    """The request count B = len(num_draft_tokens) against the tensors sized by it (shapes only:
    no data read), so a mismatch is one line naming the argument, not torch's reshape error."""
    op = "specops.vllm.rejection_sample"
    if cu_num_draft_tokens.numel() != b:
        raise ValueError(
            f"{op}: cu_num_draft_tokens must hold one count per request (len(num_draft_tokens) = "
            f"{b}), got shape {list(cu_num_draft_tokens.shape)}"
        )
    if bonus_token_ids.numel() != b:
        raise ValueError(
            f"{op}: bonus_token_ids must hold one token per request ([{b}, 1], "
            f"len(num_draft_tokens) = {b}), got shape {list(bonus_token_ids.shape)}"
        )


def _request_state(idx_mapping, temperature, seed):
    """Each request's (temperature, seed) through ``idx_mapping``: in validation mode an entry
    outside [0, len(temperature)) (or past ``seed``) is one line naming ``idx_mapping``; in
    fast mode nothing is read for the check (no host sync) and torch's IndexError (CPU) is
    reworded."""
    op = "specops.vllm.rejection_sample_v2"
    state = idx_mapping.long()
    slots = min(temperature.numel(), seed.numel())
    bad = f"{op}: idx_mapping must index temperature and seed (entries in [0, {slots}))"
    if specops.validating() and state.numel() and bool(((state < 0) | (state >= slots)).any()):
        raise ValueError(f"{bad}, got {state.tolist()}")
    try:
        return temperature.float()[state], seed.long()[state], state
    except IndexError:
        raise ValueError(f"{bad}, got {state.tolist()}") from None


def _greedy(x, am, n):
    """vLLM's greedy rule -> (tokens [B, K + 1] long, accepted [B]): accept while draft j equals
    ``am[:, j]`` (the argmax of its target row); emit the argmax where it stops, which is
    ``am[:, n]`` (the row after the last draft: the bonus) when all n drafts match."""
    k = x.shape[1]
    a = (x == am[:, :k]).long().cumprod(-1).sum(-1).clamp(max=n)
    cols = torch.arange(k + 1, device=x.device)[None, :]
    return torch.where(cols <= a[:, None], am, -1), a


def _sampled(x, rows, n, k, draft_probs, target_logits, bonus, md, num_draft_tokens):
    """verify_chain on softmax(target logits); vLLM's bonus token after all n drafts."""
    b = x.shape[0]
    dev = x.device
    probs = target_logits[rows].float().softmax(-1)  # [B, K, V]
    target = torch.cat([probs, probs[:, :1]], 1)  # row K: a placeholder (the bonus is vLLM's)
    q = draft_probs[rows].float() if draft_probs is not None else None
    u = torch.rand(b, k + 1, device=dev)
    for i, g in (md.generators or {}).items():
        if num_draft_tokens[i] > 0:
            u[i] = torch.rand(k + 1, generator=g, device=g.device).to(dev)
    r = specops.verify_chain(target, x, q, uniforms=u)
    cols = torch.arange(k + 1, device=dev)[None, :]
    all_in = (r.num_accepted.long() == n)[:, None]
    return torch.where(all_in & (cols == n[:, None]), bonus, r.tokens.long()).to(torch.int32)


def rejection_sample_v2(
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor | None,
    draft_sampled: torch.Tensor,
    cu_num_logits: torch.Tensor,
    pos: torch.Tensor,
    idx_mapping: torch.Tensor,
    expanded_idx_mapping: torch.Tensor,
    expanded_local_pos: torch.Tensor,
    temperature: torch.Tensor,
    seed: torch.Tensor,
    num_speculative_steps: int,
    synthetic_conditional_rates: torch.Tensor | None = None,
    use_fp64: bool = False,
    use_block_verification: bool = False,
    contexts=None,
    watermarking=None,
    watermarking_skip_mask=None,
    watermark_key=None,
    fly_window_size: int = 0,
    fly_entropy_threshold: float = 0.3,
    fly_entropy_top_k: int = 3,
):
    """vLLM 0.33.0's Model Runner V2 ``rejection_sample`` contract (module docstring)."""
    if synthetic_conditional_rates is not None or fly_window_size or watermarking is not None:
        return _original(V2_MODULE)(
            target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
            expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps,
            synthetic_conditional_rates, use_fp64, use_block_verification, contexts,
            watermarking, watermarking_skip_mask, watermark_key, fly_window_size,
            fly_entropy_threshold, fly_entropy_top_k,
        )  # fmt: skip
    k = int(num_speculative_steps)
    dev = target_logits.device
    cu = cu_num_logits.long()
    start = cu[:-1]
    r = start.numel()
    total = target_logits.shape[0]
    n = (cu[1:] - start - 1).clamp(0, k)  # drafts per request (the last row is the bonus row)
    j = torch.arange(k + 1, device=dev)[None, :]
    rows = (start[:, None] + j).clamp(0, max(total - 1, 0))  # [R, K + 1]
    later = (start[:, None] + j[:, :k] + 1).clamp(0, max(total - 1, 0))
    x = torch.where(j[:, :k] < n[:, None], draft_sampled.long()[later], -1)  # draft j at row j
    temp, sd, state = _request_state(idx_mapping, temperature, seed)
    greedy = temp == 0
    v = target_logits.shape[-1]
    if draft_logits is not None:  # a draft vocabulary may be smaller (padding): vLLM cuts both
        v = min(v, draft_logits.shape[-1])
    logits = target_logits[rows, :v].float()  # [R, K + 1, V]
    tok_g, a_g = _greedy(x, logits.argmax(-1), n)  # row n: the bonus row
    p = logits.softmax(-1)
    q = None
    if draft_logits is not None:
        t = torch.where(temp > 0, temp, 1.0)[:, None, None]
        q = (draft_logits[state, :k, :v].float() / t).softmax(-1)
    # acceptance draws: vLLM's own, tl.rand(seed (^ step << 32 in block mode), pos of the row)
    steps = j[:, :k].expand(r, k)
    key = (sd[:, None] ^ (steps << 32)) if use_block_verification else sd[:, None].expand(r, k)
    u = tl_rand(key, pos.long()[rows[:, :k]])
    final_key = sd ^ ((k + 1) << 32)
    last_row = rows.gather(1, n[:, None])[:, 0]
    u_final = tl_rand(final_key, pos.long()[last_row])
    res = specops.verify_chain(p, x, q, uniforms=torch.cat([u, u_final[:, None]], 1),
                               block=bool(use_block_verification))  # fmt: skip
    tokens = torch.where(greedy[:, None], tok_g, res.tokens.long())
    num = torch.where(greedy, a_g, res.num_accepted.long()) + 1
    return tokens, num.to(torch.int32)


def install() -> list[str]:
    """Put specops's functions in vLLM's V1 sampler and Model Runner V2's; returns the modules
    patched (none when ``SPECOPS_VLLM=0``).  Idempotent.  Raises ImportError when vLLM's V1
    module does not import, AttributeError when a module has no ``rejection_sample`` (another
    vLLM version); a V2 module that does not import is skipped."""
    if os.environ.get("SPECOPS_VLLM", "1") == "0":
        return []
    done = []
    for module, fn in ((V1_MODULE, rejection_sample), (V2_MODULE, rejection_sample_v2)):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            if module == V1_MODULE:
                raise
            continue
        current = getattr(mod, "rejection_sample", None)
        if current is None:
            raise AttributeError(
                f"specops.vllm.install: {module} has no rejection_sample "
                "(specops follows vLLM 0.33.0)"
            )
        if current is not fn:
            _saved[(module, "rejection_sample")] = current
            mod.rejection_sample = fn
        done.append(module)
    return done


def installed() -> bool:
    """Whether vLLM's V1 sampler (if imported) runs specops's function."""
    import sys

    mod = sys.modules.get(V1_MODULE)
    return mod is not None and getattr(mod, "rejection_sample", None) is rejection_sample


def uninstall() -> None:
    """Put vLLM's own functions back."""
    import sys

    for (module, name), fn in _saved.items():
        mod = sys.modules.get(module)
        if mod is not None:
            setattr(mod, name, fn)
    _saved.clear()

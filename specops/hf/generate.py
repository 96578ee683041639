"""``specops.hf.generate``: speculative decoding of a transformers causal LM in one call.

    seqs, stats = specops.hf.generate(hf_model, input_ids, method="sjd_pac", max_new_tokens=256)

``seqs`` [B, P + T] int64 as ``hf_model.generate`` returns them: the prompt, then the new tokens,
and after a request's first EOS the pad token; when every request has stopped, the columns after
the last EOS are dropped (transformers stops there).  ``do_sample=False`` is greedy decoding
(temperature 0 in ``specops.decode``): token-identical to ``hf_model.generate(do_sample=False)``
whatever the method.  Sampled decoding is lossless (every method samples from the model's
distribution after temperature / top-k / top-p) but draws its own random numbers (Philox,
``seed``), so it is not token-identical to transformers' sampling.

A request stops at its first EOS (the loop runs while any request is active); its row is padded
with the pad token after the EOS.
"""

from __future__ import annotations

import inspect
import numbers

import torch

from specops import decode
from specops.decode.hooks import current_hook
from specops.decode.sampling import NAMES as SAMPLING
from specops.hf.drafter import HFDrafter, check_drafter
from specops.hf.model import HFModel

__all__ = ["generate", "METHODS"]

METHODS = {
    "ar": decode.ar,
    "sjd": decode.sjd,
    "sjd_pac": decode.sjd_pac,
    "speculative": decode.speculative,
}
_NEEDS_DRAFTER = ("speculative",)


def _adapter(model, allowed_tokens, prefill_inputs, image_head, layout) -> HFModel:
    """A fresh adapter per call (it is cheap: no weights are copied)."""
    if isinstance(model, HFModel):
        if allowed_tokens is None:
            allowed_tokens = model.allowed_tokens
        image_head = image_head or model.image_head
        layout = layout or model.layout
        model = model.hf
    return HFModel(
        model, allowed_tokens=allowed_tokens, prefill_inputs=prefill_inputs,
        image_head=image_head, layout=layout,
    )  # fmt: skip


def _negative(prompts, cfg_scale, neg, neg_mask, vocab, device):
    """The unconditional prompt of CFG as the loop takes it ([B, P'], -1 padded on the right):
    ``negative_input_ids`` (with its attention mask), else the prompt's last token, as
    transformers' ``guidance_scale`` does without a negative prompt."""
    if cfg_scale is None:
        if neg is not None:
            raise ValueError("specops.hf.generate: negative_input_ids needs cfg_scale")
        return None
    if neg is None:  # each prompt's last token
        last = (prompts >= 0).sum(1) - 1
        return prompts.gather(1, last[:, None])
    neg = _check_ids(neg, vocab, device, "negative_input_ids")
    if neg.shape[0] != prompts.shape[0]:
        raise ValueError(
            f"specops.hf.generate: negative_input_ids must have input_ids' batch "
            f"{prompts.shape[0]}, got shape {tuple(neg.shape)}"
        )
    neg = _prompts(neg, neg_mask, "negative_attention_mask")
    _check_range(neg, vocab, "negative_input_ids")
    return neg


def _check_ids(ids, vocab: int, device, name: str = "input_ids") -> torch.Tensor:
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"specops.hf.generate: {name} must be a tensor, got {type(ids).__name__}")
    if ids.dim() != 2 or ids.shape[0] == 0 or ids.shape[1] == 0:
        raise ValueError(
            f"specops.hf.generate: {name} must have shape [B, P] with B, P >= 1, got "
            f"{tuple(ids.shape)}"
        )
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"specops.hf.generate: {name} must be integer ids, got {ids.dtype}")
    if ids.device != device:
        raise ValueError(
            f"specops.hf.generate: {name} is on {ids.device} but the model is on {device}"
        )
    return ids.long()


def _check_range(prompts, vocab: int, name: str) -> None:
    """The real tokens (padding is -1 by now) lie in [0, vocab): one host read per call, before
    the loop, always (the loop's own check would name its ``classes``/``prompts``)."""
    if bool(((prompts < -1) | (prompts >= vocab)).any()):
        raise ValueError(f"specops.hf.generate: {name} must lie in [0, {vocab})")


def _prompts(ids, mask, name: str = "attention_mask") -> torch.Tensor:
    """input_ids [B, P] with ``attention_mask`` (0 = padding, on either side, as transformers
    takes it) -> the loop's prompts: each request's real tokens first, in order, then -1."""
    if mask is None:
        return ids
    if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != tuple(ids.shape):
        raise ValueError(
            f"specops.hf.generate: {name} must be a tensor of shape {tuple(ids.shape)}, got "
            f"{getattr(mask, 'shape', type(mask).__name__)}"
        )
    real = mask.to(ids.device) != 0
    if not bool(real.any(1).all()):  # one host read, before any work
        raise ValueError(f"specops.hf.generate: {name} leaves a request with no token")
    order = torch.sort((~real).to(torch.uint8), dim=1, stable=True).indices  # real ones first
    return torch.where(real.gather(1, order), ids.gather(1, order), -1)


def _method(method: str, options: dict, drafter):
    if method == "vvs":
        raise ValueError(
            "specops.hf.generate: method 'vvs' needs a feature drafter and a VQ codebook, which "
            f"specops.hf does not provide yet; use one of {sorted(METHODS)}"
        )
    if method not in METHODS:
        raise ValueError(
            f"specops.hf.generate: method must be one of {sorted(METHODS)}, got {method!r}"
        )
    if (method in _NEEDS_DRAFTER) != (drafter is not None):
        raise ValueError(
            f"specops.hf.generate: method {method!r} "
            + ("needs a drafter= (a draft causal LM)" if drafter is None else "takes no drafter")
        )
    fn = METHODS[method]
    params = inspect.signature(fn).parameters.values()
    named = {p.name for p in params if p.kind is not p.VAR_KEYWORD}  # **sampling_kwargs apart
    allowed = named - {"model", "drafter", "classes", "length", *SAMPLING}
    bad = sorted(set(options) - allowed)
    if bad:
        raise TypeError(
            f"specops.hf.generate: method {method!r} takes the options {sorted(allowed)}, got {bad}"
        )
    return fn


def _eos_ids(eos, model) -> list[int]:
    if eos is None:
        eos = getattr(getattr(model.hf, "generation_config", None), "eos_token_id", None)
    if eos is None:
        return []
    return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]


def apply_eos(seqs, prompt_len: int, eos: list[int], pad) -> torch.Tensor:
    """Pad each request after its first EOS among the new tokens; drop the trailing columns once
    every request has stopped (as transformers' generate returns them)."""
    if not eos:
        return seqs
    new = seqs[:, prompt_len:]
    is_eos = torch.isin(new, torch.tensor(eos, device=new.device))
    after = (is_eos.long().cumsum(1) - is_eos.long()) > 0  # strictly after the first EOS
    new = torch.where(after, pad, new)
    stopped = is_eos.any(1)
    if bool(stopped.all()):  # one host read, after the loop
        end = int((after.logical_not().sum(1)).max())
        new = new[:, :end]
    return torch.cat([seqs[:, :prompt_len], new], 1)


def _hooks(progress, streamer, ids: torch.Tensor, eos: list):
    """(hook, with_tokens) for ``specops.decode.progress`` around the loop: ``progress`` if
    given, else the hook of an enclosing ``specops.decode.progress`` block (``generate_image``
    and ``specops generate`` set theirs so), which stays on; with a ``streamer``, one hook that
    feeds it and calls the other."""
    outer = current_hook() if progress is None else (progress, False)
    if streamer is None:
        return outer if outer is not None else (None, False)
    return _stream_hook(streamer, ids, eos, outer), True


def _stream_hook(streamer, ids: torch.Tensor, eos: list, progress):
    """A ``specops.decode.progress(..., tokens=True)`` hook feeding ``streamer`` the tokens of
    request 0 as they are committed (after ``streamer.put(prompt)``, as transformers does), and
    stopping at its first EOS; ``progress`` = (hook, with_tokens), if not None, is called as
    well."""
    if ids.shape[0] != 1:
        raise ValueError(
            f"specops.hf.generate: streamer needs a batch of 1 prompt (as in transformers), "
            f"got {ids.shape[0]}"
        )
    streamer.put(ids.cpu())
    state = {"seen": 0, "stopped": False}
    eos_ids = torch.tensor(eos, dtype=torch.long) if eos else None

    def hook(counts, length, emitted):
        if progress is not None:
            fn, with_tokens = progress
            fn(counts, length, emitted) if with_tokens else fn(counts, length)
        row = emitted[0, : min(int(counts[0]), length)].long()
        new = row[state["seen"] :]
        if state["stopped"] or new.numel() == 0:
            return
        hit = torch.isin(new, eos_ids) if eos_ids is not None else None
        if hit is not None and bool(hit.any()):
            new = new[: int(hit.int().argmax()) + 1]  # up to and including the EOS
            state["stopped"] = True
        state["seen"] += new.numel()
        streamer.put(new)

    return hook


def generate(
    model,
    input_ids: torch.Tensor,
    *,
    method: str = "sjd_pac",
    max_new_tokens: int,
    drafter=None,
    attention_mask: torch.Tensor | None = None,
    do_sample: bool = True,
    temperature: float = 1.0,
    top_k=None,
    top_p=None,
    eos_token_id=None,
    pad_token_id=None,
    cfg_scale: float | None = None,
    negative_input_ids: torch.Tensor | None = None,
    negative_attention_mask: torch.Tensor | None = None,
    allowed_tokens=None,
    prefill_inputs: dict | None = None,
    image_head: bool = False,
    layout=None,
    progress=None,
    streamer=None,
    seed: int = 0,
    **method_options,
):
    """Decode ``max_new_tokens`` tokens after each prompt of ``input_ids`` [B, P] with
    ``method`` ("ar", "sjd", "sjd_pac", "speculative" with ``drafter=`` a draft causal LM of the
    same vocabulary; the method's options, e.g. ``window=16`` or ``tree=None, num_draft=4``, as
    keywords).
    ``model``: a transformers causal LM (or an ``HFModel``).  ``eos_token_id`` / ``pad_token_id``
    default to the model's generation config (pad: EOS when it has none).  ``allowed_tokens``
    restricts sampling to those token ids (``HFModel``; e.g. Chameleon's image vocabulary).
    ``cfg_scale``: classifier-free guidance, logits uncond + s (cond - uncond), the uncond rows
    reading ``negative_input_ids`` [B, P'] (with ``negative_attention_mask``), by default each
    prompt's last token (transformers' ``guidance_scale`` / ``negative_prompt_ids``).
    ``progress(counts [B], length)``: called once per step with the tokens emitted so far per
    request (``specops.decode.progress``; at the loop's stop check, no extra host read); without
    it, the hook of an enclosing ``with specops.decode.progress(hook):`` block is called.
    ``streamer``: a transformers streamer (``put`` / ``end``, e.g. ``TextStreamer``), batch 1
    as in transformers: it gets the prompt, then the tokens each step commits, up to the first
    EOS (one [1, T] copy to the host per step).
    ``prefill_inputs``: extra inputs of the prompt's forward, e.g. ``{"pixel_values": ...}``
    for a VLM (LLaVA).  ``image_head=True``: Janus image generation (the new tokens are VQ codes
    from its image-generation head; ``HFModel``).  ``layout``: a ``GridLayout`` the new tokens
    follow (image tokens only, forced row ends: Emu3, Lumina-mGPT).  ``attention_mask`` [B, P]:
    0 marks padding (left padding as transformers pads prompts of different lengths; the output
    keeps ``input_ids`` as given, as transformers returns it).
    -> (sequences [B, P + T] int64, ``specops.decode.Stats``)."""
    if cfg_scale is not None and prefill_inputs:
        raise ValueError(
            "specops.hf.generate: cfg_scale with prefill_inputs is not supported (the uncond "
            "rows would need their own image inputs)"
        )
    ad = _adapter(model, allowed_tokens, prefill_inputs, image_head, layout)
    ids = _check_ids(input_ids, ad.prompt_vocab, ad.device)
    prompts = _prompts(ids, attention_mask)
    _check_range(prompts, ad.prompt_vocab, "input_ids")
    ad.negative_prompt = _negative(
        prompts, cfg_scale, negative_input_ids, negative_attention_mask, ad.prompt_vocab, ad.device
    )
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral):
        raise TypeError(
            f"specops.hf.generate: max_new_tokens must be an int, got {max_new_tokens!r}"
        )
    if max_new_tokens < 1:
        raise ValueError(f"specops.hf.generate: max_new_tokens must be >= 1, got {max_new_tokens}")
    fn = _method(method, method_options, drafter)
    models = (ad,)
    if drafter is not None:  # a standalone draft model: speculative(model, drafter, prompts, ...)
        drafter = drafter if isinstance(drafter, HFDrafter) else HFDrafter(drafter)
        check_drafter(drafter, ad)
        models = (ad, drafter)
    eos = _eos_ids(eos_token_id, ad)
    ad.eos_token_ids = torch.tensor(eos, device=ad.device) if eos else None
    hook, with_tokens = _hooks(progress, streamer, ids, eos)
    with decode.progress(hook, tokens=with_tokens):
        toks, stats = fn(
            *models,
            prompts,
            length=int(max_new_tokens),
            temperature=temperature if do_sample else 0.0,
            top_k=top_k,
            top_p=top_p,
            cfg_scale=cfg_scale,
            seed=seed,
            **method_options,
        )
    if streamer is not None:
        streamer.end()
    seqs = torch.cat([ids, toks.long()], 1)
    if pad_token_id is None:
        pad_token_id = getattr(ad.hf.generation_config, "pad_token_id", None)
    if pad_token_id is None:
        pad_token_id = eos[0] if eos else 0
    return apply_eos(seqs, ids.shape[1], eos, int(pad_token_id)), stats

"""``HFModel``: a transformers causal LM in the model protocol of ``specops.decode``.

    model = HFModel(hf_model)
    cache = model.new_cache(batch, capacity)     # SpecopsCache: .kv [L, 2, B, S, Hkv, D], .seqlens
    logits, hidden = model(tokens [B, N], positions [B, N], cache, tree=None)

One call is one forward of the whole transformers model with the decoder's attention switched
to ``"specops_tree"``: logits therefore get whatever the model's own forward does to them
(Chameleon's image-token mask, logit scaling or soft-capping), and ``hidden`` is the decoder's
last hidden state (after the final norm, logits = lm_head(hidden)), taken by a forward hook on
the decoder: ``output_hidden_states`` is never asked for.  How each protocol requirement is met
(the call's keywords, the hook's registration): docs/protocols.md, "Worked example: a
transformers model".
"""

from __future__ import annotations

import inspect

import torch

from specops.hf.attention import decoder_config, use_tree_attention
from specops.hf.cache import SpecopsCache
from specops.tree import call_bits

__all__ = ["HFModel"]


def _check_model(hf_model) -> None:
    from transformers import PreTrainedModel

    if not isinstance(hf_model, PreTrainedModel):
        raise TypeError(
            f"specops.hf.HFModel: hf_model must be a transformers PreTrainedModel, got "
            f"{type(hf_model).__name__}"
        )
    if hf_model.get_output_embeddings() is None:
        raise ValueError(
            f"specops.hf.HFModel: hf_model must be a causal LM with an output head (e.g. "
            f"LlamaForCausalLM), got {type(hf_model).__name__}"
        )
    dec = hf_model.get_decoder()
    if not (
        getattr(hf_model, "_supports_attention_backend", False)
        or getattr(dec, "_supports_attention_backend", False)
    ):
        raise ValueError(
            f"specops.hf.HFModel: {type(hf_model).__name__} does not route its attention through "
            "transformers' AttentionInterface, so specops cannot run tree attention inside it"
        )
    cfg = decoder_config(hf_model)
    types = getattr(cfg, "layer_types", None)  # the authority where the config has it (Qwen2
    if types is None:  # keeps a sliding_window it does not use)
        sliding = getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True)
        types = ["sliding_attention" if sliding else "full_attention"]
    if set(types) != {"full_attention"}:
        raise ValueError(
            f"specops.hf.HFModel: only full-attention decoders are supported, "
            f"{type(hf_model).__name__} has layer types {sorted(set(types))} "
            f"(sliding_window={getattr(cfg, 'sliding_window', None)})"
        )


def _takes(forward, name: str) -> bool:
    try:
        return name in inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return False


def cache_keyword(forward) -> str:
    """The keyword a transformers forward takes its ``Cache`` by: ``cache`` where it has one
    (transformers 5.24: ``past_key_values`` is deprecated there, to be removed in 5.40), else
    ``past_key_values`` (4.57 and the 5.x before the rename)."""
    return "cache" if _takes(forward, "cache") else "past_key_values"


class _LastHidden:
    """The decoder's forward hook: keeps its output's last hidden state while ``on``."""

    def __init__(self):
        self.on, self.value = False, None

    def __call__(self, module, args, out):
        if self.on:
            self.value = out[0]


def _last_hidden(decoder) -> _LastHidden:
    """The decoder's one ``_LastHidden`` hook, registered the first time (registering a hook
    inside a call is something Dynamo cannot trace, and one per call would pile up)."""
    slot = decoder.__dict__.get("_specops_last_hidden")
    if slot is None:
        slot = _LastHidden()
        decoder.register_forward_hook(slot)
        decoder.__dict__["_specops_last_hidden"] = slot
    return slot


def _image_head(hf_model):
    """(embedding, head) of an image-generation head (Janus), or a ValueError."""
    embed = getattr(hf_model, "prepare_embeddings_for_image_generation", None)
    head = getattr(getattr(hf_model, "model", None), "generation_head", None)
    if embed is None or head is None:
        raise ValueError(
            f"specops.hf.HFModel: image_head=True needs a model with an image-generation head "
            f"(prepare_embeddings_for_image_generation, model.generation_head: Janus), got "
            f"{type(hf_model).__name__}"
        )
    return embed, head


class HFModel:
    """Adapter; ``hf_model`` is put in eval mode.  ``cfg`` is None: no class-token prompts (pass
    prompts as token ids [B, P]).

    ``allowed_tokens`` (token ids, or a bool mask [V]) restricts every distribution to those
    tokens (logits of the others -inf), e.g. Chameleon's image vocabulary for image generation as
    Lumina-mGPT samples it.  Then the logits are ``lm_head(hidden)`` of the decoder, without the
    causal LM's own logit processing (Chameleon's forward forbids every image token).

    ``prefill_inputs``: extra keyword inputs of the model's forward for the first call only (the
    prefill), e.g. ``pixel_values`` of a VLM such as LLaVA, whose image features replace the
    prompt's image tokens; later calls feed token ids only.

    ``negative_prompt`` [B, P'] (token ids, -1 padded on the right): the unconditional prompt of
    classifier-free guidance, handed to the loop by ``uncond_prompt``.

    ``image_head=True`` (Janus): the prompt is read as text, every later token is an image token
    fed through the model's image-generation embedding
    (``prepare_embeddings_for_image_generation``) and every distribution comes from its
    ``generation_head`` over the VQ codebook (vocabulary = the codebook's size).

    ``layout`` (a ``specops.hf.GridLayout``): the tokens after each prompt are an image of that
    layout (Emu3, Lumina-mGPT: image tokens only, a forced row end after each row); each row's
    image starts after its own prompt (CFG's uncond rows after theirs)."""

    cfg = None

    def __init__(
        self, hf_model, *, allowed_tokens=None, prefill_inputs=None, negative_prompt=None,
        image_head: bool = False, layout=None,
    ):  # fmt: skip
        _check_model(hf_model)
        self.hf = hf_model.eval()
        c = decoder_config(hf_model)
        self.layers = c.num_hidden_layers
        self.heads = c.num_attention_heads
        self.kv_heads = getattr(c, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // self.heads
        self.head = hf_model.get_output_embeddings()
        self.vocab = self.prompt_vocab = self.head.out_features  # prompts: text tokens
        self.decoder = hf_model.get_decoder()
        self.hidden_hook = _last_hidden(self.decoder)
        self.cache_kw = cache_keyword(hf_model.forward)  # hf_model(...)'s
        self.decoder_cache_kw = cache_keyword(self.decoder.forward)  # the decoder's, direct calls
        self.embed = None  # the embedding of tokens after the prefill, when not the text one
        self.image_head = image_head
        if image_head:
            self.embed, self.head = _image_head(hf_model)
            self.vocab = hf_model.config.vq_config.num_embeddings
        self.layout = layout
        self.start = None  # [R] the position of each row's first generated token (the prefill's)
        # decoder + head, not hf_model(): the model's own logit processing is replaced
        self.direct = image_head or allowed_tokens is not None or layout is not None
        # transformers < 5.24 derives cache_position from the cache's length (a tensor here: an
        # arange with data-dependent bounds, which torch.compile cannot trace): pass it
        called = self.decoder if self.direct else hf_model
        self.cache_position = _takes(called.forward, "cache_position")
        self.allowed_tokens = allowed_tokens
        self.blocked = None if allowed_tokens is None else ~self._mask(allowed_tokens)
        self.negative_prompt = negative_prompt
        self.eos_token_ids = None  # set by generate: the loop stops a request at its first EOS
        self.pending = dict(prefill_inputs or {})
        if self.pending and self.direct:
            raise ValueError(
                "specops.hf.HFModel: prefill_inputs with allowed_tokens, layout or image_head is "
                "not supported (they run the decoder alone, which takes no image inputs)"
            )
        self._prefilled = False

    def _mask(self, allowed) -> torch.Tensor:
        a = torch.as_tensor(allowed, device=self.device)
        if a.dtype == torch.bool:
            if tuple(a.shape) != (self.vocab,):
                raise ValueError(
                    f"specops.hf.HFModel: allowed_tokens as a mask must have shape "
                    f"[{self.vocab}], got {tuple(a.shape)}"
                )
            mask = a
        else:
            if a.dim() != 1 or a.numel() == 0 or a.dtype.is_floating_point:
                raise ValueError(
                    f"specops.hf.HFModel: allowed_tokens must be a non-empty list of token ids "
                    f"or a bool mask [{self.vocab}], got {a.dtype} of shape {tuple(a.shape)}"
                )
            if bool(((a < 0) | (a >= self.vocab)).any()):
                raise ValueError(
                    f"specops.hf.HFModel: allowed_tokens must lie in [0, {self.vocab})"
                )
            mask = torch.zeros(self.vocab, dtype=torch.bool, device=self.device)
            mask[a.long()] = True
        if not bool(mask.any()):
            raise ValueError("specops.hf.HFModel: allowed_tokens allows no token")
        return mask

    def uncond_prompt(self, prompt: torch.Tensor) -> torch.Tensor | None:
        """The loop's unconditional prompt under CFG (``TargetRunner``): the negative prompt."""
        return self.negative_prompt

    @property
    def device(self) -> torch.device:
        return self.hf.device

    @property
    def dtype(self) -> torch.dtype:
        return self.hf.dtype

    def new_cache(self, batch: int, capacity: int, *, dtype=None, device=None) -> SpecopsCache:
        self._prefilled, self.start = False, None  # a new run: its first call is its prefill
        return SpecopsCache(
            self.layers, batch, capacity, self.kv_heads, self.head_dim,
            dtype=dtype or self.dtype, device=device or self.device,
        )  # fmt: skip

    @torch.no_grad()
    def __call__(self, tokens, positions, cache: SpecopsCache, tree=None, *, n_old: int = 0):
        """tokens, positions [B, N]; tree: None (a causal chain), a Tree, or mask_bits
        [B, N, ceil(N/32)].  -> (logits [B, N, V], hidden [B, N, H]).  Token -1 marks a padding
        node (fed as token 0; its outputs are never used).  ``n_old`` > 0 (drafting a tree one
        depth at a time): the tokens are tree slots n_old .. of a tree whose first n_old slots
        were written by earlier calls; ``tree`` then covers all n_old + N slots."""
        b, n = tokens.shape
        if not isinstance(cache, SpecopsCache):
            raise TypeError(
                f"specops.hf.HFModel: cache must come from new_cache(), got {type(cache).__name__}"
            )
        bits = call_bits(tree, b, n, tokens.device)
        args = dict(
            input_ids=tokens.long().clamp(min=0),
            position_ids=positions.long(),
            use_cache=True,
            specops_tree=(bits, cache.seqlens, n_old),
        )
        if self.cache_position:  # what transformers computes: the longest row's length + n
            args["cache_position"] = cache.seqlens.max().long() + torch.arange(
                n, device=tokens.device
            )
        args.update(self.pending)  # the prefill's extra inputs, once
        self.pending = {}
        if self.embed is not None and self._prefilled:  # image tokens after the text prompt
            args["inputs_embeds"] = self.embed(args.pop("input_ids"))
        if not self._prefilled:  # the prompt (-1 padded on the right): the image starts after it
            self.start = (tokens >= 0).sum(1)
        self._prefilled = True
        cache.offset = n_old
        try:
            return self._forward(args, cache)
        finally:
            cache.offset = 0

    def _forward(self, args, cache):
        with use_tree_attention(self.hf):
            if self.direct:
                hidden = self.decoder(**args, **{self.decoder_cache_kw: cache})[0]
                logits = self.head(hidden)
                if self.blocked is not None:
                    logits = logits.masked_fill(self.blocked, float("-inf"))
                if self.layout is not None:
                    logits = self.layout.mask(logits, args["position_ids"], self.start)
                return logits, hidden
            hook = self.hidden_hook  # the decoder's last hidden state, kept during this call
            hook.on, hook.value = True, None
            try:
                logits = self.hf(**args, **{self.cache_kw: cache}).logits
                hidden = hook.value
            finally:
                hook.on, hook.value = False, None
        return logits, hidden

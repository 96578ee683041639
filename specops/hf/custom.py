"""The loop behind ``hf_model.generate(..., custom_generate=specops.hf.custom_generate)``.

transformers prepares the inputs and the generation config, then calls a callable
``custom_generate`` in place of its own decoding loop (``generate(custom_generate=fn)``), with
the keyword arguments of ``generate`` that ``fn`` names and transformers' ``_sample`` does not::

    out = hf_model.generate(input_ids, attention_mask=mask, max_new_tokens=64, do_sample=False,
                            custom_generate=specops.hf.custom_generate,
                            specops_method="sjd", specops_options={"window": 8})

Sampling settings come from the generation config (do_sample, temperature, top_k, top_p,
eos_token_id, pad_token_id, max_new_tokens); a logits processor that specops does not apply
itself is an error rather than silently ignored.  Returns the sequences tensor (no
``return_dict_in_generate``).  More: docs/protocols.md, "Worked example: a transformers model".
"""

from __future__ import annotations

import torch

from specops.hf.generate import generate

__all__ = ["custom_generate"]

_SPECOPS_APPLIES = ("TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper")


def _check_processors(logits_processor, stopping_criteria, streamer) -> None:
    other = [type(p).__name__ for p in (logits_processor or [])]
    other = [n for n in other if n not in _SPECOPS_APPLIES]
    if other:
        raise ValueError(
            f"specops.hf.custom_generate: the generation config asks for logits processors that "
            f"specops does not apply: {other} (only temperature, top_k and top_p are)"
        )
    crit = [type(c).__name__ for c in (stopping_criteria or [])]
    crit = [n for n in crit if n not in ("MaxLengthCriteria", "EosTokenCriteria")]
    if crit:
        raise ValueError(
            f"specops.hf.custom_generate: stopping criteria other than max length and EOS are not "
            f"supported, got {crit}"
        )
    if streamer is not None:
        raise ValueError("specops.hf.custom_generate: streamer is not supported yet")


def custom_generate(
    model,
    input_ids: torch.Tensor,
    logits_processor=None,
    stopping_criteria=None,
    generation_config=None,
    synced_gpus: bool = False,
    streamer=None,
    specops_method: str = "sjd_pac",
    specops_seed: int = 0,
    specops_options: dict | None = None,
    **model_kwargs,
) -> torch.Tensor:
    """transformers' ``custom_generate`` entry point: ``specops.hf.generate`` with the
    prepared generation config.  ``specops_method`` / ``specops_seed`` / ``specops_options``
    (the method's options, e.g. ``{"window": 16}``) are passed to ``hf_model.generate``."""
    _check_processors(logits_processor, stopping_criteria, streamer)
    gc = generation_config
    p = input_ids.shape[1]
    new = gc.max_new_tokens if gc.max_new_tokens is not None else gc.max_length - p
    eos = gc.eos_token_id
    seqs, _ = generate(
        model,
        input_ids,
        method=specops_method,
        max_new_tokens=new,
        attention_mask=model_kwargs.get("attention_mask"),
        do_sample=bool(gc.do_sample),
        temperature=1.0 if gc.temperature is None else gc.temperature,
        top_k=gc.top_k or None,
        top_p=gc.top_p if gc.top_p is not None and gc.top_p < 1.0 else None,
        eos_token_id=[] if eos is None else eos,
        pad_token_id=gc.pad_token_id,
        seed=specops_seed,
        **(specops_options or {}),
    )
    return seqs

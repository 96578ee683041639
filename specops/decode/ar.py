"""Plain autoregressive decoding: one target pass per token (the baseline)."""

from __future__ import annotations

import torch

import specops
from specops.decode._common import prompt_tokens, start

__all__ = ["ar"]


@torch.no_grad()
def ar(
    model,
    classes,
    *,
    length: int | None = None,
    temperature: float = 1.0,
    top_k=None,
    top_p=None,
    cfg_scale=None,
    seed: int = 0,
):
    """Sample ``length`` tokens after each prompt: x_{t+1} ~ p(. | x_<=t), one pass each.
    ``temperature=0`` is greedy.  -> (tokens [B, length] int32, Stats)."""
    prompt = prompt_tokens(model, classes)
    dev = prompt.device
    b = prompt.shape[0]
    length = length or model.cfg.grid**2
    sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p)
    rec, rng, tgt, out, _ = start(
        "ar", model, prompt, length, width=1, slack=1, cfg_scale=cfg_scale, sampling=sampling,
        out_slack=0,
    )  # fmt: skip
    ones = torch.ones(b, dtype=torch.bool, device=dev)
    slot0 = torch.zeros(b, 1, dtype=torch.int32, device=dev)

    probs, _ = tgt.prefill()  # p(x_1 | prompt)
    for i in range(length):
        with rec.timer("specops"):
            tok = specops.sample(probs, seed=seed, offset=rng())  # x ~ p (argmax at T = 0)
        out.write(tok[:, None], ones.long())
        rec.emitted(ones.long(), ones)
        out.report()
        if i == length - 1:
            break
        # feed x at position c = seqlens, then commit it (slot 0)
        probs, _ = tgt.forward(tok[:, None], tgt.seqlens.long()[:, None], None, charged=ones)
        probs = probs[:, 0]
        tgt.commit(slot0)
    return out.tokens(), rec.finish()

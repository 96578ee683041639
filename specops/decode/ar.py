"""Plain autoregressive decoding: one target pass per token (the baseline)."""

from __future__ import annotations

import torch

import specops
from specops.decode._common import Offsets, Output, TargetRunner, prompt_tokens
from specops.decode.stats import Recorder

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
    rec = Recorder("ar", b, length, 1, dev)
    rng = Offsets()
    rec.timer.start()
    tgt = TargetRunner(
        model,
        prompt,
        capacity=prompt.shape[1] + length + 1,
        rec=rec,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        cfg_scale=cfg_scale,
    )
    out = Output(b, length, 0, dev)
    ones = torch.ones(b, dtype=torch.bool, device=dev)
    slot0 = torch.zeros(b, 1, dtype=torch.int32, device=dev)

    probs, _ = tgt.prefill()  # p(x_1 | prompt)
    for i in range(length):
        with rec.timer("specops"):
            tok = specops.sample(probs, seed=seed, offset=rng())  # x ~ p (argmax at T = 0)
        out.write(tok[:, None], ones.long())
        rec.emitted(ones.long(), ones)
        if i == length - 1:
            break
        # feed x at position c = seqlens, then commit it (slot 0)
        probs, _ = tgt.forward(tok[:, None], tgt.seqlens.long()[:, None], None, charged=ones)
        probs = probs[:, 0]
        tgt.commit(slot0)
    return out.tokens(), rec.finish()

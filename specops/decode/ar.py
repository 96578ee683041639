"""Plain autoregressive decoding: one target pass per token (the baseline)."""

from __future__ import annotations

import torch

import specops
from specops._nvtx import nvtx_range
from specops.decode._checks import prepare
from specops.decode._loop import compiled_step, start
from specops.decode.sampling import Sampling

__all__ = ["ar"]


@torch.no_grad()
def ar(
    model,
    classes,
    *,
    length: int | None = None,
    compile_step=None,
    **sampling_kwargs,
):
    """Sample ``length`` tokens after each prompt: x_{t+1} ~ p(. | x_<=t), one pass each.
    ``sampling_kwargs``: the ``Sampling`` settings (temperature, top_k, top_p, cfg_scale, seed);
    ``temperature=0`` is greedy.  ``compile_step``: see ``specops.decode.compiled_step``.
    -> (tokens [B, length] int32, Stats)."""
    sampling = Sampling.of("ar", sampling_kwargs)
    prompt, length = prepare("ar", model, classes, length)
    dev = prompt.device
    b = prompt.shape[0]
    rec, rng, tgt, out, _ = start(
        "ar", model, prompt, length, sampling, width=1, slack=1, out_slack=0
    )
    slot0 = torch.zeros(b, 1, dtype=torch.int32, device=dev)

    def emit(probs):
        active = out.active  # all True unless a request stopped at EOS
        with rec.timer("specops"):
            tok = specops.sample(probs, seed=sampling.seed, offset=rng())  # x ~ p (T = 0: argmax)
        out.write(tok[:, None], active.long())
        rec.emitted(active.long(), active)
        return tok

    def step(tok):
        # feed x at position c = seqlens, commit it (slot 0), emit the next token
        probs, _ = tgt.forward(tok[:, None], tgt.seqlens.long()[:, None], None, charged=out.active)
        tgt.commit(slot0)
        return emit(probs[:, 0])

    step = compiled_step(step, compile_step)
    with nvtx_range("ar.prefill"):
        tok = emit(tgt.prefill()[0])  # x_1 ~ p(x_1 | prompt)
    for _ in range(length - 1):
        if out.eos is None:
            out.report()
        elif out.done():  # with EOS: the stop check, one host read per step
            break
        with nvtx_range("ar.step"):
            tok = step(tok)
    else:  # the last token's progress report (a stop check above has made it otherwise)
        out.report()
    return out.tokens(), rec.finish()

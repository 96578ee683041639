"""Plain autoregressive decoding: one target pass per token (the baseline)."""

from __future__ import annotations

import torch

import specops
from specops.decode._checks import prepare
from specops.decode._loop import begin, commit, finish, prefill, run_steps
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
    run = begin("ar", model, prompt, length, sampling, width=1, slack=1, out_slack=0)
    rec, rng, tgt, out = run.rec, run.rng, run.tgt, run.out
    slot0 = torch.zeros(prompt.shape[0], 1, dtype=torch.int32, device=prompt.device)

    def step(tok):
        # feed x at position c = seqlens, commit it (slot 0), emit the next token
        active = out.active  # all True unless a request stopped at EOS
        probs, _ = tgt.forward(tok[:, None], tgt.seqlens.long()[:, None], None, charged=active)
        with rec.timer("specops"):  # x ~ p (T = 0: argmax)
            nxt = specops.sample(probs[:, 0], seed=sampling.seed, offset=rng())
        commit(run, slot0, nxt[:, None], active.long(), active)
        return (nxt,)

    tok, _ = prefill(run)  # x_1 ~ p(x_1 | prompt)
    run_steps(run, step, (tok,), compile_step=compile_step, until=length - 1)
    return finish(run)

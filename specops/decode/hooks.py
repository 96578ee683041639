"""The decoding loop's hooks: ``progress``, a per-step progress / streaming hook for every method.

    with specops.decode.progress(lambda counts, length: print(counts.tolist(), length)):
        tokens, stats = sjd_pac(model, classes)

The hook gets ``counts`` [B] (int64, on the host: tokens emitted so far per request, may exceed
``length`` by a step's overshoot) and the target ``length``, once per step, at the loop's stop
check, so it adds no host read to a loop that has one (speculative, SJD, SJD-PAC, VVS); AR reads
the counts only while a hook is set.  ``progress(hook, tokens=True)`` also hands it the tokens
emitted so far (one [B, length] copy to the host per step, only then): a streamer prints
``emitted[b, seen_b:counts[b]]`` as they come.  Hooks nest (the innermost is called) and are per
thread / task (a context variable); ``specops.hf.generate`` without ``progress=`` keeps the
enclosing block's hook (``specops.imagegen.generate_image`` and ``specops generate`` set theirs
around it)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable

Hook = Callable[..., None]
# (hook, with_tokens) of the innermost `progress` block, or None
_HOOK: contextvars.ContextVar[tuple[Hook, bool] | None] = contextvars.ContextVar(
    "specops_progress", default=None
)

__all__ = ["progress", "current_hook"]


@contextlib.contextmanager
def progress(hook: Hook | None, *, tokens: bool = False):
    """Call ``hook(counts, length)`` once per step of every decoding run inside the block; with
    ``tokens=True``, ``hook(counts, length, emitted)`` where ``emitted`` [B, length] int32 (host)
    holds each request's tokens so far (its first ``min(counts[b], length)`` entries; -1 after,
    and after an EOS anything): a streamer.  ``hook=None`` turns an outer hook off."""
    token = _HOOK.set(None if hook is None else (hook, tokens))
    try:
        yield hook
    finally:
        _HOOK.reset(token)


def current_hook() -> tuple[Hook, bool] | None:
    return _HOOK.get()

"""A progress / streaming hook for every decoding method.

    with specops.decode.progress(lambda counts, length: print(counts.tolist(), length)):
        tokens, stats = sjd_pac(model, classes)

The hook gets ``counts`` [B] (int64, on the host: tokens emitted so far per request, may exceed
``length`` by a step's overshoot) and the target ``length``, once per step, at the loop's stop
check, so it adds no host read to a loop that has one (speculative, SJD, SJD-PAC, VVS); AR reads
the counts only while a hook is set.  The tokens emitted so far are the run's output buffer,
which a streamer can read between calls.  Hooks nest (the innermost is called) and are per
thread / task (a context variable)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable

import torch

Hook = Callable[[torch.Tensor, int], None]
_HOOK: contextvars.ContextVar[Hook | None] = contextvars.ContextVar(
    "specops_progress", default=None
)

__all__ = ["progress", "current_hook"]


@contextlib.contextmanager
def progress(hook: Hook | None):
    token = _HOOK.set(hook)
    try:
        yield hook
    finally:
        _HOOK.reset(token)


def current_hook() -> Hook | None:
    return _HOOK.get()

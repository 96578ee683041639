"""Per-run statistics of a decoding method, and the timer that splits wall time.

Step compression (SJD-PAC Sec. 5.1; VVS calls it TPF) = generated tokens / target forward passes,
per request: a request is charged one pass for every target pass it took part in (was still
generating, and -- VVS -- did not skip verification in it).  The prefill pass counts, so plain
AR decoding of T tokens has step compression exactly 1.  ``target_passes`` /
``batch_step_compression`` count the batched passes that actually ran.  Wall time is split into
``model`` / ``specops`` / ``other`` without host syncs inside the loop.

The full definitions (ride-along passes, how time is measured on CPU and CUDA):
docs/decoding.md, "Statistics".
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import torch

__all__ = ["Stats", "Timer"]


class Timer:
    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"
        self.totals = {"model": 0.0, "specops": 0.0}
        self._events: list = []
        self._t0 = None

    def start(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
        self._t0 = time.perf_counter()

    @contextlib.contextmanager
    def __call__(self, kind: str):
        if torch.compiler.is_compiling():  # a compiled step is timed as a whole (wall time)
            yield
            return
        if self.cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            yield
            e.record()
            self._events.append((kind, s, e))
        else:
            t = time.perf_counter()
            yield
            self.totals[kind] += time.perf_counter() - t

    def stop(self) -> float:
        """Wall seconds since start(); resolves the CUDA events (the run's one final sync)."""
        if self.cuda:
            torch.cuda.synchronize()
            for kind, s, e in self._events:
                self.totals[kind] += s.elapsed_time(e) / 1e3
            self._events.clear()
        return time.perf_counter() - self._t0


@dataclass
class Stats:
    method: str
    batch: int
    tokens: int  # tokens generated per request
    target_passes: int = 0  # batched target forward passes run
    drafter_passes: int = 0  # batched drafter forward passes run
    passes_per_request: list = field(default_factory=list)  # target passes charged to each request
    accept_hist: list = field(default_factory=list)  # accept_hist[n] = steps that emitted n tokens
    wall_s: float = 0.0
    model_s: float = 0.0
    specops_s: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def step_compression(self) -> float:
        """Generated tokens / target passes, summed over the requests."""
        return self.tokens * self.batch / max(sum(self.passes_per_request), 1)

    @property
    def batch_step_compression(self) -> float:
        """Tokens per request / batched target passes run (the batch's own cost)."""
        return self.tokens / max(self.target_passes, 1)

    @property
    def mean_passes(self) -> float:
        return sum(self.passes_per_request) / max(len(self.passes_per_request), 1)

    @property
    def mean_accepted(self) -> float:
        """Mean tokens emitted per step that ran a target pass for the request (incl. bonus)."""
        steps = sum(self.accept_hist)
        return sum(n * c for n, c in enumerate(self.accept_hist)) / max(steps, 1)

    @property
    def other_s(self) -> float:
        return max(self.wall_s - self.model_s - self.specops_s, 0.0)

    @property
    def specops_share(self) -> float:
        return self.specops_s / self.wall_s if self.wall_s > 0 else 0.0

    def row(self) -> dict:
        return {
            "method": self.method,
            "step_compression": round(self.step_compression, 3),
            "target_passes": round(self.mean_passes, 1),
            "batched_passes": self.target_passes,
            "batch_step_compression": round(self.batch_step_compression, 3),
            "wall_s": round(self.wall_s, 3),
            "model_s": round(self.model_s, 3),
            "specops_s": round(self.specops_s, 3),
            "specops_share": round(self.specops_share, 3),
        }

    def __str__(self) -> str:
        r = self.row()
        return (
            f"{r['method']}: step compression {r['step_compression']:.2f}, "
            f"{r['target_passes']:.1f} target passes/request, {r['batched_passes']} batched "
            f"passes, wall {r['wall_s']:.2f}s "
            f"(model {r['model_s']:.2f}s, specops {r['specops_s']:.2f}s)"
        )


class Recorder:
    """Device-side counters updated every step without a sync; folded into Stats at the end."""

    def __init__(self, method: str, batch: int, tokens: int, max_emit: int, device):
        self.stats = Stats(method, batch, tokens)
        self.timer = Timer(device)
        self.passes = torch.zeros(batch, dtype=torch.int64, device=device)
        self.hist = torch.zeros(max_emit + 2, dtype=torch.int64, device=device)
        # batched target / drafter passes: device counters too, so a compiled step reads no
        # Python int it would have to specialise on (a recompile per step)
        self.batched = torch.zeros(2, dtype=torch.int64, device=device)

    def target_pass(self, charged: torch.Tensor) -> None:
        """One batched target pass; ``charged`` [B] bool: the requests it counts for."""
        self.batched[0] += 1
        self.passes += charged.long()

    def drafter_pass(self) -> None:
        """One batched drafter pass."""
        self.batched[1] += 1

    def emitted(self, n: torch.Tensor, charged: torch.Tensor) -> None:
        """Histogram of the tokens emitted by this step, over the charged requests."""
        idx = n.long().clamp(0, self.hist.numel() - 1)
        self.hist.index_add_(0, idx, charged.long())

    def finish(self) -> Stats:
        s = self.stats
        s.wall_s = self.timer.stop()
        s.model_s = self.timer.totals["model"]
        s.specops_s = self.timer.totals["specops"]
        s.passes_per_request = self.passes.tolist()
        s.target_passes, s.drafter_passes = (int(x) for x in self.batched.tolist())
        hist = self.hist.tolist()
        while len(hist) > 1 and hist[-1] == 0:
            hist.pop()
        s.accept_hist = hist
        return s

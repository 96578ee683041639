"""Progress for long runs (demo, benchmarks, training): one status line on stderr, rewritten in
place, shown only on a terminal.  ``SPECOPS_PROGRESS=1`` forces it on (e.g. into a log), ``=0``
off.  No dependency (tqdm is not needed)."""

from __future__ import annotations

import os
import sys
import time


def _enabled(stream) -> bool:
    forced = os.environ.get("SPECOPS_PROGRESS")
    if forced in ("0", "1"):
        return forced == "1"
    return bool(getattr(stream, "isatty", lambda: False)())


class Progress:
    """``label  done/total unit  rate  note``, at most ``hz`` redraws a second."""

    def __init__(self, label: str, total: int, *, unit: str = "", stream=None, hz: float = 8.0):
        self.label, self.total, self.unit = label, total, unit
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _enabled(self.stream)
        self.period = 1.0 / hz
        self.t0 = self.last = time.perf_counter()
        self.width = 0

    def update(self, done: int, note: str = "", *, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self.last < self.period and done < self.total:
            return
        self.last = now
        rate = done / max(now - self.t0, 1e-9)
        line = f"{self.label}  {done}/{self.total} {self.unit}  {rate:.1f} {self.unit}/s  {note}"
        line = line.rstrip()
        self.stream.write("\r" + line.ljust(self.width))
        self.stream.flush()
        self.width = len(line)

    def clear(self) -> None:
        """Erase the line (before printing a result, so the two do not mix)."""
        if self.enabled and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0

    def close(self) -> None:
        self.clear()

    def tokens(self, label: str):
        """A callback for ``specops.decode.progress``: counts [B] (host int64) and the target
        length -> this line shows tokens emitted over all requests (rate counted from now)."""
        self.t0 = time.perf_counter()

        def hook(counts, length: int) -> None:
            self.total = int(length) * len(counts)
            self.update(int(counts.clamp(max=length).sum()), note=label)

        return hook

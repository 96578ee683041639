"""What every ``specops`` command checks before any work (``specops demo``, ``generate``,
``bench``): a bad value is one line on stderr, ``specops <cmd>: error: ...`` naming it, exit
status 2, before a model is loaded or a file is written."""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from pathlib import Path


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with an error as the one line ``PROG: error: MESSAGE`` (no usage block), and
    no abbreviated options: a mistyped ``--batch`` is an error, never ``--batch1``."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def int_in(lo: int, hi: int | None = None):
    """An argparse ``type=``: an int in [lo, hi] (hi None: no bound)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an int, got {text!r}") from None
        if value < lo or (hi is not None and value > hi):
            want = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
            raise argparse.ArgumentTypeError(f"must be an int {want}, got {text}")
        return value

    return parse


SEED = int_in(0, 2**63 - 1)  # specops' seeds are int64 (Philox reads the 64 bits)


def float_in(lo: float, *, open_lo: bool = False, hi: float | None = None):
    """An argparse ``type=``: a finite float >= lo (> lo with ``open_lo``), <= hi."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        low = value > lo if open_lo else value >= lo
        if not math.isfinite(value) or not low or (hi is not None and value > hi):
            want = f"{'>' if open_lo else '>='} {lo:g}" + ("" if hi is None else f" and <= {hi:g}")
            raise argparse.ArgumentTypeError(f"must be a finite number {want}, got {text}")
        return value

    return parse


def device_arg(auto: bool = False):
    """An argparse ``type=``: ``cpu``, ``cuda`` or ``cuda:N`` that this machine has (``auto``
    too when allowed: cuda when present, else cpu)."""

    def parse(text: str) -> str:
        import torch

        if auto and text == "auto":
            return text
        kinds = ("auto, " if auto else "") + "cpu, cuda or cuda:N"
        try:
            dev = torch.device(text)
        except (RuntimeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected {kinds}, got {text!r}") from None
        if dev.type not in ("cpu", "cuda") or (dev.type == "cpu" and dev.index not in (None, 0)):
            raise argparse.ArgumentTypeError(f"expected {kinds}, got {text!r}")
        if dev.type == "cuda":
            if not torch.cuda.is_available():
                raise argparse.ArgumentTypeError(f"{text!r}, but this machine has no CUDA GPU")
            if dev.index is not None and dev.index >= torch.cuda.device_count():
                n = torch.cuda.device_count()
                raise argparse.ArgumentTypeError(f"{text!r}, but this machine has {n} CUDA GPU(s)")
        return text

    return parse


def check_writable(path, *, directory: bool = False) -> str | None:
    """Why ``path`` cannot be written as a file (``directory``: made as a directory), its missing
    parents created on the way, or None when it can.  Creates nothing: the nearest existing
    ancestor is probed with a temporary directory that is removed at once."""
    p = Path(path)
    try:
        if p.exists():
            if directory and not p.is_dir():
                return f"{path} is a file, not a directory"
            if not directory and p.is_dir():
                return f"{path} is a directory"
            if not directory:
                return None if os.access(p, os.W_OK) else f"{path} is not writable"
        ancestor = p if p.exists() else p.absolute().parent
        while not ancestor.exists():
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            return f"{ancestor} is a file, so {path} cannot be made under it"
    except OSError as e:  # e.g. a parent we may not search
        return f"cannot reach {path} ({e.strerror or e})"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"cannot write into {ancestor}"
    try:  # root passes os.access on read-only places (/proc, a read-only mount): try it
        os.rmdir(tempfile.mkdtemp(prefix=".specops-probe-", dir=ancestor))
    except OSError as e:
        return f"cannot write into {ancestor} ({e.strerror or e})"
    return None


def check_out_path(flag: str, path, *, suffix: str | None = None) -> str | None:
    """``check_writable`` for an output file given as ``flag``, with its suffix (``.png``)."""
    if suffix is not None and Path(path).suffix.lower() != suffix:
        return f"{flag} {path}: the file name must end in {suffix}"
    why = check_writable(path)
    return None if why is None else f"{flag} {path}: {why}"

"""The ``specops`` command (also ``python -m specops``): demo, bench, info.

    specops demo [--classes 0 1 ...] [--methods ...]   # every decoding method, images + table
    specops generate --model DIR --class-id 207        # a picture from a real checkpoint
    specops bench [--ops sample,verify] [--plot DIR]   # the benchmark suite shipped in the package
    specops info [--json]                              # the build, the backends, the machine

``specops <command> --help`` shows each command's options."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

from specops._optional import run_main

COMMANDS = {
    "demo": "every decoding method on the embedded visual AR model: images, histograms, table",
    "generate": "a picture from a local checkpoint (LlamaGen, Janus, Emu3, Chameleon)",
    "bench": "benchmark the ops against their peers (CSV, --plot for PNG charts)",
    "info": "what was compiled, what runs here, and each op's backends",
}


# -- what every command checks before any work ------------------------------------------------
# A bad value is one line on stderr, ``specops <cmd>: error: ...`` naming it, exit status 2,
# before a model is loaded or a file is written.


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with an error as the one line ``PROG: error: MESSAGE`` (no usage block)."""

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


def info(argv=None) -> int:
    ap = ArgumentParser(prog="specops info", description=COMMANDS["info"])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    import specops
    from specops.ops._common import backend_table

    data = specops.build_info() | {"backends": backend_table()}
    if args.json:
        print(json.dumps(data, indent=2, default=str))
        return 0
    for k, v in data.items():
        if k != "backends":
            print(f"{k:<20} {v}")
    print("\nbackends (fastest first; 'auto' takes the first usable one)")
    for op, have in data["backends"].items():
        print(f"  {op:<28} {', '.join(have)}")
    return 0


def _usage() -> str:
    lines = ["usage: specops {demo,generate,bench,info} ...", "", __doc__.split("\n")[0], ""]
    lines += [f"  {name:<8} {text}" for name, text in COMMANDS.items()]
    lines += ["", "specops <command> --help shows each command's options."]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "demo":
        from specops.demo import main as fn
    elif cmd == "generate":
        from specops.imagegen.cli import main as fn
    elif cmd == "bench":
        from specops.bench.__main__ import main as fn
    elif cmd == "info":
        fn = info
    else:
        print(f"specops: unknown command {cmd!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    try:
        return run_main(fn, rest)
    except SystemExit as e:  # argparse's --help and errors: the status, also when called in-process
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)


if __name__ == "__main__":
    sys.exit(main())

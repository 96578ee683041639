"""The ``specops`` command (also ``python -m specops``): demo, generate, bench, info.

    specops demo [--classes 0 1 ...] [--methods ...]   # every decoding method, images + table
    specops generate --model DIR --class-id 207        # a picture from a real checkpoint
    specops bench [--ops sample,verify] [--plot DIR]   # the benchmark suite shipped in the package
    specops info [--json]                              # the build, the backends, the machine

``specops <command> --help`` shows each command's options."""

from __future__ import annotations

import json
import sys

from specops._optional import run_main
from specops.cli_args import ArgumentParser

COMMANDS = {
    "demo": "every decoding method on the embedded visual AR model: images, histograms, table",
    "generate": "a picture from a local checkpoint (LlamaGen, Janus, Emu3, Chameleon)",
    "bench": "benchmark the ops against their peers (CSV, --plot for PNG charts)",
    "info": "what was compiled, what runs here, and each op's backends",
}


def info(argv=None) -> int:
    ap = ArgumentParser(prog="specops info", description=COMMANDS["info"])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    import specops

    data = specops.build_info() | {"backends": specops.backend_table()}
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

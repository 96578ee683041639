"""``specops generate``: one command from a checkpoint directory to a PNG and the step table.

specops generate --model ckpts/llamagen-b --class-id 207 --method vvs --out fox.png
specops generate --model ckpts/janus-pro-1b --prompt "a red fox in snow" --compare-ar
specops generate --model ckpts/llamagen-b --class-id 207 --method sjd --coupling gumbel
specops generate --model ckpts/lumina-mgpt-7b-768 --prompt "a red fox" --method sjd --gsd

Every check runs before any model is loaded or any file is written (``check``): a bad value is
one line ``specops generate: error: ...`` and exit status 2.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

from specops._optional import MissingDependency
from specops.cli_args import (
    SEED,
    ArgumentParser,
    check_out_path,
    device_arg,
    float_in,
    int_in,
)
from specops.imagegen.base import METHODS

DESCRIPTION = "generate a picture from a local checkpoint with a speculative method"
PROG = "specops generate"


def _option(text: str):
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"--opt takes KEY=VALUE, got {text!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value  # a bare string, e.g. schedule=interval


def parser() -> ArgumentParser:
    ap = ArgumentParser(prog=PROG, description=DESCRIPTION)
    arg = ap.add_argument
    arg("--model", required=True, help="checkpoint directory")
    cond = ap.add_mutually_exclusive_group()
    cond.add_argument("--prompt", help="text prompt (text-to-image models)")
    cond.add_argument("--class-id", type=int_in(0), nargs="+", help="class ids (LlamaGen c2i)")
    arg("--method", default="sjd_pac", choices=METHODS)
    arg("--out", default="image.png", help="PNG path (several images: _1, _2, ...)")
    arg("--cfg", type=float_in(0, open_lo=True), default=None,
        help="guidance scale > 0 (model default; 1 turns it off)")  # fmt: skip
    arg("--top-k", type=int_in(0), default=None, help=">= 0 (0: off)")
    arg("--top-p", type=float_in(0, open_lo=True, hi=1), default=None, help="in (0, 1]")
    arg("--temperature", type=float_in(0), default=None, help=">= 0 (0: greedy)")
    arg("--seed", type=SEED, default=0, help="an int in [0, 2**63)")
    arg("--image-size", type=int_in(1), default=None,
        help="pixels a side (LlamaGen, Emu3, Chameleon)")  # fmt: skip
    arg("--drafter", default=None, help="drafter checkpoint (speculative, vvs)")
    arg("--tokenizer", default=None, help="tokenizer/processor directory, if apart")
    arg("--vqgan", default=None, help="Chameleon / Lumina-mGPT: the vqgan.ckpt")
    arg("--t5", default=None, help="LlamaGen t2i: the FLAN-T5-XL directory")
    arg("--coupling", choices=("none", "maximal", "gumbel"), default=None,
        help="sjd / sjd_pac: couple each slot's redraw with its last draft (MC-SJD; "
        "sjd_pac: none or gumbel)")  # fmt: skip
    arg("--gsd", action="store_true",
        help="sjd: GSD's grouped acceptance over the model's VQ codes (lossy; the authors' "
        "window 7, p 0.15, d 0.5: Pipeline.grouping)")  # fmt: skip
    arg("--opt", type=_option, action="append", default=[], metavar="KEY=VALUE",
        help="a method option, e.g. window=16 or threshold=0.75")  # fmt: skip
    arg("--compare-ar", action="store_true", help="also run plain AR: speed-up")
    arg("--device", type=device_arg(), default="cpu", help="cpu, cuda or cuda:N")
    arg("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    return ap


def _outputs(out: str, n: int) -> list[Path]:
    p = Path(out)
    return [p] if n == 1 else [p.with_name(f"{p.stem}_{i}{p.suffix}") for i in range(n)]


# what each family's loader takes besides the model directory (--image-size aside)
_FILES = {"drafter": ("llamagen",), "t5": ("llamagen",), "vqgan": ("chameleon",),
          "tokenizer": ("janus", "emu3", "chameleon")}  # fmt: skip


def _options(args) -> dict:
    """The method's options: every --opt, and --coupling when given."""
    opts = dict(args.opt)
    if args.coupling is not None:
        opts["coupling"] = args.coupling
    return opts


def check(args) -> str:
    """Every check that needs no loaded model, in the order a user fixes them -> the family.
    Raises ValueError / TypeError / FileNotFoundError / MissingDependency with the line to
    print."""
    from specops.imagegen.pipeline import detect, pipeline_class, require_images

    arch = detect(args.model)
    cls = pipeline_class(arch)
    gpt = [p.name for p in Path(args.model).glob("*.pt") if p.name.startswith("t2i")]
    require_images(transformers=arch != "llamagen" or bool(gpt) or args.t5 is not None)
    for name, families in _FILES.items():
        value = getattr(args, name)
        if value is None:
            continue
        if arch not in families:
            raise ValueError(f"--{name} is for {' / '.join(families)}, not {arch}")
        is_dir = name in ("t5", "tokenizer")
        if not (Path(value).is_dir() if is_dir else Path(value).is_file()):
            raise FileNotFoundError(
                f"--{name} {value}: no such {'directory' if is_dir else 'file'}"
            )
    if args.image_size is not None and arch == "janus":
        raise ValueError("--image-size: janus's image size is fixed by the checkpoint")
    drafter = args.drafter is not None or any(Path(args.model).glob("drafter*.pt"))
    cls.check_method(args.method, _options(args), has_drafter=drafter)
    if args.coupling not in (None, "none") and args.temperature == 0:
        raise ValueError(f"--coupling {args.coupling} needs sampling, not --temperature 0 (greedy)")
    if args.gsd and args.method != "sjd":
        raise ValueError(f"--gsd: grouped acceptance runs with --method sjd, not {args.method}")
    if args.gsd and args.temperature == 0:
        raise ValueError("--gsd needs sampling, not --temperature 0 (greedy)")
    if args.coupling == "maximal" and args.method == "sjd_pac":
        raise ValueError(
            "--coupling maximal: sjd_pac's adaptive continuation already is the maximal coupling; "
            "its fresh slots take none or gumbel"
        )
    for path in _outputs(args.out, len(args.class_id or [0])):
        why = check_out_path("--out", path, suffix=".png")
        if why:
            raise ValueError(why)
    return arch


def main(argv=None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    try:
        check(args)
        return _generate(args)
    except (ValueError, TypeError, FileNotFoundError, MissingDependency) as e:
        # bad input: one line, no traceback (the library's own prefix dropped)
        msg = str(e).removeprefix("generate_image: ")
        print(f"{PROG}: error: {msg}", file=sys.stderr)
        return 2


def _generate(args) -> int:
    import torch

    from specops._progress import Progress
    from specops.imagegen.pipeline import generate_image, load_pipeline

    dtype = getattr(torch, args.dtype)
    options = {}
    if args.image_size is not None:
        options["image_size"] = args.image_size
    for name in ("drafter", "tokenizer", "vqgan", "t5"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    pipe = load_pipeline(args.model, device=args.device, dtype=dtype, **options)
    bar = Progress("generate", 1, unit="tok")
    result = generate_image(
        pipe,
        prompt=args.prompt,
        class_id=args.class_id,
        method=args.method,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        cfg_scale=args.cfg,
        seed=args.seed,
        compare_ar=args.compare_ar,
        progress=bar.tokens(args.method),
        **_options(args),
        **({"relax": pipe.grouping()} if args.gsd else {}),
    )
    bar.close()
    paths = _outputs(args.out, len(result.images))
    for img, path in zip(result.images, paths):
        path.parent.mkdir(parents=True, exist_ok=True)  # checked before the run; made only now
        img.save(path, format="PNG")
    h, w = pipe.grid
    size = "x".join(map(str, result.images[0].size))
    print(f"{pipe.name}: {len(paths)} image(s) of {size} from {h}x{w} tokens -> "
          + ", ".join(map(str, paths)))  # fmt: skip
    print(f"settings: {result.settings}")
    print(result.table())
    return 0

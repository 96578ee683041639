"""``specops generate``: one command from a checkpoint directory to a PNG and the step table.

specops generate --model ckpts/llamagen-b --class-id 207 --method vvs --out fox.png
specops generate --model ckpts/janus-pro-1b --prompt "a red fox in snow" --compare-ar
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
from pathlib import Path

from specops.imagegen.base import METHODS

DESCRIPTION = "generate a picture from a local checkpoint with a speculative method"


def _option(text: str):
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"--opt takes KEY=VALUE, got {text!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value  # a bare string, e.g. schedule=interval


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="specops generate", description=DESCRIPTION)
    ap.add_argument("--model", required=True, help="checkpoint directory")
    cond = ap.add_mutually_exclusive_group()
    cond.add_argument("--prompt", help="text prompt (text-to-image models)")
    cond.add_argument("--class-id", type=int, nargs="+", help="class ids (LlamaGen c2i)")
    ap.add_argument("--method", default="sjd_pac", choices=METHODS)
    ap.add_argument("--out", default="image.png", help="PNG path (several images: _1, _2, ...)")
    ap.add_argument("--cfg", type=float, default=None, help="guidance scale (model default)")
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--top-p", type=float, default=None)
    ap.add_argument("--temperature", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--image-size", type=int, default=None,
                    help="pixels a side (LlamaGen, Emu3, Chameleon)")  # fmt: skip
    ap.add_argument("--drafter", default=None, help="drafter checkpoint (speculative, vvs)")
    ap.add_argument("--tokenizer", default=None, help="tokenizer/processor directory, if apart")
    ap.add_argument("--vqgan", default=None, help="Chameleon / Lumina-mGPT: the vqgan.ckpt")
    ap.add_argument("--t5", default=None, help="LlamaGen t2i: the FLAN-T5-XL directory")
    ap.add_argument("--opt", type=_option, action="append", default=[], metavar="KEY=VALUE",
                    help="a method option, e.g. window=16 or threshold=0.75")  # fmt: skip
    ap.add_argument("--compare-ar", action="store_true", help="also run plain AR: speed-up")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    return ap


def _outputs(out: str, n: int) -> list[Path]:
    p = Path(out)
    return [p] if n == 1 else [p.with_name(f"{p.stem}_{i}{p.suffix}") for i in range(n)]


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return _generate(args)
    except (ValueError, TypeError, FileNotFoundError) as e:  # bad input: one line, no traceback
        print(f"specops generate: error: {e}", file=sys.stderr)
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
    paths = _outputs(args.out, len(args.class_id or [0]))  # checked before any work
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not os.access(path.parent, os.W_OK):
            raise ValueError(f"--out: cannot write into {path.parent}")
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
        **dict(args.opt),
    )
    bar.close()
    paths = _outputs(args.out, len(result.images))
    for img, path in zip(result.images, paths):
        img.save(path)
    h, w = pipe.grid
    size = "x".join(map(str, result.images[0].size))
    print(f"{pipe.name}: {len(paths)} image(s) of {size} from {h}x{w} tokens -> "
          + ", ".join(map(str, paths)))  # fmt: skip
    print(f"settings: {result.settings}")
    print(result.table())
    return 0

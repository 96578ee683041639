"""Writes the API reference (docs/api/*.md) from the docstrings: one page per op family, the
decoding loop and the Tree, and an index with the backends table.

    python scripts/gen_api_docs.py            # rewrite docs/api
    python scripts/gen_api_docs.py --check    # exit 1 if docs/api is not what the code says

tests/test_api_docs.py runs the check, so a changed signature or docstring fails CI until the
pages are regenerated."""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "api"

# page -> (title, intro, [(module, names or None for its __all__)]); the ops' public functions
# live in the modules scripts/gen_ops.py writes (specops/ops/_generated_<family>.py)
PAGES = {
    "sampling": (
        "Sampling",
        "Counter-based (Philox) sampling from probability rows, and logits -> probabilities with "
        "CFG, temperature, top-k and top-p.",
        [("specops.ops._generated_sample", None), ("specops.ops._generated_probs", None)],
    ),
    "verification": (
        "Verification",
        "Lossless speculative verification by rejection sampling: chains, trees, Jacobi windows "
        "(SJD / SJD-PAC), LANTERN's relaxation, and per-path acceptance probabilities.",
        [
            ("specops.ops.verify", ["Relaxation"]),
            ("specops.ops._generated_verify", None),
            ("specops.ops._generated_jacobi", None),
        ],
    ),
    "trees": (
        "Draft trees",
        "The static tree (`specops.Tree`: parents, depths, compact ancestor bits) and the "
        "on-device EAGLE-2 dynamic tree construction.",
        [
            ("specops.tree", ["Tree"]),
            ("specops.ops._generated_tree_build", None),
            ("specops.ops.tree_build", ["Frontier", "DynamicTree"]),
        ],
    ),
    "attention": (
        "Tree attention and KV",
        "Attention of tree queries over a cached prefix plus the tree (contiguous or paged KV), "
        "appending new K/V, and committing accepted K/V in every layer in one launch.",
        [("specops.ops._generated_attention", None), ("specops.ops._generated_kv", None)],
    ),
    "features": (
        "Drafter features",
        "Gathers and inputs for EAGLE/HiViS feature drafters and VVS's feature cache.",
        [
            ("specops.ops.feature_cache", None),
            (
                "specops.ops._generated_features",
                ["gather_rows", "drafter_inputs", "path_similarity"],
            ),
        ],
    ),
    "backends": (
        "Backends, validation and argument checks",
        'Which backends an op has and which run here, what "auto" picks, validation mode, and '
        "the argument checks the ops and the engine adapters share.",
        [
            (
                "specops.ops._backends",
                [
                    "backend_table",
                    "available_backends",
                    "resolve_backend",
                    "validation",
                    "validating",
                ],
            ),
            (
                "specops.ops.checks",
                [
                    "check_tensor",
                    "check_probs",
                    "check_ids",
                    "check_values_probs",
                    "check_values_ids",
                    "check_out",
                ],
            ),
        ],
    ),
    "decode": (
        "Decoding loop",
        "One short function per method on any model that follows the protocol in "
        "`specops.decode._runners`, the progress hook, and the statistics every method returns.",
        [("specops.decode", None)],
    ),
}


def _doc(obj) -> str:
    return _tables(inspect.cleandoc(obj.__doc__ or "(no docstring)"))


def _tables(doc: str) -> str:
    """A numpydoc ``Parameters`` section (``name : [shape] dtype`` lines, each followed by its
    indented meaning) as a Markdown table: name, [shape] dtype, meaning."""
    lines = doc.split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "Parameters" and i + 1 < len(lines) and set(lines[i + 1]) == {"-"}:
            rows, i = [], i + 2
            while i < len(lines) and lines[i].strip():
                if lines[i].startswith(" "):
                    rows[-1][2].append(lines[i].strip())
                else:
                    name, _, kind = lines[i].partition(" : ")
                    rows.append([name.strip(), kind.strip(), []])
                i += 1
            out += [
                "**Parameters**",
                "",
                "| name | [shape] dtype | meaning |",
                "| --- | --- | --- |",
            ]
            pipe = "\\|"  # a | inside a cell
            out += [f"| `{n}` | {k.replace('|', pipe)} | {' '.join(m)} |" for n, k, m in rows]
            continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


def _signature(name: str, obj) -> str:
    """``name(args) -> ret`` with string annotations unquoted (the modules use postponed
    annotations) and dataclass ForwardRefs shown as their text."""
    try:
        text = f"{name}{inspect.signature(obj)}"
    except (TypeError, ValueError):
        return name
    text = re.sub(r"ForwardRef\('([^']*)'\)", r"\1", text)
    text = re.sub(r": '([^']*)'", r": \1", text)
    return re.sub(r"-> '([^']*)'", r"-> \1", text)


def _code(sig: str) -> list[str]:
    return ["```python", sig, "```", ""]


def _members(cls) -> list[tuple[str, object]]:
    """Public methods and properties defined by the class itself, in source order."""
    out = []
    for name, value in cls.__dict__.items():
        if name.startswith("_"):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if callable(value) or isinstance(value, property):
            out.append((name, value))
    return out


def _entry(name: str, obj) -> list[str]:
    if inspect.isclass(obj):
        lines = [f"## class `{name}`", "", *_code(_signature(name, obj)), _doc(obj), ""]
        for mname, member in _members(obj):
            if isinstance(member, property):
                lines += [f"### property `{name}.{mname}`", "", _doc(member.fget), ""]
            else:
                sig = _code(_signature(f"{name}.{mname}", member))
                lines += [f"### `{name}.{mname}`", "", *sig, _doc(member), ""]
        return lines
    return [f"## `{name}`", "", *_code(_signature(name, obj)), _doc(obj), ""]


def page(slug: str) -> str:
    title, intro, sources = PAGES[slug]
    lines = [
        f"# {title}",
        "",
        intro,
        "",
        "Generated by `scripts/gen_api_docs.py`; do not edit.",
        "",
    ]
    for modname, names in sources:
        mod = importlib.import_module(modname)
        for name in names if names is not None else mod.__all__:
            lines += _entry(name, getattr(mod, name))
    return "\n".join(lines).rstrip() + "\n"


def index() -> str:
    from specops import backend_table

    lines = [
        "# specops API reference",
        "",
        "Generated from the docstrings by `scripts/gen_api_docs.py`; do not edit.  The contract "
        "behind them is `../shared/DESIGN.md`; the code layout is `docs/conventions.md`.",
        "",
    ]
    lines += [f"- [{PAGES[s][0]}]({s}.md): {PAGES[s][1]}" for s in PAGES]
    lines += [
        "",
        "## Backends",
        "",
        'Every op takes `backend="auto"|"cuda"|"triton"|"cpu"|"reference"`.  "auto" picks the '
        "first usable backend in this order (CUDA kernels for CUDA tensors in a build with nvcc, "
        "Triton for CUDA tensors, the C++ twin for CPU tensors; never the Triton interpreter); "
        "an explicit backend that cannot run raises.  `specops info` prints this table for the "
        "installed build.",
        "",
        "| op | backends, fastest first |",
        "| --- | --- |",
    ]
    lines += [f"| `{op}` | {', '.join(have)} |" for op, have in backend_table().items()]
    lines += [
        "",
        "`tree_attention` and `append_kv` run the reference for float64; `tree_attention` also "
        'has `backend="cascade"` (flash-attn for the prefix, asked for by name only).  Every op '
        'with a CUDA kernel also takes `backend="cuda_sim"` (tests: the CUDA device code run on '
        'CPU tensors by the SIMT emulation of docs/cuda_sim.md; never picked by "auto").  '
        "`feature_cache_write` is the op `FeatureCache.write` runs (its reads run `gather_rows`).",
    ]
    return "\n".join(lines) + "\n"


def render() -> dict[str, str]:
    files = {"index.md": index()}
    files.update({f"{slug}.md": page(slug) for slug in PAGES})
    return files


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args(argv)
    files = render()
    if args.check:
        stale = [
            n
            for n, text in files.items()
            if not (OUT / n).exists() or (OUT / n).read_text() != text
        ]
        extra = [p.name for p in OUT.glob("*.md") if p.name not in files]
        if stale or extra:
            print(f"docs/api is stale: {stale + extra}; run python scripts/gen_api_docs.py")
            return 1
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for p in OUT.glob("*.md"):
        if p.name not in files:
            p.unlink()
    for name, text in files.items():
        (OUT / name).write_text(text)
    print(f"wrote {len(files)} pages to {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

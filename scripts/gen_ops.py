"""Writes each op family's public functions (specops/ops/_generated_<family>.py) from the op
declarations (``OpDecl``, specops/ops/_decl.py; ``OpDecl.public`` names the reference whose
signature the function takes and its docstring): a plain ``def`` per op whose body is the eager
fast path straight to the compiled binding, then the declared checks, the lowering and the
backend table.  A declaration's lambdas (``fast_when``, ``Value.fast_if`` / ``fast``,
``prepare``, ``result``) are written into the body as expressions; its named functions are
called.  The output is isort-sorted and formatted by ruff (``pip install ruff``).

    python scripts/gen_ops.py            # rewrite the generated modules
    python scripts/gen_ops.py --check    # exit 1, naming each file regenerating would change

tests/test_generated_ops.py runs the check."""

from __future__ import annotations

import argparse
import ast
import builtins
import functools
import importlib
import importlib.util
import inspect
import shutil
import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPS = ROOT / "specops" / "ops"
FAMILIES = ("sample", "probs", "verify", "jacobi", "tree_build", "attention", "kv", "features")
_KW = inspect.Parameter.KEYWORD_ONLY


def load_declarations():
    """The op modules, imported without the package __init__s (which import the generated
    modules: they may be stale or missing while regenerating) -> specops.ops._decl."""
    sys.path.insert(0, str(ROOT))
    for name, path in (("specops", ROOT / "specops"), ("specops.ops", OPS)):
        if name not in sys.modules:
            pkg = types.ModuleType(name)
            pkg.__path__ = [str(path)]
            sys.modules[name] = pkg
    for family in FAMILIES:
        importlib.import_module(f"specops.ops.{family}")
    return importlib.import_module("specops.ops._decl")


class Imports:
    """The generated module's imports: local name -> (module, attribute or None for a module)."""

    def __init__(self):
        self.names: dict[str, tuple[str, str | None]] = {}

    def add(self, local: str, module: str, attr: str | None = None) -> str:
        have = self.names.setdefault(local, (module, attr))
        if have != (module, attr):
            raise SystemExit(f"gen_ops: {local} names both {have} and {(module, attr)}")
        return local

    def resolve(self, name: str, scope: dict, home: str) -> None:
        """Import ``name`` as a declaration's function sees it (``scope``: its globals)."""
        if name not in scope:
            if hasattr(builtins, name):
                return
            # an annotation's name imported for type checking only: where specops defines it
            for mod in list(sys.modules.values()):
                obj = getattr(mod, name, None) if mod.__name__.startswith("specops") else None
                if getattr(obj, "__module__", None) == mod.__name__ and obj.__name__ == name:
                    self.add(name, mod.__name__, name)
                    return
            raise SystemExit(f"gen_ops: {name!r} is not defined in {home}")
        obj = scope[name]
        if inspect.ismodule(obj):
            if obj.__name__ != name:
                raise SystemExit(
                    f"gen_ops: import {obj.__name__} as {name} in {home}: use its name"
                )
            self.add(name, obj.__name__)
            return
        mod = getattr(obj, "__module__", None)
        if mod and getattr(sys.modules.get(mod), name, None) is obj and mod != "builtins":
            self.add(name, mod, name)
        else:
            self.add(name, home, name)

    def lines(self) -> list[str]:
        modules = sorted({m for m, a in self.names.values() if a is None})
        froms: dict[str, list[str]] = {}
        for local, (m, a) in self.names.items():
            if a is not None:
                froms.setdefault(m, []).append(local)
        std = [m for m in modules if m in sys.stdlib_module_names]
        out = [f"import {m}" for m in std] + ([""] if std else [])
        third = [m for m in modules if m not in std and not m.startswith("specops")]
        out += [f"import {m}" for m in third] + ([""] if third else [])
        out += [f"import {m}" for m in modules if m.startswith("specops")]
        for m in sorted(froms):
            out.append(f"from {m} import {', '.join(sorted(froms[m]))}")
        return out


# a declaration's functions as expressions ----------------------------------------------------
@functools.cache
def _module_ast(path: str) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"))


def _lambda_body(fn) -> ast.expr:
    """The expression of the lambda ``fn``, found in its module's source by line and parameters."""
    code = fn.__code__
    names = code.co_varnames[: code.co_argcount]
    path = inspect.getsourcefile(fn)
    hits = [
        n
        for n in ast.walk(_module_ast(path))
        if isinstance(n, ast.Lambda)
        and n.lineno == code.co_firstlineno
        and tuple(a.arg for a in n.args.args) == names
    ]
    if len(hits) != 1:
        raise SystemExit(f"gen_ops: {path}:{code.co_firstlineno}: cannot tell this lambda from "
                         "another on its line; write one of them as a def")  # fmt: skip
    return hits[0].body


class _Rename(ast.NodeTransformer):
    def __init__(self, names: dict[str, str]):
        self.names = names

    def visit_Name(self, node):
        if node.id in self.names:
            return ast.copy_location(ast.Name(self.names[node.id], node.ctx), node)
        return node


def function_expr(fn, public: set[str], imports: Imports, first: str | None = None) -> ast.expr:
    """``fn`` (a declaration's function of public arguments; with ``first``, its first parameter
    is that local) as an expression of the generated function: a lambda's body, or a call of a
    named function."""
    params = list(inspect.signature(fn).parameters)
    rename = {params[0]: first} if first else {}
    bad = [p for p in params if p not in public and p not in rename]
    if bad:
        raise SystemExit(f"gen_ops: {fn.__qualname__} reads {bad}, not public arguments")
    if fn.__name__ != "<lambda>":
        imports.resolve(fn.__name__, {fn.__name__: fn}, fn.__module__)
        return ast.Call(ast.Name(fn.__name__), [ast.Name(rename.get(p, p)) for p in params], [])
    body = _lambda_body(fn)
    for node in ast.walk(body):
        if isinstance(node, ast.Name) and node.id not in params:
            imports.resolve(node.id, fn.__globals__, fn.__module__)
    return _Rename(rename).visit(body)


def _e(src: str) -> ast.expr:
    return ast.parse(src, mode="eval").body


def _and(conds: list[ast.expr]) -> str:
    """``conds`` joined by ``and``, each in parentheses only where it binds more loosely."""
    loose = (ast.BoolOp, ast.IfExp, ast.Lambda, ast.NamedExpr)
    flat: list[ast.expr] = []
    for c in conds:  # a condition that is itself an ``and`` joins the chain
        both = isinstance(c, ast.BoolOp) and isinstance(c.op, ast.And)
        flat += c.values if both else [c]
    return " and ".join(
        f"({ast.unparse(c)})" if isinstance(c, loose) else ast.unparse(c) for c in flat
    )


# the public function ----------------------------------------------------------------------
def signature(d) -> tuple[list[inspect.Parameter], object]:
    api = d.api
    ref = inspect.signature(api.reference)
    params = [ref.parameters[n] for n in d.params]
    params.append(inspect.Parameter("backend", _KW, default="auto", annotation="str"))
    if d.outs and not any(p.name == "out" for p in api.options):
        kind = "torch.Tensor" if len(d.outs) == 1 else "tuple[torch.Tensor, ...]"
        params.append(inspect.Parameter("out", _KW, default=None, annotation=f"{kind} | None"))
    params += api.options
    return params, api.returns or ref.return_annotation


def _annotation(ann, scope: dict, home: str, imports: Imports) -> str:
    text = ann if isinstance(ann, str) else inspect.formatannotation(ann)
    for node in ast.walk(_e(text)):
        if isinstance(node, ast.Name):
            imports.resolve(node.id, scope, home)
    return text


def _default(value) -> str:
    text = repr(value)
    if ast.literal_eval(text) != value or type(ast.literal_eval(text)) is not type(value):
        raise SystemExit(f"gen_ops: default {value!r} is not a literal")
    return text


def def_line(d, imports: Imports) -> str:
    params, returns = signature(d)
    scope = {**vars(sys.modules[d.check.__module__]), **d.api.reference.__globals__}
    parts, star = [], False
    for p in params:
        if p.kind is _KW and not star:
            parts.append("*")
            star = True
        text = p.name
        if p.annotation is not p.empty:
            text += f": {_annotation(p.annotation, scope, d.api.reference.__module__, imports)}"
        if p.default is not p.empty:
            text += f" = {_default(p.default)}" if ":" in text else f"={_default(p.default)}"
        parts.append(text)
    ret = ""
    if returns is not inspect.Signature.empty:
        ret = f" -> {_annotation(returns, scope, d.api.reference.__module__, imports)}"
    return f"def {d.name}({', '.join(parts)}){ret}:"


def fast_lines(d, public: set[str], imports: Imports) -> list[str]:
    """The eager fast path: when the cheap conditions hold, the binding "auto" runs, called with
    the user's tensors (its outputs in ``_r``; an op without outputs returns); its TypeError /
    ValueError falls through to the checked path."""
    dk = importlib.import_module("specops.ops._decl")
    conds, setup, gates, args = [], [], [], []
    for a in d.args:
        if isinstance(a, dk.Ten):
            if a.fast_rank is not None:
                conds.append(_e(f"{a.name}.dim() == {a.fast_rank}"))
            args.append(_e(a.name))
        elif isinstance(a, dk.Scalar):
            conds.append(_e(f"type({a.name}) is {a.type}"))
            args.append(_e(a.name))
        elif isinstance(a, dk.RngArg):
            imports.add("fast_rng", "specops.ops._rng", "fast_rng")
            setup.append(f"_rng = fast_rng(seed, offset, {a.batch}.shape[0])")
            gates.append(_e("_rng is not None"))
            args.append(_e("_rng"))  # one Rng-shaped tuple: the binding reads it whole
        elif isinstance(a, dk.RelaxArg):
            imports.add("NO_RELAX", "specops.ops._decl", "NO_RELAX")
            conds.append(_e("relax is None"))
            args.append(ast.Starred(_e("NO_RELAX")))
        elif isinstance(a, dk.TreeArg):
            imports.add("Tree", "specops.tree", "Tree")
            if a.optional:
                conds.append(_e("tree is None or type(tree) is Tree"))
                args += [_e(f"tree.{f} if tree is not None else None") for f in a.fields]
            else:
                conds.append(_e("type(tree) is Tree"))
                args += [_e(f"tree.{f}") for f in a.fields]
        elif isinstance(a, dk.Value):
            if a.fast_if is not None:
                conds.append(function_expr(a.fast_if, public, imports))
            if a.flat:
                fn = a.fast or a.lower
                e = function_expr(fn, public, imports)
                if isinstance(e, ast.Tuple):
                    args += e.elts
                else:
                    args.append(ast.Starred(e) if len(a.flat) > 1 else e)
        else:
            raise SystemExit(f"gen_ops: {d.name}: unknown argument kind {a!r}")
    if d.fast_when is not None:
        conds.append(function_expr(d.fast_when, public, imports))
    n = len(d.outs)
    if n == 1:  # the binding takes the tensor or None (it makes the output)
        imports.add("Tensor", "torch", "Tensor")  # (one global read a call, not two)
        conds.append(_e("out is None or type(out) is Tensor"))
        args.append(_e("out"))
    elif n:
        imports.add("fast_outs", "specops.ops._decl", "fast_outs")
        setup.append(f"_o = {(None,) * n!r} if out is None else fast_outs(out, {n})")
        gates.insert(0, _e("_o is not None"))
        args.append(ast.Starred(_e("_o")))
    call = ast.unparse(ast.Call(ast.Name("fast"), args, []))
    imports.add("_dispatch", "specops.ops", "_dispatch")
    first = d.params[0]
    lines = [
        "# read through the module: a test switches the fast path off by patching it",
        f"fast = _dispatch.fast_kernel({d.name!r}, {first}, backend)",
    ]
    if n:  # the outputs' result is written once, after the checked path
        lines.append("_r = None")
    lines.append(f"if {_and([_e('fast is not None'), *conds])}:")
    inner = [*setup]
    body = [
        "try:",
        f"    {'_r = ' if n else ''}{call}",
        "except (TypeError, ValueError):",
        "    pass  # the checks name what is wrong, or normalise the layout",
    ]
    if not n:
        body += ["else:", "    return"]
    if gates:
        inner += [f"if {_and(gates)}:", *("    " + x for x in body)]
    else:
        inner += body
    return lines + ["    " + x for x in inner]


def function(d, decl_name: str, imports: Imports) -> list[str]:
    api = d.api
    params, _ = signature(d)
    public = {p.name for p in params}
    n = len(d.outs)
    body = []
    if api.prepare is not None:
        body.append(f"out = {ast.unparse(function_expr(api.prepare, public, imports))}")
    if d.fast:
        body += fast_lines(d, public, imports)
    args = ", ".join(d.params)
    checked = [
        f"_run, _flat, _out = {decl_name}.checked({args}, backend{', out=out' if n else ''})",
        f"{'_r = ' if n else ''}_run(*_flat, backend{', out=_out' if n else ''})",
    ]
    if n and d.fast:  # the checked path when the fast one did not run
        checked = ["if _r is None:", *("    " + x for x in checked)]
    body += checked
    if n:
        if api.result is not None:
            ret = ast.unparse(function_expr(api.result, public, imports, first="_r"))
        else:
            ret = "_r[0]" if n == 1 else "_r"
        body.append(f"return {ret}")
    # The docstring is the declaration's (numpydoc, in specops/ops/<family>.py), attached here
    # rather than copied in: one text, as PyTorch's add_docstr does for its generated bindings.
    doc = f"{d.name}.__doc__ = {decl_name}.api.doc"
    return [f"@traced({d.name!r})", def_line(d, imports), *("    " + x for x in body), "", "", doc]


def module(family: str, decls: list) -> str:
    imports = Imports()
    imports.add("traced", "specops._nvtx", "traced")
    home = sys.modules[f"specops.ops.{family}"]
    functions = []
    for d in decls:
        decl_name = next(k for k, v in vars(home).items() if v is d)
        imports.add(decl_name, home.__name__, decl_name)
        functions += ["", "", *function(d, decl_name, imports)]
    names = [d.name for d in decls]
    head = [
        f"# Generated by scripts/gen_ops.py from the declarations in specops/ops/{family}.py; "
        "do not edit.",
        "# Regenerate: python scripts/gen_ops.py (tests/test_generated_ops.py fails when this "
        "is stale).",
        f'"""The public ops declared in specops/ops/{family}.py '
        "(their bodies: docs/conventions.md):",
        f'{", ".join(names)}."""',
        "",
        "from __future__ import annotations",
        "",
        *imports.lines(),
        "",
        f"__all__ = {names!r}",
    ]
    return "\n".join(head + functions) + "\n"


# formatting and the check -------------------------------------------------------------------
def _ruff() -> list[str] | None:
    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"]
    exe = shutil.which("ruff")
    return [exe] if exe else None


def formatted(text: str, path: Path, ruff: list[str]) -> str:
    """``text`` with its imports sorted and formatted as ruff would (the repository's config)."""
    rel = str(path.relative_to(ROOT))
    for args in (["check", "--select", "I", "--fix", "--exit-zero", "--quiet"], ["format"]):
        r = subprocess.run([*ruff, *args, "--stdin-filename", rel, "-"], input=text,
                           capture_output=True, text=True, cwd=ROOT, check=False)  # fmt: skip
        if r.returncode != 0:
            raise SystemExit(f"gen_ops: ruff {args[0]} failed on {rel}:\n{r.stderr}")
        text = r.stdout
    return text


def _canonical(text: str) -> str:
    """The module's AST with its import statements sorted: equal for the same code whatever its
    formatting (the check without ruff)."""
    tree = ast.parse(text)
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    for n in imports:
        n.names.sort(key=lambda a: a.name)
    imports = sorted(ast.dump(n) for n in imports)
    rest = [ast.dump(n) for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))]
    return "\n".join(imports + rest)


def render() -> dict[Path, str]:
    dk = load_declarations()
    files = {}
    for family in FAMILIES:
        decls = [
            d
            for d in dk._DECLS.values()
            if d.check.__module__ == f"specops.ops.{family}" and d.api is not None
        ]
        files[OPS / f"_generated_{family}.py"] = module(family, decls)
    return files


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args(argv)
    files, ruff = render(), _ruff()
    if ruff is None and not args.check:
        raise SystemExit("gen_ops: writing needs ruff (pip install ruff)")
    stale = []
    for path, text in files.items():
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if ruff is not None:
            text = formatted(text, path, ruff)
            same = old == text
        else:  # without ruff: the same code, whatever its formatting
            same = old is not None and _canonical(old) == _canonical(text)
        if args.check:
            if not same:
                stale.append(str(path.relative_to(ROOT)))
        elif not same:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    known = {p.name for p in files}
    extra = [str(p.relative_to(ROOT)) for p in OPS.glob("_generated_*.py") if p.name not in known]
    if args.check and (stale or extra):
        print(f"stale generated ops: {stale + extra}; run python scripts/gen_ops.py")
        return 1
    for p in extra if not args.check else ():
        (ROOT / p).unlink()
        print(f"removed {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

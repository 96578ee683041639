"""One declaration per op (``OpDecl``): its arguments in the public order, each with its kind,
the outputs' shapes in symbols, the backends and the reference.  Everything else is derived:

- the flat argument list the kernels take (a ``Tree`` becomes its arrays, ``relax`` its
  neighbours and delta, seed and offset one ``Rng``): the torch.library schema, the order of the
  compiled bindings (``<op>_cpu`` / ``_cuda`` / ``_cuda_sim``, their ``py::arg`` names) and of
  the Triton entry point, which tests/test_declarations.py holds to it;
- ``OpDecl.call``, the one dispatch (generated source, ``OpDecl.source``): the eager fast path
  straight to the binding, else the op's checks, the lowering, and the backend table;
- the fake kernel and the ``out=`` checks;
- the public function (``OpDecl.public``): the reference's signature, the dispatch as its body.
An op module writes its declaration, its docstring, its checks (``check``, taking the declared
arguments) and its reference adaptor (``reference``, taking the flat arguments by name, the
random stream as one ``rng``)."""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from specops._nvtx import traced
from specops.ops import _dispatch
from specops.ops._backends import declare_backends, pick_backend
from specops.ops._dispatch import (
    define,
    int32_ids,
    launch,
    ops,
    write_outs,
)
from specops.ops._overlap import check_no_alias
from specops.ops._rng import Rng, fast_rng
from specops.ops.checks import check_out
from specops.tree import Tree


# kinds of arguments -------------------------------------------------------------------------
# Each kind names the public parameters it takes (``params``), the flat (name, schema type)
# entries it becomes (``flat``), and the Python source of that lowering: ``lower()`` after the
# op's checks, ``fast()`` -> (conditions under which the binding's own checks imply the Python
# ones, setup statements, conditions on what the setup made, the flat values).
@dataclass(frozen=True)
class Ten:
    """A tensor ``name`` with ``shape`` in symbols ("B N V"; "..." = any leading dims);
    ``form``: what the compiled kernels read (applied before a C++/CUDA launch);
    ``fast_rank``: the fast path is taken only for this rank (None: any)."""

    name: str
    shape: str = ""
    optional: bool = False
    form: Callable | None = None
    fast_rank: int | None = None

    params = property(lambda s: (s.name,))
    flat = property(lambda s: ((s.name, "Tensor?" if s.optional else "Tensor"),))

    def fast(self):
        g = [] if self.fast_rank is None else [f"{self.name}.dim() == {self.fast_rank}"]
        return g, [], [], self.name

    def lower(self):
        return self.name


@dataclass(frozen=True)
class Scalar:
    """A Python ``bool`` / ``int`` / ``float`` argument."""

    name: str
    type: str  # "bool", "int" or "float"

    params = property(lambda s: (s.name,))
    flat = property(lambda s: ((s.name, "SymInt" if s.type == "int" else s.type),))

    def fast(self):
        return [f"type({self.name}) is {self.type}"], [], [], self.name

    def lower(self):
        return self.name


@dataclass(frozen=True)
class RngArg:
    """``seed`` and ``offset`` (ints or int64 tensors) -> one ``Rng`` (specops/ops/_rng.py);
    ``requests``: the expression of the batch a seed tensor [B] indexes."""

    requests: str

    params = ("seed", "offset")
    flat = (
        ("seed", "Tensor?"),
        ("seed_value", "SymInt"),
        ("offset", "Tensor?"),
        ("offset_value", "SymInt"),
    )

    def fast(self):
        return (
            [],
            [f"_rng = _fast_rng(seed, offset, {self.requests})"],
            ["_rng is not None"],
            "*_rng",
        )

    def lower(self):
        return "*_Rng.of(seed, offset)"


@dataclass(frozen=True)
class RelaxArg:
    """LANTERN ``relax`` (a Relaxation or None) -> its neighbours [V, R] and delta."""

    params = ("relax",)
    flat = (("neighbors", "Tensor?"), ("delta", "float"))
    form = staticmethod(int32_ids)

    def fast(self):
        return ["relax is None"], [], [], "None, 0.0"

    def lower(self):
        return "*((None, 0.0) if relax is None else (relax.neighbors, float(relax.delta)))"


@dataclass(frozen=True)
class TreeArg:
    """A ``Tree`` -> its arrays ``arrays`` (Tree attributes of the same name) and then its sizes
    ``sizes`` ((flat name, Tree attribute)); ``optional``: None gives None for each array."""

    arrays: tuple[str, ...]
    sizes: tuple[tuple[str, str], ...] = ()
    optional: bool = False
    form: Callable | None = None

    params = ("tree",)

    @property
    def flat(self):
        t = "Tensor?" if self.optional else "Tensor"
        return tuple((a, t) for a in self.arrays) + tuple((n, "SymInt") for n, _ in self.sizes)

    def fast(self):
        if self.optional:
            return ["(tree is None or type(tree) is _Tree)"], [], [], self.lower()
        return ["type(tree) is _Tree"], [], [], self.lower()

    def lower(self):
        fields = [*self.arrays, *(a for _, a in self.sizes)]
        if self.optional:
            return ", ".join(f"tree.{a} if tree is not None else None" for a in fields)
        return ", ".join(f"tree.{a}" for a in fields)


@dataclass(frozen=True)
class Value:
    """A public argument lowered by Python expressions (in the public names): ``flat`` its
    (name, schema type) entries (none: an option of the public function only), ``expr`` their
    values, ``fast`` the condition under which the binding's checks cover it."""

    name: str
    flat: tuple = ()
    expr: str = ""
    fast_cond: str = ""
    fast_expr: str = ""  # the values where ``fast_cond`` holds (default ``expr``)

    params = property(lambda s: (s.name,))

    def fast(self):
        return ([self.fast_cond] if self.fast_cond else []), [], [], self.fast_expr or self.expr

    def lower(self):
        return self.expr


@dataclass(frozen=True)
class Out:
    """An output: ``shape`` in the symbols of the inputs' shapes and the flat arguments' names
    (each entry a Python expression; "..." = the leading dims bound by an input); ``dtype`` a
    torch dtype or the name of the flat argument whose dtype it takes."""

    name: str
    shape: str
    dtype: torch.dtype | str = torch.int32
    contiguous: bool = True  # False: a strided ``out=`` is written in place (through a copy)


# the declaration ----------------------------------------------------------------------------
_DECLS: dict[str, OpDecl] = {}


def declaration(op: str) -> OpDecl:
    """The declaration of the public op ``op`` (``specops.declaration("verify_chain")``): its
    arguments, outputs and backends, and ``binding_names``, the order its compiled bindings
    ``specops._C.<op>_cpu`` / ``_cuda`` take (for microbenchmarks of a binding alone)."""
    if op not in _DECLS:
        raise ValueError(
            f"specops.declaration: {op!r} is not a declared op ({', '.join(sorted(_DECLS))})"
        )
    return _DECLS[op]


@dataclass
class OpDecl:
    name: str
    args: tuple
    outs: tuple[Out, ...]
    backends: tuple[str, ...]
    check: Callable  # (declared arguments..., backend) -> None; raises on bad input
    reference: Callable  # (flat arguments by name, ``rng`` for the random stream) -> outputs
    triton: str | None = None  # "module:function" taking the flat arguments -> outputs
    kernel: Callable | None = None  # (be, flat, out) -> outputs: replaces the generic launch
    fast_when: str | None = None  # an extra condition of the fast path, in the public names
    launch_extra: Callable | None = None  # (be, flat) -> keyword arguments of the binding
    complete: Callable | None = None  # (binding's outputs, flat, out) -> all declared outputs
    mutates: tuple[str, ...] = ()  # flat tensors written in place (ops without outputs)
    backends_for: Callable | None = None  # (flat, backend) -> the backends these inputs allow
    env: dict = field(default_factory=dict)  # names the generated lowering may use
    fast: bool = True  # False: the binding takes no None outputs; every call runs the checks
    source: str = field(init=False, repr=False)

    def __post_init__(self):
        self.params = tuple(p for a in self.args for p in a.params)
        self.flat = tuple(f for a in self.args for f in a.flat)
        self.flat_names = tuple(n for n, _ in self.flat)
        self.binding_names = self.flat_names + tuple(f"out_{o.name}" for o in self.outs)
        kinds = [(a, t) for a in self.args for _, t in a.flat]
        self.forms = tuple(
            (i, a.form)
            for i, (a, t) in enumerate(kinds)
            if t.startswith("Tensor") and getattr(a, "form", None) is not None
        )
        self._dtype_from = [
            self.flat_names.index(o.dtype) if isinstance(o.dtype, str) else None for o in self.outs
        ]
        self._generate()
        declare_backends(self.backends, self.name)
        _DECLS[self.name] = self

    # generated lowering ---------------------------------------------------------------------
    def _generate(self):
        params = ", ".join(self.params)
        call = [f"def call(backend, out, {params}):", *self._dispatch_lines("_r")]
        lower = [f"def flat_args({params}):"]
        lower.append(f"    return ({''.join(a.lower() + ', ' for a in self.args if a.lower())})")
        shapes = [f"def out_shapes({', '.join(self.flat_names)}):"]
        used = set(re.findall(r"\w+|\.\.\.", ",".join(o.shape for o in self.outs)))
        unused = {
            sym
            for a in self.args
            if isinstance(a, Ten)
            for sym in a.shape.split()
            if sym not in used
        }
        bound = set(self.flat_names) | unused  # (a symbol no output needs is not read)
        for a in self.args:
            if not isinstance(a, Ten) or a.optional or not a.shape:
                continue
            syms = a.shape.split()
            for j, sym in enumerate(syms):
                if sym in bound:
                    continue
                bound.add(sym)
                if sym == "...":
                    shapes.append(
                        f"    _lead = tuple({a.name}.shape[:{a.name}.dim() - {len(syms) - 1}])"
                    )
                elif "..." in syms:
                    shapes.append(f"    {sym} = {a.name}.shape[{j - len(syms)}]")
                else:
                    shapes.append(f"    {sym} = {a.name}.shape[{j}]")
        outs = []
        for o in self.outs:
            dims = [e.strip() for e in o.shape.split(",")]
            outs.append("(" + "".join("*_lead, " if e == "..." else f"{e}, " for e in dims) + ")")
        shapes.append(f"    return ({''.join(o + ', ' for o in outs)})")
        self.source = "\n".join(call + [""] + lower + [""] + shapes) + "\n"
        env = {"_fast_rng": fast_rng, "_Rng": Rng, "_Tree": Tree, "_dispatch": _dispatch,
               "_fast_outs": _fast_outs, "_checked": _checked, "_decl": self, "_name": self.name,
               "_backends": self.backends, "_Tensor": torch.Tensor,
               **self.env}  # fmt: skip
        exec(compile(self.source, f"<specops {self.name} declaration>", "exec"), env)
        self.flat_args, self.call = env["flat_args"], env["call"]
        self._out_shapes = env["out_shapes"]
        self._env = env

    # the public function --------------------------------------------------------------------
    def public(self, reference: Callable, doc: str, result: str | None = None, prepare: str = "",
               options: tuple[inspect.Parameter, ...] = (), returns: str | None = None,
               ) -> Callable:  # fmt: skip
        """The public function ``specops.<name>``, generated.  Its parameters: the reference's
        (the declared ones, with the reference's defaults, kinds and annotations; a reference's
        own trailing options are not public), then ``backend="auto"``, ``out=None`` (ops with
        outputs; an ``options`` entry named ``out`` replaces it) and ``options``.  Its body: the
        statement ``prepare``, then the one dispatch (``call``'s, in one frame) returning
        ``result``, an expression of the outputs ``_r`` and the public names (default: the
        output, or the tuple of outputs), annotated ``returns`` (default: as the reference).
        ``doc``: its docstring."""
        ref_sig = inspect.signature(reference)
        ref = ref_sig.parameters
        if tuple(n for n in ref if n in self.params) != self.params:
            raise TypeError(f"{self.name}: the reference's parameters {tuple(ref)} do not start "
                            f"with the declared {self.params}")  # fmt: skip
        params = [ref[n] for n in self.params]
        params.append(inspect.Parameter("backend", _KW, default="auto", annotation="str"))
        if self.outs and not any(p.name == "out" for p in options):
            kind = "torch.Tensor" if len(self.outs) == 1 else "tuple[torch.Tensor, ...]"
            params.append(inspect.Parameter("out", _KW, default=None, annotation=f"{kind} | None"))
        params += options
        sig = inspect.Signature(params, return_annotation=returns or ref_sig.return_annotation)
        n = len(self.outs)
        ret = result or ("_r[0]" if n == 1 else "None" if not n else "_r")
        src = [
            f"def {self.name}{_plain(sig)}:",
            *([f"    {prepare}"] if prepare else []),
            *self._dispatch_lines(ret),
        ]
        env = {**self._env, **{f"_d_{p.name}": p.default for p in params}}
        source = "\n".join(src) + "\n"
        exec(compile(source, f"<specops {self.name} public>", "exec"), env)
        fn = env[self.name]
        fn.__doc__, fn.__signature__ = doc, sig
        fn.__module__ = sys._getframe(1).f_globals["__name__"]  # the op module that declares it
        fn.__annotations__ = {p.name: p.annotation for p in params if p.annotation is not _EMPTY}
        self.public_source = source
        return traced(self.name)(fn)

    def _dispatch_lines(self, ret: str) -> list[str]:
        """The body of the one dispatch, returning ``ret`` (an expression of the outputs ``_r``
        and the public names): the eager fast path straight to the binding when the cheap
        conditions hold and it accepts the arguments, else ``_checked``."""
        conds, setup, gates, exprs = [], [], [], []
        for a in self.args:
            c_, s_, p_, e_ = a.fast()
            conds += c_
            setup += s_
            gates += p_
            if e_:
                exprs.append(e_)
        if self.fast_when:
            conds.append(f"({self.fast_when})")
        n = len(self.outs)
        if n == 1:  # the binding takes the tensor or None (it makes the output)
            conds.append("(out is None or type(out) is _Tensor)")
            exprs.append("out")
        elif n:
            setup.append(f"_o = {(None,) * n!r} if out is None else _fast_outs(out, {n})")
            gates.insert(0, "_o is not None")
            exprs.append("*_o")
        body = [f"    if fast is not None{''.join(f' and {x}' for x in conds)}:"]
        body += [f"        {x}" for x in setup]
        pad = "        "
        if gates:
            body.append(f"        if {' and '.join(gates)}:")
            pad += "    "
        body += [
            f"{pad}try:",
            f"{pad}    _r = fast({', '.join(exprs)})",
            f"{pad}except (TypeError, ValueError):",
            f"{pad}    pass  # the checks name what is wrong, or normalise the layout",
            f"{pad}else:",
            f"{pad}    return {ret}",
        ]
        out = "out" if n else "None"  # an op without outputs has no out=
        checked = [
            f"    _r = _checked(_decl, backend, {out}, ({', '.join(self.params)},))",
            f"    return {ret}",
        ]
        if not self.fast:
            return checked
        # read through the module: a test switches the fast path off by patching it
        first = self.params[0]
        return [f"    fast = _dispatch.fast_kernel(_name, {first}, backend, _backends)", *body,
                *checked]  # fmt: skip

    # shapes ---------------------------------------------------------------------------------
    def out_shapes(self, flat) -> tuple[tuple[int, ...], ...]:
        """The outputs' shapes for the flat arguments ``flat``."""
        return self._out_shapes(*flat)

    def out_dtype(self, flat, i: int = 0) -> torch.dtype:
        j = self._dtype_from[i]
        return self.outs[i].dtype if j is None else flat[j].dtype

    def out_dtypes(self, flat) -> list[torch.dtype]:
        return [
            o.dtype if i is None else flat[i].dtype for o, i in zip(self.outs, self._dtype_from)
        ]

    def fake(self, *a):
        if not self.outs:
            return None
        flat = a[:-1]
        like = flat[0]
        outs = tuple(
            like.new_empty(s, dtype=dt)
            for s, dt in zip(self.out_shapes(flat), self.out_dtypes(flat))
        )
        return outs[0] if len(outs) == 1 else outs

    # the implementation torch.library runs --------------------------------------------------
    def impl(self, *a, out=None):
        """-> the outputs (a tuple; the tensor itself for a one-output op, None for an op without
        outputs, as its schema says)."""
        flat, backend = a[:-1], a[-1]
        have = self.backends if self.backends_for is None else self.backends_for(flat, backend)
        first = flat[0][0] if type(flat[0]) is list else flat[0]  # (a Tensor[] argument)
        be = pick_backend(self.name, backend, first.device, have)
        if self.kernel is not None and be != "reference":  # handles triton too
            r = self.kernel(be, flat, out)
        else:
            r = self._run(be, flat, out)
        n = len(self.outs)
        return r[0] if n == 1 else r if n else None

    def _run(self, be, flat, out):
        if be == "reference":
            kw = dict(zip(self.flat_names, flat))
            if "seed" in kw:
                kw["rng"] = Rng(kw.pop("seed"), kw.pop("seed_value"), kw.pop("offset"),
                                kw.pop("offset_value"))  # fmt: skip
            return write_outs(out, tuple(self.reference(**kw) or ()))
        if be == "triton":
            module, fn = self.triton.split(":")
            entry = getattr(__import__(f"specops.triton_kernels.{module}", fromlist=[fn]), fn)
            return write_outs(out, tuple(entry(*flat) or ()))
        return self.launch(be, *flat, out=out)

    def launch(self, be: str, *flat, out=None, **extra) -> tuple:
        """The compiled kernel for ``be`` ("cpu", "cuda", "cuda_sim") on the flat arguments, each
        tensor first put in the form it reads (``Ten.form``); ``extra``: keyword arguments of the
        binding after the outputs (workspaces, ``launch_extra``'s)."""
        if self.forms:
            flat = list(flat)
            for i, form in self.forms:
                if flat[i] is not None:
                    flat[i] = form(flat[i])
        if self.launch_extra is not None:
            extra = {**self.launch_extra(be, flat), **extra}
        res = launch(be, self.name, *flat, *(out or (None,) * len(self.outs)), **extra)
        return res if self.complete is None else self.complete(res, flat, out)

    def schema(self) -> str:
        alias = iter("abcdefghijklmnop")
        args = ", ".join(
            (t.replace("Tensor", f"Tensor({next(alias)}!)", 1) if n in self.mutates else t)
            + f" {n}"
            for n, t in self.flat
        )
        args += ", str backend"
        if not self.outs:
            return f"({args}) -> ()"
        if len(self.outs) == 1:
            return f"({args}) -> Tensor"
        return f"({args}) -> ({', '.join('Tensor' for _ in self.outs)})"


_KW, _EMPTY = inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.empty


def _plain(sig: inspect.Signature) -> str:
    """``sig`` as source, without annotations, each default read from ``_d_<name>``."""
    return str(
        sig.replace(
            parameters=[
                p.replace(
                    annotation=_EMPTY, default=_EMPTY if p.default is _EMPTY else _Default(p.name)
                )
                for p in sig.parameters.values()
            ],
            return_annotation=_EMPTY,
        )
    )


class _Default:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"_d_{self.name}"


# registration and the one dispatch ----------------------------------------------------------
def register_decl(d: OpDecl, keys=("CPU", "CUDA")) -> None:
    """Define ``specops::<name>`` (schema ``d.schema()``) and, for an op with outputs,
    ``specops::<name>_out`` (the same arguments followed by the preallocated outputs it writes),
    with ``d.impl`` per dispatch key and ``d.fake``; ``ops.<name>`` / ``ops.<name>_out`` call them
    the cheap way (see _dispatch)."""
    schema = d.schema()
    define(d.name, schema, d.impl, d.fake, keys)
    n = len(d.outs)
    if n:
        first = len(d.mutates)
        outs = ", ".join(f"Tensor({chr(ord('a') + first + i)}!) out{i}" for i in range(n))
        args = schema[: schema.rindex(")", 0, schema.index("->"))]

        def impl_out(*a):
            d.impl(*a[:-n], out=a[-n:])

        define(d.name + "_out", f"{args}, {outs}) -> ()", impl_out, lambda *a: None, keys)


def _fast_outs(out, n: int):
    """``out`` as the binding takes it (None for each output to make), or None when the checked
    path must see it."""
    if out is None:
        return (None,) * n
    if type(out) is torch.Tensor and n == 1:
        return (out,)
    if (
        isinstance(out, (tuple, list))
        and len(out) == n
        and all(type(t) is torch.Tensor for t in out)
    ):
        return tuple(out)
    return None


def _checked(d: OpDecl, backend: str, out, args: tuple) -> tuple:
    """The checked path of a declared op (``OpDecl.call`` after its fast path declined):
    ``d.check`` names what is wrong, ``d.flat_args`` lowers, and ``ops.<name>`` (or
    ``<name>_out`` with ``out``) runs the backend table -> the outputs."""
    d.check(*args, backend)
    flat = d.flat_args(*args)
    if out is None:
        r = getattr(ops, d.name)(*flat, backend)
        return (r,) if len(d.outs) == 1 else r if d.outs else ()
    single = isinstance(out, torch.Tensor)
    if len(d.outs) == 1 and not single:
        raise TypeError(f"specops.{d.name}: out must be a torch.Tensor, got {type(out).__name__}")
    dev = args[0].device
    shapes, dtypes = d.out_shapes(flat), d.out_dtypes(flat)
    specs = [(o.name, s, t, dev) for o, s, t in zip(d.outs, shapes, dtypes)]
    outs = check_out(d.name, (out,) if single else out, specs, [o.contiguous for o in d.outs])
    check_no_alias(
        d.name, [(f"out.{s[0]}", t) for s, t in zip(specs, outs)], zip(d.flat_names, flat)
    )
    getattr(ops, d.name + "_out")(*flat, backend, *outs)
    return outs

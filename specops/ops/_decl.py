"""One declaration per op (``OpDecl``): its arguments in the public order, each with its kind,
the outputs' shapes in symbols, the backends and the reference.  Everything else is derived:

- the flat argument list the kernels take (a ``Tree`` becomes its arrays, ``relax`` its
  neighbours and delta, seed and offset one ``Rng``): the torch.library schema, the order of the
  compiled bindings (``<op>_cpu`` / ``_cuda`` / ``_cuda_sim``, their ``py::arg`` names) and of
  the Triton entry point, which tests/test_declarations.py holds to it;
- the public function and its eager fast path, written to specops/ops/_generated_<family>.py by
  scripts/gen_ops.py (``OpDecl.public`` records what it needs); its checked path calls
  ``checked`` (``check``, ``flat_args``, ``out_buffers``) and ``run`` here;
- the fake kernel, the ``out=`` checks and the torch.library registration.
An op module writes its declaration, its docstring, its checks (``check``, taking the declared
arguments) and its reference adaptor (``reference``, taking the flat arguments by name, the
random stream as one ``rng``); its hooks take the flat arguments as one record, by name."""

from __future__ import annotations

import functools
import importlib
import inspect
from collections import namedtuple
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from specops import _build
from specops.ops._backends import declare_backends, pick_backend
from specops.ops._dispatch import define, eager, int32_ids, write_outs
from specops.ops._overlap import check_no_alias
from specops.ops._rng import Rng
from specops.ops.checks import check_out


# kinds of arguments -------------------------------------------------------------------------
# Each kind names the public parameters it takes (``params``), the flat (name, schema type)
# entries it becomes (``flat``) and, given the public arguments by name, their flat values
# (``flatten``: the checked lowering).  scripts/gen_ops.py writes each kind's fast lowering (the
# conditions under which the binding's own checks imply the Python ones) from the same fields.
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

    def flatten(self, a: dict) -> tuple:
        return (a[self.name],)


@dataclass(frozen=True)
class Scalar:
    """A Python ``bool`` / ``int`` / ``float`` argument."""

    name: str
    type: str  # "bool", "int" or "float"

    params = property(lambda s: (s.name,))
    flat = property(lambda s: ((s.name, "SymInt" if s.type == "int" else s.type),))

    def flatten(self, a: dict) -> tuple:
        return (a[self.name],)


@dataclass(frozen=True)
class RngArg:
    """``seed`` and ``offset`` (ints or int64 tensors) -> one ``Rng`` (specops/ops/_rng.py),
    the one flat argument ``rng`` that the reference, the Triton entries and the compiled bindings
    take; only torch.library's schema spells it as its four fields (``schema``).
    ``batch``: the tensor whose dim 0 a seed tensor [B] indexes (one seed per request)."""

    batch: str

    params = ("seed", "offset")
    flat = (("rng", "Rng"),)
    schema = (
        ("seed", "Tensor?"),
        ("seed_value", "SymInt"),
        ("offset", "Tensor?"),
        ("offset_value", "SymInt"),
    )

    def flatten(self, a: dict) -> tuple:
        return (Rng.of(a["seed"], a["offset"]),)


def _relax_form(t):
    """LANTERN's neighbours as int32 ids, GSD's codebook as float32, both contiguous."""
    return t.float().contiguous() if t.is_floating_point() else int32_ids(t)


NO_RELAX = (None, 0.0, None, 0, 0.0, 0.0, 0)  # the flat values of relax=None


@dataclass(frozen=True)
class RelaxArg:
    """``relax``: LANTERN's Relaxation -> its neighbours [V, R] and delta; GSD's Grouping -> its
    codebook [V_img, C], window, thresholds and the image range's first id; None -> neither."""

    params = ("relax",)
    flat = (
        ("neighbors", "Tensor?"),
        ("delta", "float"),
        ("codebook", "Tensor?"),
        ("group_window", "SymInt"),
        ("group_p", "float"),
        ("group_d", "float"),
        ("image_start", "SymInt"),
    )
    form = staticmethod(_relax_form)

    def flatten(self, a: dict) -> tuple:
        relax = a["relax"]
        if relax is None:
            return NO_RELAX
        if hasattr(relax, "codebook"):  # a Grouping (checked)
            g = relax
            return (None, 0.0, g.codebook, int(g.window), float(g.p_threshold),
                    float(g.d_threshold), g.image_start)  # fmt: skip
        return (relax.neighbors, float(relax.delta), *NO_RELAX[2:])


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

    @property
    def fields(self) -> tuple[str, ...]:
        """The Tree attributes read, in flat order."""
        return (*self.arrays, *(a for _, a in self.sizes))

    def flatten(self, a: dict) -> tuple:
        tree = a["tree"]
        if tree is None and self.optional:
            return (None,) * len(self.fields)
        return tuple(getattr(tree, f) for f in self.fields)


@dataclass(frozen=True)
class Value:
    """A public argument lowered by Python functions of the public arguments (each function's
    parameters name the public arguments it reads): ``flat`` its (name, schema type) entries
    (none: an option of the public function only); ``lower`` their values (a tuple when there
    are several); ``fast_if`` the condition under which the binding's checks cover it, and
    ``fast`` its values there (default ``lower``).  scripts/gen_ops.py writes a lambda's
    expression into the fast path and calls a named function."""

    name: str
    flat: tuple = ()
    lower: Callable | None = None
    fast_if: Callable | None = None
    fast: Callable | None = None

    params = property(lambda s: (s.name,))

    def flatten(self, a: dict) -> tuple:
        if not self.flat:
            return ()
        v = self.lower(*(a[p] for p in arg_names(self.lower)))
        return tuple(v) if len(self.flat) > 1 else (v,)


@functools.cache
def arg_names(fn: Callable) -> tuple[str, ...]:
    """The parameter names of a declaration's function: the arguments it reads, by name."""
    return tuple(inspect.signature(fn).parameters)


@dataclass(frozen=True)
class Out:
    """An output: ``shape`` the symbols of its dims, comma-separated ("B, N"; "..." = the
    leading dims bound by an input): symbols of the inputs' shapes, flat argument names or the
    op's derived ``sizes``; ``dtype`` a torch dtype or the name of the flat argument whose dtype
    it takes."""

    name: str
    shape: str
    dtype: torch.dtype | str = torch.int32
    contiguous: bool = True  # False: a strided ``out=`` is written in place (through a copy)


@dataclass(frozen=True)
class Public:
    """What scripts/gen_ops.py writes the public function from (``OpDecl.public``)."""

    reference: Callable
    doc: str
    result: Callable | None
    prepare: Callable | None
    options: tuple[inspect.Parameter, ...]
    returns: str | None


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
    # "module:function" of specops.triton_kernels: the op's Triton entry, the one way from the
    # declaration to it (``triton_kernel``); without a ``kernel`` hook it takes the flat
    # arguments -> outputs
    triton: str | None = None
    # the hooks take ``a``, the flat arguments as one record (``a.first_child``):
    kernel: Callable | None = None  # (be, a, out) -> outputs: replaces the generic launch
    fast_when: Callable | None = None  # (public arguments by name) -> the fast path may run
    launch_extra: Callable | None = None  # (be, a) -> keyword arguments of the binding
    complete: Callable | None = None  # (binding's outputs, a, out) -> all declared outputs
    mutates: tuple[str, ...] = ()  # flat tensors written in place (ops without outputs)
    backends_for: Callable | None = None  # (a, backend) -> the backends these inputs allow
    sizes: dict[str, Callable] = field(default_factory=dict)  # derived sizes of the outputs
    fast: bool = True  # False: the binding takes no None outputs; every call runs the checks

    def __post_init__(self):
        self.params = tuple(p for a in self.args for p in a.params)
        self.flat = tuple(f for a in self.args for f in a.flat)
        self.flat_names = tuple(n for n, _ in self.flat)
        # torch.library's schema: the flat arguments, an Rng spelled as its four fields
        self.schema_flat = tuple(f for a in self.args for f in getattr(a, "schema", a.flat))
        self._rng_at = self.flat_names.index("rng") if "rng" in self.flat_names else None
        self.binding_names = self.flat_names + tuple(f"out_{o.name}" for o in self.outs)
        self.Flat = namedtuple(f"{self.name}_args", self.flat_names)  # what the hooks read
        kinds = [(a, t) for a in self.args for _, t in a.flat]
        self.forms = tuple(
            (i, a.form)
            for i, (a, t) in enumerate(kinds)
            if t.startswith("Tensor") and getattr(a, "form", None) is not None
        )
        self._dtype_from = [
            self.flat_names.index(o.dtype) if isinstance(o.dtype, str) else None for o in self.outs
        ]
        self._out_dims = [[e.strip() for e in o.shape.split(",")] for o in self.outs]
        self._no_outs = (None,) * len(self.outs)
        self.api: Public | None = None
        self._triton_entries: dict[str | None, Callable] = {}
        declare_backends(self.backends, self.name)
        _DECLS[self.name] = self

    def public(self, reference: Callable, doc: str, result: Callable | None = None,
               prepare: Callable | None = None, options: tuple[inspect.Parameter, ...] = (),
               returns: str | None = None) -> None:  # fmt: skip
        """Declares the public function ``specops.<name>``, which scripts/gen_ops.py writes.
        Its parameters: the reference's (the declared ones, with the reference's defaults,
        kinds and annotations; a reference's own trailing options are not public), then
        ``backend="auto"``, ``out=None`` (ops with outputs; an ``options`` entry named ``out``
        replaces it) and ``options``.  Its body: ``out = prepare(...)`` (the ``out`` the op
        takes, from the public arguments prepare names), then the one dispatch returning
        ``result(outputs, ...)`` (default: the output, or the tuple of outputs), annotated
        ``returns`` (default: as the reference).  ``doc``: its docstring."""
        declared = tuple(n for n in inspect.signature(reference).parameters if n in self.params)
        if declared != self.params:
            raise TypeError(f"{self.name}: the reference's parameters {declared} do not follow "
                            f"the declared {self.params}")  # fmt: skip
        self.api = Public(reference, doc, result, prepare, tuple(options), returns)

    # the checked path -----------------------------------------------------------------------
    def checked(self, *values, out=None) -> tuple:
        """The checked path up to the kernel: the declared arguments (public order) and the
        backend through ``check``, lowered (``flat_args``), and the public ``out`` checked
        (``out_buffers``) -> (``run`` when the call is eager, else ``dispatch``; the flat
        arguments; the buffers the op writes or None).  The public function then calls
        ``run(*flat, backend, out=buffers)`` itself: one frame fewer to the binding."""
        self.check(*values)
        flat = self.flat_args(*values[:-1])
        return self.run if eager() else self.dispatch, flat, self.out_buffers(out, flat)

    def flat_args(self, *values) -> tuple:
        """The declared arguments (public order) -> the flat arguments."""
        a = dict(zip(self.params, values))
        return tuple(v for kind in self.args for v in kind.flatten(a))

    def out_buffers(self, out, flat) -> tuple | None:
        """A public ``out`` (a tensor, or a tuple of the outputs) checked against the outputs'
        shapes, dtypes, devices and layouts and against the inputs (no overlap) -> the buffers
        the op writes, or None."""
        if out is None:
            return None
        single = isinstance(out, torch.Tensor)
        if len(self.outs) == 1 and not single:
            raise TypeError(
                f"specops.{self.name}: out must be a torch.Tensor, got {type(out).__name__}"
            )
        first = flat[0][0] if type(flat[0]) is list else flat[0]
        shapes, dtypes = self.out_shapes(flat), self.out_dtypes(flat)
        specs = [(o.name, s, t, first.device) for o, s, t in zip(self.outs, shapes, dtypes)]
        outs = check_out(self.name, (out,) if single else out, specs,
                         [o.contiguous for o in self.outs])  # fmt: skip
        check_no_alias(
            self.name, [(f"out.{s[0]}", t) for s, t in zip(specs, outs)], self.named_inputs(flat)
        )
        return tuple(outs)

    def named_inputs(self, flat) -> list[tuple[str, object]]:
        """(name, value) of each flat argument, an Rng's seed and offset tensors by their names."""
        named = list(zip(self.flat_names, flat))
        if self._rng_at is not None:
            rng = flat[self._rng_at]
            named += [("seed", rng.seed), ("offset", rng.offset)]
        return named

    # torch.library sees an Rng as its four fields (its schema has no record type)
    def to_schema(self, flat) -> tuple:
        i = self._rng_at
        return flat if i is None else (*flat[:i], *flat[i], *flat[i + 1 :])

    def from_schema(self, a) -> tuple:
        i = self._rng_at
        return a if i is None else (*a[:i], Rng(*a[i : i + 4]), *a[i + 4 :])

    def dispatch(self, *a, out=None) -> tuple:
        """``run`` through torch.library (``torch.ops.specops.<name>``, or ``<name>_out`` with
        the buffers ``out``): what tracing and modes see -> the outputs, a tuple."""
        flat, backend = self.to_schema(a[:-1]), a[-1]
        if out is None:
            r = getattr(torch.ops.specops, self.name)(*flat, backend)
            return (r,) if len(self.outs) == 1 else r if self.outs else ()
        getattr(torch.ops.specops, self.name + "_out")(*flat, backend, *out)
        return out

    def run(self, *a, out=None) -> tuple:
        """The implementation (eager, and behind torch.library): the flat arguments and the
        backend -> the outputs, a tuple (``out``'s buffers when given)."""
        flat, backend = a[:-1], a[-1]
        named = self.Flat._make(flat)
        have = self.backends if self.backends_for is None else self.backends_for(named, backend)
        first = flat[0][0] if type(flat[0]) is list else flat[0]  # (a Tensor[] argument)
        be = pick_backend(self.name, backend, first.device, have)
        if be == "reference":
            r = write_outs(out, tuple(self.reference(**named._asdict()) or ()))
        elif self.kernel is not None:  # handles triton too
            r = self.kernel(be, named, out)
        elif be == "triton":
            r = write_outs(out, tuple(self.triton_kernel()(**named._asdict()) or ()))
        else:
            r = self.launch(be, *flat, out=out)
        if out is not None:
            return tuple(out)
        return tuple(r) if r is not None else ()

    def triton_kernel(self, name: str | None = None) -> Callable:
        """The Triton entry ``triton`` names (or the function ``name`` of its module, a helper
        kernel of the same op), imported on first use: Triton may be absent until then."""
        fn = self._triton_entries.get(name)
        if fn is None:  # (import_module costs ~1 us a call even when imported: kept per name)
            module, entry = self.triton.split(":")
            mod = importlib.import_module(f"specops.triton_kernels.{module}")
            fn = self._triton_entries[name] = getattr(mod, name or entry)
        return fn

    def impl(self, *a, out=None):
        """``run`` with the schema's result: the tensor itself for a one-output op, None for an
        op without outputs."""
        r = self.run(*self.from_schema(a), out=out)
        n = len(self.outs)
        return r[0] if n == 1 else r if n else None

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
            extra = {**self.launch_extra(be, self.Flat._make(flat)), **extra}
        binding = getattr(_build._C, f"{self.name}_{be}")
        res = binding(*flat, *(out or self._no_outs), **extra)
        return res if self.complete is None else self.complete(res, self.Flat._make(flat), out)

    # shapes ---------------------------------------------------------------------------------
    def out_shapes(self, flat) -> tuple[tuple[int, ...], ...]:
        """The outputs' shapes for the flat arguments ``flat``: each symbol read from the first
        (non-optional) input whose shape names it, a flat argument or a derived size."""
        sym = dict(zip(self.flat_names, flat))
        for a in self.args:
            if not isinstance(a, Ten) or a.optional or not a.shape:
                continue
            syms, t = a.shape.split(), sym[a.name]
            for j, s in enumerate(syms):
                if s in sym:
                    continue
                if s == "...":
                    sym[s] = tuple(t.shape[: t.dim() - (len(syms) - 1)])
                else:
                    sym[s] = t.shape[j - len(syms)] if "..." in syms else t.shape[j]
        for s, fn in self.sizes.items():
            sym[s] = fn(*(sym[p] for p in arg_names(fn)))
        return tuple(
            tuple(d for e in dims for d in (sym[e] if e == "..." else (sym[e],)))
            for dims in self._out_dims
        )

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
        flat = self.from_schema(a)[:-1]
        like = flat[0]
        outs = tuple(
            like.new_empty(s, dtype=dt)
            for s, dt in zip(self.out_shapes(flat), self.out_dtypes(flat))
        )
        return outs[0] if len(outs) == 1 else outs

    def schema(self) -> str:
        alias = iter("abcdefghijklmnop")
        args = ", ".join(
            (t.replace("Tensor", f"Tensor({next(alias)}!)", 1) if n in self.mutates else t)
            + f" {n}"
            for n, t in self.schema_flat
        )
        args += ", str backend"
        if not self.outs:
            return f"({args}) -> ()"
        if len(self.outs) == 1:
            return f"({args}) -> Tensor"
        return f"({args}) -> ({', '.join('Tensor' for _ in self.outs)})"


# registration -------------------------------------------------------------------------------
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
            d.run(*d.from_schema(a[:-n]), out=a[-n:])

        define(d.name + "_out", f"{args}, {outs}) -> ()", impl_out, lambda *a: None, keys)


def fast_outs(out, n: int):
    """``out`` as the binding takes it (None for each output to make), or None when the checked
    path must see it (the generated fast paths of ops with several outputs)."""
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

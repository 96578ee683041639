"""The decoding loop, written once: the set-up (``begin``), the prefill (``prefill``), the steps
(``run_steps``, with the NVTX ranges), a step's commit (``commit``) and the statistics
(``finish``); each method supplies its step.  Also the output buffer, the Philox offset counter,
compiled steps, and the window helpers of SJD / SJD-PAC (``init_rows``, ``select_tree``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

import specops
from specops._nvtx import nvtx_range
from specops.decode._runners import DraftRunner, TargetRunner
from specops.decode.hooks import current_hook
from specops.decode.sampling import Sampling
from specops.decode.stats import Recorder
from specops.tree import Tree

__all__ = [
    "compiled_step",
    "Output",
    "Offsets",
    "Run",
    "begin",
    "prefill",
    "run_steps",
    "commit",
    "first_n",
    "first_update",
    "relax_on",
    "finish",
    "select_tree",
    "start",
    "emit_first",
    "init_rows",
]


class Offsets:
    """Philox offsets: every random op call of a run reads its own counter block.

    The counter is an int64 device tensor advanced in place (offset 1, 2, ... as before), never
    a Python int: a CUDA graph replays the advance instead of baking one value in, and
    torch.compile sees one tensor input instead of a new constant (a recompile) per call.  Ops
    read it when they run, in stream order, before the next advance."""

    def __init__(self, start: int = 0, device="cpu"):
        self.counter = torch.full((1,), start, dtype=torch.int64, device=device)

    def __call__(self) -> torch.Tensor:
        self.counter += 1
        return self.counter


def compiled_step(step, how):
    """One decoding iteration, compiled or not: ``how`` None / False runs ``step`` eagerly; True
    or a torch.compile backend name ("inductor", "aot_eager", ...) compiles it whole
    (``fullgraph=True``: a graph break is an error, not a silent slow path).  Every step's
    inputs keep their shapes and seeds / offsets are device tensors, so it compiles once per
    run; the loop's stop check (one host read) stays outside."""
    if how is None or how is False:
        return step
    backend = "inductor" if how is True else how
    return torch.compile(step, fullgraph=True, dynamic=False, backend=backend)


def start(name, model, prompt, length: int, sampling: Sampling, *, width, slack, out_slack=None):
    """The set-up every method shares, sampling as ``sampling`` says.  ``width``: the most tokens
    one step emits; the cache holds prompt + length + ``slack`` tokens (finished requests still
    ride along); the output keeps ``out_slack`` (default ``width``) spare columns.
    -> (recorder with its timer running, offsets, target runner, output buffer, cache capacity)."""
    b, dev = prompt.shape[0], prompt.device
    rec = Recorder(name, b, length, width, dev)
    rng = Offsets(device=dev)
    rec.timer.start()
    cap = prompt.shape[1] + length + slack
    tgt = TargetRunner(model, prompt, capacity=cap, rec=rec, sampling=sampling)
    eos = getattr(model, "eos_token_ids", None)  # a model may stop requests at these tokens
    out = Output(b, length, width if out_slack is None else out_slack, dev, eos=eos)
    return rec, rng, tgt, out, cap


@dataclass
class Run:
    """One run's shared state: the method's ``name`` (``Stats.method``, the NVTX prefix), its
    ``sampling``, the ``prompt`` [B, P], the statistics recorder, the Philox offsets, the target
    runner, the output, the cache capacity and, for drafting methods, the drafter runner."""

    name: str
    sampling: Sampling
    prompt: torch.Tensor
    rec: Recorder
    rng: Offsets
    tgt: TargetRunner
    out: Output
    cap: int
    dr: DraftRunner | None = None

    @property
    def rows(self) -> torch.Tensor:
        return torch.arange(self.prompt.shape[0], device=self.prompt.device)


def begin(name, model, prompt, length, sampling, *, width, slack, out_slack=None, drafter=None):
    """``start`` as a ``Run``, with a ``DraftRunner`` for ``drafter`` (its cache as large)."""
    rec, rng, tgt, out, cap = start(
        name, model, prompt, length, sampling, width=width, slack=slack, out_slack=out_slack
    )
    dr = None
    if drafter is not None:
        dr = DraftRunner(drafter, prompt.shape[0], cap, rec, prompt.device)
    return Run(name, sampling, prompt, rec, rng, tgt, out, cap, dr)


def prefill(run: Run, then=None):
    """The prefill, in the NVTX range ``<name>.prefill``: a standalone draft model reads the
    prompt, the target reads it and commits it, s_1 ~ p(. | prompt) is emitted, then
    ``then(probs, hidden, root, ones)`` builds the method's first state inside the range.
    -> (root [B] int32, then's result)."""
    with nvtx_range(f"{run.name}.prefill"):
        if run.dr is not None:
            run.dr.prefill(run.prompt)
        probs, hidden = run.tgt.prefill()
        root, ones = emit_first(probs, run.out, run.rec, run.sampling, run.rng)
        return root, (None if then is None else then(probs, hidden, root, ones))


def first_update(run: Run, hidden, root, drafter_prefill: bool, hide, hide_positions: str):
    """The drafter's first update (speculative, VVS): its prefill over the prompt,
    [e(x_{i+1}) || f_i] (HiViS Eq. 3; visual positions in ``hide`` omitted), or only
    [e(s_1) || f_{n-1}] without ``drafter_prefill``.  -> (tokens, feats, n)."""
    return run.dr.first_entries(
        run.prompt, hidden, root, prefill=drafter_prefill, hide=hide,
        keep_positions=hide_positions == "target",
    )  # fmt: skip


def relax_on(fn: str, relax, greedy: bool, device):
    """LANTERN's relaxation or GSD's grouping on the run's device; an error with greedy decoding
    (exact) or another kind of ``relax``."""
    if relax is None:
        return None
    if greedy:
        raise ValueError(
            f"{fn}: relax (LANTERN or GSD) needs sampling; greedy (temperature=0) is exact"
        )
    if isinstance(relax, specops.Grouping):
        return relax._replace(codebook=relax.codebook.to(device))
    if not isinstance(relax, specops.Relaxation):
        raise TypeError(f"{fn}: relax must be a specops.Relaxation or specops.Grouping, got "
                        f"{type(relax).__name__}")  # fmt: skip
    return specops.Relaxation(relax.neighbors.to(device), relax.delta)


def _more(out, i: int, until) -> bool:
    """The stop check: ``"done"`` reads the host once (``out.done()``); an int (AR) runs that many
    steps with no host read unless EOS or a progress hook asks; ``"step"``: the step decides."""
    if until == "done":
        return not out.done()
    if until == "step":
        return True
    if i < until and out.eos is not None:
        return not out.done()
    out.report()
    return i < until


def run_steps(run: Run, step, state, *, compile_step=None, eager_first=False, until="done"):
    """The loop: ``state = step(*state)`` in the NVTX range ``<name>.step`` until ``until`` says
    stop (``_more``) or a step returns None.  The steps run ``compiled_step(step, compile_step)``,
    the first one eagerly with ``eager_first`` (its inputs have other shapes).  -> the last
    state."""
    compiled = compiled_step(step, compile_step)
    fn, i = (step if eager_first else compiled), 0
    while _more(run.out, i, until):
        with nvtx_range(f"{run.name}.step"):
            new = fn(*state)
        if new is None:
            break
        state, fn, i = new, compiled, i + 1
    return state


def first_n(slots: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """The first n[b] entries of each row of slots [B, M], -1 after them -> [B, M] int32."""
    cols = torch.arange(slots.shape[1], device=slots.device)[None, :]
    return torch.where(cols < n[:, None], slots, -1).int()


def commit(run: Run, slots, tokens, n, charged) -> None:
    """A step's commit: the target keeps the KV of ``slots`` [B, M] (offsets from seqlens, -1
    dropped), the first n[b] of tokens [B, M'] are emitted, the step counted for ``charged``."""
    run.tgt.commit(slots)
    run.out.write(tokens, n)
    run.rec.emitted(n, charged)


def finish(run: Run, **extra):
    """The run's statistics, with ``extra`` -> (tokens [B, length] int32, Stats)."""
    stats = run.rec.finish()
    stats.extra.update(extra)
    return run.out.tokens(), stats


def emit_first(probs, out, rec, sampling: Sampling, rng) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample the first token s_1 ~ probs [B, V] (the prefill's last row) and emit it.
    -> (root [B] int32, ones [B] int64)."""
    with rec.timer("specops"):
        root = specops.sample(probs, seed=sampling.seed, offset=rng())
    ones = torch.ones(root.shape[0], dtype=torch.long, device=root.device)
    out.write(root[:, None], ones)
    rec.emitted(ones, ones.bool())
    return root, ones


class Output:
    """Emitted tokens [B, T] (int32, -1 until written), written at each request's count.  With
    ``eos`` (token ids [E]) a request stops at its first EOS: its count jumps to T, so it is no
    longer active; what its row holds after the EOS is unspecified (-1 or the rest of that step's
    tokens)."""

    def __init__(self, batch: int, length: int, slack: int, device, eos=None):
        self.length = length
        self.buf = torch.full((batch, length + slack + 1), -1, dtype=torch.int32, device=device)
        self.count = torch.zeros(batch, dtype=torch.int64, device=device)
        self._trash = length + slack
        self.eos = None if eos is None else torch.as_tensor(eos, device=device).reshape(-1)

    @property
    def active(self) -> torch.Tensor:
        return self.count < self.length

    def write(self, tokens: torch.Tensor, n: torch.Tensor) -> None:
        """Append the first n[b] entries of tokens [B, M] to request b."""
        m = tokens.shape[1]
        cols = torch.arange(m, device=tokens.device)[None, :]
        ok = cols < n[:, None]
        idx = torch.where(ok, (self.count[:, None] + cols).clamp(max=self._trash), self._trash)
        self.buf.scatter_(1, idx, tokens.to(torch.int32))
        self.count += n.long()
        if self.eos is not None:  # a request that wrote an EOS is finished
            hit = (torch.isin(tokens, self.eos) & ok).any(1)
            self.count = torch.where(hit, self.count.clamp(min=self.length), self.count)

    def done(self) -> bool:
        """The loop's one host read per step; it also feeds the progress hook, if one is set."""
        if current_hook() is None:
            return bool((self.count >= self.length).all())
        return bool((self._feed() >= self.length).all())

    def report(self) -> None:
        """Feed the progress hook from a loop whose stop check is not ``done()`` (AR, VVS): a
        host read only while a hook is set."""
        if current_hook() is not None:
            self._feed()

    def _feed(self) -> torch.Tensor:
        """Call the progress hook (specops.decode.hooks) -> host counts [B]."""
        hook, with_tokens = current_hook()
        counts = self.count.cpu()
        if with_tokens:
            hook(counts, self.length, self.buf[:, : self.length].cpu())
        else:
            hook(counts, self.length)
        return counts

    def tokens(self) -> torch.Tensor:
        return self.buf[:, : self.length]


def select_tree(cond: torch.Tensor, a: Tree, b: Tree, width: int) -> Tree:
    """Per-request choice between two trees of the same size whose sizes are static (e.g. from
    the classmethods): row r is a's where cond[r], else b's.  Built on the device (no
    validation, no host read); ``width`` = max depth + 1."""
    n = cond.shape[0]
    a, b = a.expand(n), b.expand(n)
    picked = []
    for va, vb in zip(a._tensors(), b._tensors()):
        picked.append(torch.where(cond.reshape(-1, *([1] * (va.dim() - 1))), va, vb))
    leaves = max(a.num_leaves, b.num_leaves)  # rows take either tree's leaves
    return Tree._of(picked, width, leaves)


def init_rows(init, p0: torch.Tensor) -> torch.Tensor:
    """The initial window's draft distribution [B, V]: p(s_1) ("target"), uniform over the
    vocabulary ("uniform") or over the tokens of a [V] bool mask."""
    if isinstance(init, str):
        if init == "target":
            return p0
        if init == "uniform":
            return torch.full_like(p0, 1.0 / p0.shape[-1])
        raise ValueError(f"init must be 'target', 'uniform' or a [V] bool mask, got {init!r}")
    mask = torch.as_tensor(init, device=p0.device)
    if mask.shape != p0.shape[-1:] or mask.dtype != torch.bool or not bool(mask.any()):
        raise ValueError(f"init mask must be a non-empty [V={p0.shape[-1]}] bool tensor")
    return (mask.float() / mask.sum()).expand_as(p0)

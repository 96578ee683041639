"""The typed Python-to-kernel boundary (csrc/tensor_arg.h): bindings read each tensor's layout,
honour the strides of seeds and uniforms, and reject layouts their kernels cannot read with a
ValueError naming the argument -- never a read out of bounds."""

from __future__ import annotations

import pytest
import torch
from helpers import NO_GROUP, gen, random_probs

import specops
from specops import Tree, _build

pytestmark = pytest.mark.skipif(not _build.has_cpp(), reason="needs the compiled specops._C")


def _views(t: torch.Tensor) -> dict[str, torch.Tensor]:
    """The same values as ``t`` (1-D or 2-D) in other layouts: a strided slice of a wider
    tensor, a transpose of a tensor made the other way round, and (for rows of equal values)
    an expansion with stride 0."""
    wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
    wide[..., ::2] = t
    out = {"contiguous": t, "sliced": wide[..., ::2]}
    if t.dim() == 2:
        out["transposed"] = t.t().contiguous().t()
    return out


def test_tensor_arg_reads_the_layout():
    t = torch.arange(24, dtype=torch.float32).reshape(4, 6)[1:, ::2]
    ptr, dtype, cuda, sizes, strides = _build._C.tensor_arg(t)
    assert (ptr, dtype, cuda, sizes, strides) == (t.data_ptr(), "float32", False, (3, 3), (6, 2))
    e = torch.tensor([7], dtype=torch.int64).expand(5)
    assert _build._C.tensor_arg(e)[3:] == ((5,), (0,))
    assert _build._C.tensor_arg(None)[1] == "None"
    with pytest.raises(TypeError):
        _build._C.tensor_arg(3)


def _chain_inputs(g, b, k, v):
    """verify_chain's target [B, K+1, V] and draft [B, K, V] probs, and K tokens drawn from the
    draft."""
    target = random_probs(b, k + 1, v, generator=g)
    draft = random_probs(b, k, v, generator=g)
    tokens = torch.multinomial(draft.reshape(-1, v), 1, generator=g).reshape(b, k)
    return target, draft, tokens


@pytest.mark.parametrize("seed_layout", ["contiguous", "sliced", "expanded"])
def test_chain_per_request_seeds_in_any_layout(seed_layout):
    g = gen(0)
    b, k, v = 5, 3, 11
    target, draft, tokens = _chain_inputs(g, b, k, v)
    seeds = torch.randint(0, 2**40, (b,), generator=g)
    if seed_layout == "expanded":
        seeds = seeds[:1].expand(b)  # one seed for all, stride 0
    seed = _views(seeds)["sliced"] if seed_layout == "sliced" else seeds
    ref = specops.verify_chain(target, tokens, draft, seed=seeds.contiguous(), offset=3,
                               backend="reference")  # fmt: skip
    got = specops.verify_chain(target, tokens, draft, seed=seed, offset=3, backend="cpu")
    assert torch.equal(got.tokens, ref.tokens) and torch.equal(got.num_accepted, ref.num_accepted)


@pytest.mark.parametrize("layout", ["sliced", "transposed"])
def test_uniforms_read_with_their_strides(layout):
    g = gen(1)
    b, k, v = 4, 3, 9
    target, draft, tokens = _chain_inputs(g, b, k, v)
    u = torch.rand(b, k + 1, generator=g)
    ref = specops.verify_chain(target, tokens, draft, uniforms=u, backend="reference")
    got = specops.verify_chain(target, tokens, draft, uniforms=_views(u)[layout], backend="cpu")
    assert torch.equal(got.tokens, ref.tokens)
    # sample: uniforms [B] sliced, probs [B, V]
    p = random_probs(6, v, generator=g)
    u1 = torch.rand(6, generator=g)
    want = specops.sample(p, uniforms=u1, backend="reference")
    assert torch.equal(specops.sample(p, uniforms=_views(u1)["sliced"], backend="cpu"), want)
    # verify_jacobi on a tree window: uniforms [B, 2L]
    tree = Tree.kary_chain(2, 2, 6)
    tp = random_probs(b, 6, v, generator=g)
    dp = random_probs(b, 6, v, generator=g)
    win = torch.multinomial(dp.reshape(-1, v), 1, generator=g).reshape(b, 6)
    uj = torch.rand(b, 12, generator=g)
    rj = specops.verify_jacobi(tp, win, dp, tree=tree, uniforms=uj, backend="reference")
    gj = specops.verify_jacobi(tp, win, dp, tree=tree, uniforms=_views(uj)[layout], backend="cpu")
    assert torch.equal(gj.next_window, rj.next_window) and torch.equal(gj.path, rj.path)


def test_sample_out_in_a_strided_view_is_written_in_place():
    g = gen(2)
    p = random_probs(4, 3, 17, generator=g)
    want = specops.sample(p, seed=5, backend="reference")
    buf = torch.full((3, 8), -7, dtype=torch.int32)
    out = buf.t()[::2]  # [4, 3], strides (2, 8)
    specops.sample(p, seed=5, backend="cpu", out=out)
    assert torch.equal(out, want)
    assert (buf[:, 1::2] == -7).all()  # nothing written between the view's entries


def _chain_args(b=2, k=3, v=8):
    g = gen(3)
    target = random_probs(b, k + 1, v, generator=g)
    tokens = torch.zeros(b, k, dtype=torch.int32)
    out_t = torch.empty(b, k + 1, dtype=torch.int32)
    out_n = torch.empty(b, dtype=torch.int32)
    return dict(target_probs=target, draft_tokens=tokens, draft_probs=None, num_draft=None,
                rng=(None, 0, None, 0), neighbors=None, delta=0.0,
                codebook=None, group_window=0, group_p=0.0, group_d=0.0, image_start=0,
                greedy=False, uniforms=None, block=False, out_tokens=out_t,
                out_num_accepted=out_n)  # fmt: skip


@pytest.mark.parametrize(
    "name, value, words",
    [
        (
            "target_probs",
            lambda a: a["target_probs"].transpose(0, 2).contiguous().transpose(0, 2),
            "target_probs",
        ),
        ("target_probs", lambda a: a["target_probs"].double(), "target_probs must be float32"),
        ("draft_tokens", lambda a: a["draft_tokens"][:, :2], "draft_tokens has shape"),
        (
            "draft_tokens",
            lambda a: a["draft_tokens"].t().contiguous().t(),
            "draft_tokens must have a contiguous last",
        ),
        (
            "rng",
            lambda a: (torch.zeros(3, dtype=torch.int64), 0, None, 0),
            "seed must have 1 entry or one per",
        ),  # fmt: skip
        (
            "rng",
            lambda a: (None, 0, torch.zeros(2, dtype=torch.int64), 0),
            "offset must have exactly one",
        ),  # fmt: skip
        ("uniforms", lambda a: torch.rand(2, 3), "uniforms has shape"),
        (
            "out_tokens",
            lambda a: torch.empty(4, 2, dtype=torch.int32).t(),
            "out_tokens must be contiguous",
        ),
        (
            "out_num_accepted",
            lambda a: torch.empty(2, dtype=torch.int64),
            "out_num_accepted must be int32",
        ),
    ],
)
def test_bindings_reject_layouts_their_kernels_cannot_read(name, value, words):
    """The last guard: the Python layer normalises, but a binding called with a layout its kernel
    would misread raises a ValueError naming the argument."""
    args = _chain_args()
    args[name] = value(args)
    with pytest.raises(ValueError, match=f"specops.verify_chain: {words}"):
        _build._C.verify_chain_cpu(**args)


def test_bindings_reject_what_is_not_a_tensor():
    args = _chain_args()
    args["target_probs"] = [1.0, 2.0]
    with pytest.raises(TypeError):
        _build._C.verify_chain_cpu(**args)


@pytest.mark.parametrize(
    "rng",
    [
        (None, 0, None),
        [None, 0, None, 0],
        (None, 2**63, None, 0),
        (None, 0, None, 1.5),
        (None, 0, torch.zeros(1, dtype=torch.int64), None),
        ("seed", 0, None, 0),
    ],  # fmt: skip
)
def test_bindings_take_the_random_stream_as_one_rng_of_four(rng):
    """The binding reads an Rng (a tuple: seed tensor or None, int64 seed, offset tensor or None,
    int64 offset); anything else is pybind11's TypeError, which sends a fast path to the checked
    one."""
    args = _chain_args()
    _build._C.verify_chain_cpu(**{**args, "rng": specops.ops._rng.Rng(None, 7, None, 0)})
    args["rng"] = rng
    with pytest.raises(TypeError):
        _build._C.verify_chain_cpu(**args)


def test_commit_kv_binding_checks_the_cache_geometry():
    caches = torch.zeros(2, 2, 3, 8, 2, 4)
    cs = torch.zeros(3, dtype=torch.int32)
    slots = torch.full((3, 2), -1, dtype=torch.int32)
    with pytest.raises(ValueError, match="contiguous \\[Hkv, D\\] rows"):
        _build._C.commit_kv_cpu(caches.transpose(-1, -2), cs, slots, None)
    with pytest.raises(ValueError, match="cache_seqlens must be contiguous"):
        cs2 = torch.zeros(3, 2, dtype=torch.int32)[:, 0]
        _build._C.commit_kv_cpu(caches, cs2, slots, None)
    with pytest.raises(ValueError, match="batch dim"):
        _build._C.commit_kv_cpu(caches, cs[:2], slots[:2], None)


def _dispatched(fn) -> bool:
    """Whether ``fn()`` went through the dispatcher's specops::verify_chain."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return any(e.name == "specops::verify_chain" for e in prof.events())


def test_eager_calls_skip_the_dispatcher_and_traced_calls_do_not():
    """Eagerly the impl runs directly; under a dispatch mode (FakeTensorMode: what torch.compile
    and export trace with) the call goes through torch.ops.specops and its fake kernel."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    g = gen(4)
    target = random_probs(2, 4, 8, generator=g)
    tokens = torch.zeros(2, 3, dtype=torch.int64)
    args = (target, tokens, None, None, None, 0, None, 0, None, 0.0, *NO_GROUP, False, None,
            False, "cpu")  # fmt: skip
    assert _dispatched(lambda: torch.ops.specops.verify_chain(*args))  # the probe works
    assert not _dispatched(lambda: specops.verify_chain(target, tokens, backend="cpu"))
    with specops.validation(False), FakeTensorMode() as mode:
        ft, fk = mode.from_tensor(target), mode.from_tensor(tokens)
        r = specops.verify_chain(ft, fk, None, backend="cpu")
        assert r.tokens.shape == (2, 4) and r.tokens.dtype == torch.int32


def test_out_of_int64_seeds_and_offsets_are_clear_errors():
    p = torch.full((2, 5), 0.2)
    for kw in ({"seed": 2**64}, {"seed": -(2**63) - 1}, {"offset": 2**63}):
        name = next(iter(kw))
        with pytest.raises(ValueError, match=f"specops.sample: {name} must fit in int64"):
            specops.sample(p, **kw)
    specops.sample(p, seed=2**63 - 1, offset=-(2**63))  # the ends of the range are fine


def test_device_offsets_do_not_recompile():
    """The decode loop's offsets are a device counter advanced in place: one compiled graph
    serves every step (a Python-int offset would be a new constant per call)."""
    torch._dynamo.reset()
    p = random_probs(3, 7, generator=gen(5))
    calls = []

    def backend(gm, example_inputs):
        calls.append(1)
        return gm

    f = torch.compile(lambda p, o: specops.sample(p, seed=1, offset=o), backend=backend,
                      fullgraph=True)  # fmt: skip
    from specops.decode._loop import Offsets

    rng = Offsets()
    with specops.validation(False):  # value checks read the data: not traceable
        for _ in range(6):
            o = rng()
            assert torch.equal(f(p, o), specops.sample(p, seed=1, offset=int(o)))
    assert len(calls) == 1

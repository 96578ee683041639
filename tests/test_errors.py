"""Bad arguments to Tree's constructors, FeatureCache, path_similarity, gather_rows and
build_dynamic_tree raise ValueError/TypeError reading ``specops.<op>: <argument> must ...``."""

import pytest
import torch

import specops
from specops import Tree

NO_CUDA = "cpu" if torch.cuda.is_available() else "cuda"  # an unavailable device where we can


def _raises(exc, op, arg, fn):
    with pytest.raises(exc, match=rf"^specops\.{op}: {arg} must .*got"):
        fn()


@pytest.mark.parametrize(
    "exc,op,arg,fn",
    [
        (TypeError, "Tree.chain", "n", lambda: Tree.chain(2.0)),
        (TypeError, "Tree.chain", "n", lambda: Tree.chain(True)),
        (TypeError, "Tree.chain", "n", lambda: Tree.chain("3")),
        (ValueError, "Tree.chain", "n", lambda: Tree.chain(0)),
        (ValueError, "Tree.chain", "n", lambda: Tree.chain(2**70)),
        (TypeError, "Tree.chain", "batch", lambda: Tree.chain(3, batch=2.0)),
        (ValueError, "Tree.chain", "batch", lambda: Tree.chain(3, batch=-1)),
        (ValueError, "Tree.chain", "batch", lambda: Tree.chain(3, batch=2**62)),
        (ValueError, "Tree.chain", "device", lambda: Tree.chain(3, device="nope")),
        (ValueError, "Tree.kary", "device", lambda: Tree.kary(2, 2, device=1.5)),
        (TypeError, "Tree.kary", "k", lambda: Tree.kary(2.5, 3)),
        (ValueError, "Tree.kary", "k", lambda: Tree.kary(0, 3)),
        (TypeError, "Tree.kary", "depth", lambda: Tree.kary(2, None)),
        (ValueError, "Tree.kary", "depth", lambda: Tree.kary(2, -1)),
        (ValueError, "Tree.kary", "depth", lambda: Tree.kary(3, 10**9)),
        (TypeError, "Tree.kary_chain", "k", lambda: Tree.kary_chain(False, 2, 5)),
        (ValueError, "Tree.kary_chain", "length", lambda: Tree.kary_chain(2, 3, 6)),
        (TypeError, "Tree.kary_chain", "length", lambda: Tree.kary_chain(2, 3, 9.0)),
        (ValueError, "Tree.kary_chain", "depth", lambda: Tree.kary_chain(2, 20, 30)),
        (TypeError, "Tree.from_parents", "parents", lambda: Tree.from_parents([[-1, 0], [-1]])),
        (TypeError, "Tree.from_parents", "parents", lambda: Tree.from_parents([-1, 2**70])),
        (TypeError, "Tree.from_parents", "parents", lambda: Tree.from_parents(None)),
        (TypeError, "Tree.from_parents", "parents", lambda: Tree.from_parents(torch.ones(2) < 0)),
        (
            ValueError,
            "Tree.from_parents",
            "parents",
            lambda: Tree.from_parents(torch.zeros(2, 0, dtype=torch.int8)),
        ),
        (TypeError, "Tree.from_parents", "validate", lambda: Tree.from_parents([-1], validate=1)),
        (TypeError, "Tree.expand", "batch", lambda: Tree.chain(3).expand(2.0)),
        (ValueError, "Tree.expand", "batch", lambda: Tree.chain(3).expand(-1)),
        (ValueError, "Tree.expand", "batch", lambda: Tree.chain(3, batch=2).expand(3)),
    ],
)
def test_tree_constructor_errors(exc, op, arg, fn):
    _raises(exc, op, arg, fn)


def test_tree_unavailable_device():
    if NO_CUDA == "cuda":
        _raises(ValueError, "Tree.chain", "device", lambda: Tree.chain(3, device="cuda"))
    _raises(ValueError, "Tree.chain", "device", lambda: Tree.chain(3, device="cpu:x"))


def test_build_dynamic_tree_num_nodes():
    b, d, w, k = 1, 2, 2, 2
    args = (
        torch.zeros(b, dtype=torch.int32),
        torch.zeros(b, d, w, k, dtype=torch.int32),
        torch.zeros(b, d, w, k),
        torch.zeros(b, d - 1, w, dtype=torch.int32),
    )
    _raises(
        TypeError, "build_dynamic_tree", "num_nodes", lambda: specops.build_dynamic_tree(*args, 3.0)
    )
    _raises(
        ValueError, "build_dynamic_tree", "num_nodes", lambda: specops.build_dynamic_tree(*args, 0)
    )
    big = (torch.zeros(1, dtype=torch.int32), torch.zeros(1, 2, 200, 100, dtype=torch.int32),
           torch.zeros(1, 2, 200, 100), torch.zeros(1, 1, 200, dtype=torch.int32))  # fmt: skip
    _raises(  # 20101 candidates, but a Tree holds at most Tree.MAX_NODES
        ValueError, "build_dynamic_tree", "num_nodes",
        lambda: specops.build_dynamic_tree(*big, Tree.MAX_NODES + 1),
    )  # fmt: skip


# FeatureCache -------------------------------------------------------------------------------
FC = "FeatureCache"


@pytest.mark.parametrize(
    "exc,arg,kw",
    [
        (TypeError, "batch", dict(batch=2.0)),
        (TypeError, "batch", dict(batch=True)),
        (ValueError, "capacity", dict(capacity=-8)),
        (TypeError, "hidden", dict(hidden="4")),
        (ValueError, "batch \\* capacity \\* hidden", dict(capacity=2**62, hidden=2**62)),
        (TypeError, "dtype", dict(dtype=torch.float64)),
        (TypeError, "dtype", dict(dtype="float32")),
        (TypeError, "dtype", dict(dtype=torch.int32)),
        (ValueError, "device", dict(device="nope")),
        (ValueError, "device", dict(device=1.5)),
        (ValueError, "backend", dict(backend="nope")),
    ],
)
def test_feature_cache_constructor_errors(exc, arg, kw):
    args = dict(batch=2, capacity=8, hidden=4) | kw
    _raises(exc, FC, arg, lambda: specops.FeatureCache(**args))


def test_feature_cache_unavailable_device():
    if NO_CUDA == "cuda":
        _raises(ValueError, FC, "device", lambda: specops.FeatureCache(2, 8, 4, device="cuda"))


def test_feature_cache_method_errors():
    fc = specops.FeatureCache(2, 8, 4)
    pos = torch.tensor([[0, 1, 2], [3, 4, -1]])
    feats = torch.zeros(2, 3, 4)
    w, r, a = f"{FC}.write", f"{FC}.read", f"{FC}.age"
    cases = [
        (TypeError, w, "positions", lambda: fc.write([[0]], feats, 0)),
        (TypeError, w, "positions", lambda: fc.write(pos.float(), feats, 0)),
        (ValueError, w, "positions", lambda: fc.write(pos[0], feats, 0)),
        (ValueError, w, "positions", lambda: fc.write(pos[:1], feats[:1], 0)),
        (TypeError, w, "feats", lambda: fc.write(pos, feats.int(), 0)),
        (TypeError, w, "feats", lambda: fc.write(pos, feats.double(), 0)),
        (TypeError, w, "feats", lambda: fc.write(pos, [[0.0]], 0)),
        (ValueError, w, "feats", lambda: fc.write(pos, feats[:, :, :2], 0)),
        (TypeError, w, "step", lambda: fc.write(pos, feats, 1.5)),
        (TypeError, w, "step", lambda: fc.write(pos, feats, True)),
        (TypeError, w, "step", lambda: fc.write(pos, feats, None)),
        (ValueError, w, "step", lambda: fc.write(pos, feats, 2**40)),
        (TypeError, w, "step", lambda: fc.write(pos, feats, torch.tensor(1.0))),
        (ValueError, w, "step", lambda: fc.write(pos, feats, torch.tensor([1, 2, 3]))),
        (TypeError, r, "positions", lambda: fc.read(pos.float())),
        (ValueError, r, "positions", lambda: fc.read(pos[:, :, None])),
        (TypeError, a, "positions", lambda: fc.age(pos.double(), 1)),
        (TypeError, a, "step", lambda: fc.age(pos, 1.5)),
        (ValueError, a, "step", lambda: fc.age(pos, -(2**40))),
    ]
    for exc, op, arg, fn in cases:
        _raises(exc, op, arg, fn)


# path_similarity / gather_rows --------------------------------------------------------------
PATHS = torch.zeros(2, 3, 5, dtype=torch.int32)
CB = torch.randn(10, 6)


@pytest.mark.parametrize(
    "exc,arg,fn",
    [
        (TypeError, "alpha", lambda: specops.path_similarity(PATHS, CB, alpha="x")),
        (TypeError, "alpha", lambda: specops.path_similarity(PATHS, CB, alpha=None)),
        (TypeError, "alpha", lambda: specops.path_similarity(PATHS, CB, alpha=True)),
        (TypeError, "alpha", lambda: specops.path_similarity(PATHS, CB, alpha=torch.tensor(0.5))),
        (ValueError, "alpha", lambda: specops.path_similarity(PATHS, CB, alpha=10**400)),
        (ValueError, "alpha", lambda: specops.path_similarity(PATHS, CB, alpha=float("nan"))),
        (ValueError, "alpha", lambda: specops.path_similarity(PATHS, CB, alpha=1e300)),
        (TypeError, "stride", lambda: specops.path_similarity(PATHS, CB, stride=1.0)),
        (TypeError, "stride", lambda: specops.path_similarity(PATHS, CB, stride=True)),
        (ValueError, "stride", lambda: specops.path_similarity(PATHS, CB, stride=0)),
        (TypeError, "paths", lambda: specops.path_similarity(PATHS.float(), CB)),
        (TypeError, "paths", lambda: specops.path_similarity([[[0]]], CB)),
        (TypeError, "codebook", lambda: specops.path_similarity(PATHS, CB.double())),
        (TypeError, "codebook", lambda: specops.path_similarity(PATHS, None)),
        (ValueError, "codebook", lambda: specops.path_similarity(PATHS, CB[0])),
    ],
)
def test_path_similarity_errors(exc, arg, fn):
    _raises(exc, "path_similarity", arg, fn)


@pytest.mark.parametrize("backend", ["auto", "reference"])
def test_path_similarity_huge_stride_reads_position_0(backend):
    # every stride >= L reads position 0 alone (no int64 overflow, no alpha^stride overflow)
    g = torch.Generator().manual_seed(0)
    paths, cb = torch.randint(0, 10, (2, 3, 5), generator=g), torch.randn(10, 6, generator=g)
    want = specops.path_similarity(paths[:, :, :1], cb, backend=backend)
    for stride in (5, 2000, 2**70):
        got = specops.path_similarity(paths, cb, alpha=2.0, stride=stride, backend=backend)
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float64, torch.bool])
def test_gather_rows_src_dtype(dtype):
    src = torch.zeros(2, 3, 4, dtype=dtype)
    _raises(TypeError, "gather_rows", "src", lambda: specops.gather_rows(src, torch.zeros(2, 1)))
    _raises(
        TypeError, "gather_rows", "src",
        lambda: specops.gather_rows(src, torch.zeros(2, 1, dtype=torch.long)),
    )  # fmt: skip

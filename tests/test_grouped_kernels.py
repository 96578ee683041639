"""GSD grouped acceptance (``relax=specops.Grouping``) on the compiled backends: the C++ twin
and cuda_sim (the CUDA kernels' device code) equal the reference token for token on the same
Philox draws, for verify_chain, verify_tree and verify_jacobi; Triton's verify_chain too."""

from __future__ import annotations

import pytest
import torch
from helpers import KERNEL_BACKENDS, backend_device

import specops
from specops import Grouping, Tree
from specops.reference.grouped import group_sums

BACKENDS = KERNEL_BACKENDS  # cpu, cuda (GPU runs only), cuda_sim
CHAIN_BACKENDS = (*KERNEL_BACKENDS, "triton")


def _on(backend, *ts):
    """The tensors on the backend's device (cuda: the GPU; triton: where it runs; the CPU)."""
    dev = backend_device(backend) if backend == "triton" else "cuda" if backend == "cuda" else "cpu"
    return [t.to(dev) if isinstance(t, torch.Tensor) else t for t in ts]


def _to(backend, relax):
    return relax._replace(codebook=_on(backend, relax.codebook)[0])


def _probs(g, shape, ties):
    if ties:  # multiples of 1/sum: many equal entries, ordered by id
        w = torch.randint(0, 4, shape, generator=g).float()
        w[..., 0] += 1
        return w / w.sum(-1, keepdim=True)
    return torch.softmax(2.5 * torch.randn(shape, generator=g), -1)


def _relax(g, v, w, image_range=None, dim=3, d_thr=2.0):
    vi = v if image_range is None else image_range[1] - image_range[0]
    return Grouping(torch.randn(vi, dim, generator=g), w, 0.15, d_thr, image_range)


CASES = [(7, False, None), (3, True, None), (16, True, (4, 36)), (1, False, (0, 20))]


@pytest.mark.parametrize("backend", CHAIN_BACKENDS)
@pytest.mark.parametrize("w,ties,rng", CASES)
@pytest.mark.parametrize("deterministic", [False, True])
def test_chain_equals_reference(backend, w, ties, rng, deterministic):
    g = torch.Generator().manual_seed(w)
    b, k, v = 6, 4, 40
    p = _probs(g, (b, k + 1, v), ties)
    q = _probs(g, (b, k, v), ties)
    x = torch.multinomial(q.reshape(-1, v), 1, generator=g).reshape(b, k)
    x[0, 2] = -1
    relax = _relax(g, v, w, rng)
    q = None if deterministic else q
    want = specops.verify_chain(p, x, q, seed=5, relax=relax, backend="reference")
    pd, xd, qd = _on(backend, p, x, q)
    got = specops.verify_chain(pd, xd, qd, seed=5, relax=_to(backend, relax), backend=backend)
    assert torch.equal(got.tokens.cpu(), want.tokens)
    assert torch.equal(got.num_accepted.cpu(), want.num_accepted)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("w,ties,rng", CASES)
def test_tree_equals_reference(backend, w, ties, rng):
    g = torch.Generator().manual_seed(10 + w)
    tree = Tree.kary(2, 3)
    b, n, v = 5, tree.num_nodes, 40
    p = _probs(g, (b, n, v), ties)
    q = _probs(g, (b, n, v), ties)
    parents = tree.parents[0] if tree.parents.dim() == 2 else tree.parents
    x = torch.zeros(b, n, dtype=torch.long)
    for i in range(1, n):
        x[:, i] = torch.multinomial(q[:, int(parents[i])], 1, generator=g)[:, 0]
    relax = _relax(g, v, w, rng)
    for wor in (False, True):
        want = specops.verify_tree(p, tree, x, q, without_replacement=wor, seed=3, relax=relax,
                                   backend="reference")  # fmt: skip
        pd, xd, qd = _on(backend, p, x, q)
        got = specops.verify_tree(pd, tree.to(pd.device), xd, qd, without_replacement=wor,
                                  seed=3, relax=_to(backend, relax), backend=backend)  # fmt: skip
        assert torch.equal(got.path.cpu(), want.path)
        assert torch.equal(got.tokens.cpu(), want.tokens)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("w,ties,rng", CASES)
@pytest.mark.parametrize("continue_after_reject", [False, True])
def test_jacobi_equals_reference(backend, w, ties, rng, continue_after_reject):
    g = torch.Generator().manual_seed(20 + w)
    b, L, v = 5, 6, 40
    p = _probs(g, (b, L, v), ties)
    q = _probs(g, (b, L, v), ties)
    x = torch.multinomial(q.reshape(-1, v), 1, generator=g).reshape(b, L)
    relax = _relax(g, v, w, rng)
    kw = dict(seed=7, continue_after_reject=continue_after_reject)
    want = specops.verify_jacobi(p, x, q, relax=relax, backend="reference", **kw)
    pd, xd, qd = _on(backend, p, x, q)
    got = specops.verify_jacobi(pd, xd, qd, relax=_to(backend, relax), backend=backend, **kw)
    assert torch.equal(got.num_accepted.cpu(), want.num_accepted)
    assert torch.equal(got.next_window.cpu(), want.next_window)


@pytest.mark.parametrize("backend", CHAIN_BACKENDS)
def test_large_vocabulary_equals_reference(backend):
    # Lumina-mGPT's image range inside a larger vocabulary, the authors' settings
    g = torch.Generator().manual_seed(0)
    b, k, v = 2, 8, 4096
    p = torch.softmax(3 * torch.randn(b, k + 1, v, generator=g), -1)
    q = torch.softmax(torch.log(p[:, :k]) + 0.5 * torch.randn(b, k, v, generator=g), -1)
    x = torch.multinomial(q.reshape(-1, v), 1, generator=g).reshape(b, k)
    relax = Grouping(0.3 * torch.randn(3000, 8, generator=g), 7, 0.15, 0.5, (4, 3004))
    want = specops.verify_chain(p, x, q, seed=1, relax=relax, backend="reference")
    pd, xd, qd = _on(backend, p, x, q)
    got = specops.verify_chain(pd, xd, qd, seed=1, relax=_to(backend, relax), backend=backend)
    assert torch.equal(got.tokens.cpu(), want.tokens)
    # fewer valid drafts (num_draft, a -1 pad): CUDA's pre-pass tests only those, and the split
    # final draw reads the decisions
    nd, xpad = torch.tensor([3, 8]), x.clone()
    xpad[1, 5] = -1
    for seed, accepted in ((2, [3, 5]), (3, [2, 4])):  # every valid draft passes; one fails
        want = specops.verify_chain(p, xpad, q, seed=seed, relax=relax, num_draft=nd,
                                    backend="reference")  # fmt: skip
        assert want.num_accepted.tolist() == accepted
        got = specops.verify_chain(*_on(backend, p, xpad, q), seed=seed, relax=_to(backend, relax),
                                   num_draft=_on(backend, nd)[0], backend=backend)  # fmt: skip
        assert torch.equal(got.tokens.cpu(), want.tokens)


@pytest.mark.parametrize("ties", [False, True])
def test_triton_window_spans_tiles(ties):
    # V over Triton's 1024-entry window tile: the window is merged across tiles; with ties, equal
    # probabilities in different tiles are ordered by id
    backend_device("triton")
    g = torch.Generator().manual_seed(7)
    b, k, v = 2, 4, 9000
    p = _probs(g, (b, k + 1, v), ties)
    q = _probs(g, (b, k, v), ties)
    x = torch.multinomial(q.reshape(-1, v), 1, generator=g).reshape(b, k)
    relax = Grouping(0.05 * torch.randn(v, 4, generator=g), 16, 1.0, 0.5)
    want = specops.verify_chain(p, x, q, seed=2, relax=relax, backend="reference")
    got = specops.verify_chain(p, x, q, seed=2, relax=relax, backend="triton")
    assert torch.equal(got.tokens, want.tokens)
    assert torch.equal(got.num_accepted, want.num_accepted)


@pytest.mark.parametrize("backend", ["cpu", "cuda_sim", "triton"])
@pytest.mark.parametrize("w", [1, 3, 7, 16])
def test_group_mass_by_uniform_sweep(backend, w):
    # One request copied over n rows with caller uniforms on a grid for draft 0: row j accepts
    # iff u_j * Q < P, so the accepted rows read P / Q to 1 / n.  Wide thresholds put the whole
    # window in the group: a window one entry short or long moves P / Q by several grid steps.
    pd = _on(backend, torch.zeros(1))[0].device
    g = torch.Generator().manual_seed(w)
    n, v = 96, 200
    p = _probs(g, (1, 2, v), False).expand(n, 2, v).contiguous()
    q = _probs(g, (1, 1, v), False).expand(n, 1, v).contiguous()
    relax = Grouping(torch.zeros(v, 2), w, 1.0, 1.0)
    # a draft whose group ratio P / Q lies inside the sweep, by the reference's own sums
    ids = torch.arange(v)
    big_p, big_q = group_sums(p[0, 0].expand(v, v), q[0, 0].expand(v, v), ids, relax)
    ratio = big_p / big_q
    x = torch.full((n, 1), int(ids[(ratio > 0.2) & (ratio < 0.8)][0]))
    u = torch.stack([(torch.arange(n) + 0.5) / n, torch.full((n,), 0.5)], -1)
    want = specops.verify_chain(p, x, q, uniforms=u, relax=relax, backend="reference")
    got = specops.verify_chain(p.to(pd), x.to(pd), q.to(pd), uniforms=u.to(pd),
                               relax=_to(backend, relax), backend=backend)  # fmt: skip
    assert 0 < int(want.num_accepted.sum()) < n  # the sweep crosses P / Q
    assert torch.equal(got.num_accepted.cpu(), want.num_accepted)


def test_errors_name_the_argument():
    g = torch.Generator().manual_seed(0)
    p = _probs(g, (2, 3, 8), False)
    q = _probs(g, (2, 2, 8), False)
    x = torch.zeros(2, 2, dtype=torch.long)
    cb = torch.randn(8, 2)
    with pytest.raises(ValueError, match="relax.window"):
        specops.verify_chain(p, x, q, relax=Grouping(cb, 0))
    with pytest.raises(ValueError, match="relax.p_threshold"):
        specops.verify_jacobi(p[:, :2], x, q, relax=Grouping(cb, 2, 0.0))
    with pytest.raises(ValueError, match="relax.d_threshold"):
        qt = _probs(g, (2, 3, 8), False)
        x3 = torch.zeros(2, 3, dtype=torch.long)
        specops.verify_tree(p, Tree.chain(3), x3, qt, relax=Grouping(cb, 2, 0.1, -1.0))
    with pytest.raises(ValueError, match="relax.codebook has 6 rows"):
        specops.verify_chain(p, x, q, relax=Grouping(cb[:6]))
    with pytest.raises(ValueError, match="greedy"):
        specops.verify_chain(p, x, q, relax=Grouping(cb), greedy=True)
    with pytest.raises(ValueError, match="block"):
        specops.verify_chain(p, x, q, relax=Grouping(cb), block=True)

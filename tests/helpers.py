"""Shared test helpers: random distributions and the statistical tests used across files."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from specops import _build

# backend "cuda_sim": the CUDA kernels' device code run on the CPU (csrc/sim).  Every test that
# runs backend "cuda" on a GPU runs it too, with the same inputs and assertions.
CUDA_SIM = pytest.param(
    "cuda_sim",
    marks=pytest.mark.skipif(not _build.has_cuda_sim(), reason="specops._C built without cuda_sim"),
)
# the compiled kernels: the C++ CPU twin, CUDA on a GPU, and CUDA's device code on the CPU
KERNEL_BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu), CUDA_SIM]


def one_torch_thread_fixture():
    """A module's autouse fixture (``_one_torch_thread = one_torch_thread_fixture()``): the
    reference's many small [B, V] torch ops run up to 100x slower with two intra-op threads on a
    busy two-core machine (spinning workers): one thread for the module."""

    @pytest.fixture(autouse=True, scope="module")
    def _one_torch_thread():
        n = torch.get_num_threads()
        torch.set_num_threads(1)
        yield
        torch.set_num_threads(n)

    return _one_torch_thread


def triton_device() -> str | None:
    """Where backend "triton" runs in this session: the CPU under the interpreter (CI), the GPU
    when one is there (compiled kernels), else nowhere (None)."""
    if _build.triton_interpret():
        return "cpu"
    return "cuda" if torch.cuda.is_available() and _build.has_triton() else None


def backend_device(backend: str) -> str:
    """Where ``backend`` runs its inputs: triton_device() for "triton" (skips the test where
    Triton runs nowhere), the CPU otherwise (skips "cpu" without the C++ build)."""
    if backend == "triton":
        dev = triton_device()
        if dev is None:
            pytest.skip("triton needs the interpreter or a GPU")
        return dev
    if backend == "cpu" and not _build.has_cpp():
        pytest.skip("no C++ build")
    return "cpu"


def gen(seed: int) -> torch.Generator:
    """A CPU generator: test inputs are drawn on the CPU, then moved where the backend runs."""
    return torch.Generator().manual_seed(seed)


def to_device(obj, dev):
    """Tensors, Relaxations and Trees moved to ``dev``; anything else as it is."""
    from specops import Relaxation, Tree

    if isinstance(obj, torch.Tensor):
        return obj.to(dev)
    if isinstance(obj, Relaxation):
        return Relaxation(obj.neighbors.to(dev), obj.delta)
    if isinstance(obj, Tree):
        return obj.to(dev)
    return obj


def random_probs(*shape, generator=None, sharpness=1.0, zero_frac=0.0, device="cpu"):
    """Random distributions over the last dim; ``sharpness`` > 1 concentrates the mass and
    ``zero_frac`` zeroes that fraction of entries (never a whole row)."""
    logits = torch.randn(*shape, generator=generator, dtype=torch.float64) * sharpness
    p = torch.softmax(logits, -1)
    if zero_frac > 0:
        drop = torch.rand(*shape, generator=generator) < zero_frac
        drop[..., 0] &= ~drop.all(-1)
        p = torch.where(drop, 0.0, p)
        p = p / p.sum(-1, keepdim=True)
    return p.to(torch.float32).to(device)


def kv_caches(g, layers, b, capacity, hkv, d, page=None, dtype=torch.float32, idt=torch.int32):
    """Random stacked caches and their block table (None): contiguous [layers, 2, B, capacity,
    Hkv, D], or with ``page`` paged [layers, 2, pages, page, Hkv, D] with 2 spare pages and a
    shuffled block table [B, capacity // page] of dtype ``idt``."""
    if page is None:
        return torch.randn(layers, 2, b, capacity, hkv, d, generator=g).to(dtype), None
    width = capacity // page
    num_pages = b * width + 2
    caches = torch.randn(layers, 2, num_pages, page, hkv, d, generator=g).to(dtype)
    bt = torch.randperm(num_pages, generator=g)[: b * width].view(b, width).to(idt)
    return caches, bt


def served_vocab_logits(seed: int, rows: int):
    """The served vocabularies' GPU inputs, one V at a time: (cond, uncond) bfloat16 logits
    [4, rows, V] (drawn on the CPU from ``seed``), per-request temperature and top_k [4]."""
    g = torch.Generator().manual_seed(seed)
    for v in (16384, 65536, 184622):
        c = (torch.randn(4, rows, v, generator=g) * 3).bfloat16().cuda()
        u = (torch.randn(4, rows, v, generator=g) * 3).bfloat16().cuda()
        t = torch.tensor([1.0, 0.0, 0.7, 1.2], device="cuda")
        k = torch.tensor([2000, 1000, 0, 1], device="cuda", dtype=torch.int32)
        yield c, u, t, k


def chi2_pvalue(counts, expected_probs, min_expected=5.0) -> float:
    """Pearson chi-square goodness of fit; cells with small expectations are pooled."""
    counts = np.asarray(counts, dtype=np.float64).ravel()
    probs = np.asarray(expected_probs, dtype=np.float64).ravel()
    n = counts.sum()
    exp = probs / probs.sum() * n
    if np.any((exp == 0) & (counts > 0)):
        return 0.0  # an impossible outcome occurred
    order = np.argsort(exp)
    c, e = counts[order], exp[order]
    pooled_c, pooled_e, acc_c, acc_e = [], [], 0.0, 0.0
    for ci, ei in zip(c, e):
        acc_c += ci
        acc_e += ei
        if acc_e >= min_expected:
            pooled_c.append(acc_c)
            pooled_e.append(acc_e)
            acc_c = acc_e = 0.0
    if acc_e > 0 and pooled_e:
        pooled_c[-1] += acc_c
        pooled_e[-1] += acc_e
    if len(pooled_e) < 2:
        return 1.0
    return float(stats.chisquare(pooled_c, pooled_e).pvalue)


def aot_compile(script: str, *args: str, timeout: int = 300) -> str:
    """Run ``script`` (Python source that compiles Triton kernels ahead of time, e.g. for sm_90
    with ``triton.compile(src, target=GPUTarget("cuda", 90, 32))``, and prints "compiled") in a
    fresh interpreter outside the Triton interpreter; no GPU needed.  Skips without triton or
    without ptxas; fails with the compiler's error otherwise.  Returns stdout."""
    import os
    import subprocess
    import sys

    import pytest

    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="0")
    res = subprocess.run(  # from tests/: `python -c` puts the working directory on sys.path, and
        [sys.executable, "-c", script, *args],  # a checkout's source tree would shadow a wheel
        env=env, capture_output=True, text=True, timeout=timeout, cwd=os.path.dirname(__file__),
    )  # fmt: skip
    if "compiled" not in res.stdout and ("ptxas" in res.stderr and "not found" in res.stderr):
        pytest.skip("no ptxas for ahead-of-time compilation")
    assert res.returncode == 0 and "compiled" in res.stdout, res.stderr[-3000:]
    return res.stdout


# The raw ops' grouped-acceptance arguments when there is no grouping (relax=None or LANTERN):
# codebook, group_window, group_p, group_d, image_start, between delta and the next argument.
NO_GROUP = (None, 0, 0.0, 0.0, 0)

"""cuda_sim itself: the SIMT emulation that runs the CUDA kernels' device code on the CPU
(csrc/sim).  The kernels' own correctness is tested where each op is (every test that runs
backend "cuda" on a GPU also runs "cuda_sim"); here:

- each detector fires on a planted fault (a kernel variant compiled in for these tests only,
  csrc/sim/planted.cpp) and stays quiet on the same kernel without the bug;
- the OS-thread mode (one OS thread per simulated thread, the ThreadSanitizer stage's mode)
  gives the same results as the fiber mode, on every kernel;
- under ThreadSanitizer (scripts/racecheck.sh sets SPECOPS_TSAN_STAGE=1) the planted missing
  barrier is reported as a data race and every real kernel runs race-free;
- backend selection: "cuda_sim" is asked for by name only, on CPU tensors, for ops with a CUDA
  kernel."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from helpers import gen, random_probs

import specops
from specops import Tree, _build

pytestmark = pytest.mark.skipif(not _build.has_cuda_sim(), reason="built without cuda_sim")
TSAN_STAGE = os.environ.get("SPECOPS_TSAN_STAGE") == "1"
BLOCK = 256  # the planted kernels' block
PLANTED = _build._C.cuda_sim_planted if _build.has_cuda_sim() else None


# --------------------------------------------------------------------------------------------
# planted faults
# --------------------------------------------------------------------------------------------
FAULTS = {
    "divergent_barrier": r"branch_barrier_kernel<BUG>, block \(0, 0, 0\): __syncthreads at "
    r"planted\.cpp:\d+ reached by 128 of 256 threads; 128 exited",
    "dynamic_smem_off_by_one": r"dynamic_smem_kernel<BUG>, block \(0, 0, 0\): a write 0 bytes "
    r"past the end of its 1024 bytes of dynamic shared memory",
    "static_smem_off_by_one": r"static_smem_kernel<BUG>, block \(0, 0, 0\): thread 255: "
    r"shared-memory \(SmemArray\) index 256 out of range \[0, 256\)",
    "divergent_shuffle": r"shuffle_kernel<BUG>, block \(0, 0, 0\): 128 threads wait at a warp "
    r"shuffle that not every lane of their warp reaches",
}


@pytest.fixture(params=["fibers", "os"])
def threads(request, monkeypatch):
    """Both scheduling modes (the TSan build always runs OS threads)."""
    monkeypatch.setenv("SPECOPS_SIM_THREADS", request.param)
    return request.param


@pytest.mark.parametrize("kind", list(FAULTS))
def test_planted_fault_is_reported(kind, threads):
    """A launch with the bug fails with the kernel's name, the block and what went wrong; the
    process goes on (no hang, no crash), and the kernel without the bug runs."""
    if kind == "dynamic_smem_off_by_one" and "libasan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("under ASan the buffer has no canary: ASan itself reports the write")
    with pytest.raises(RuntimeError, match="cuda_sim: kernel " + FAULTS[kind]):
        PLANTED(kind)
    out = PLANTED("ok_" + kind)
    want = {
        "divergent_barrier": [7] * BLOCK,
        "dynamic_smem_off_by_one": list(range(BLOCK - 1, -1, -1)),
        "static_smem_off_by_one": list(range(BLOCK - 1, -1, -1)),
        "divergent_shuffle": [t ^ 1 for t in range(BLOCK)],
    }[kind]
    assert out == want


def test_removed_barrier_reads_stale_shared_memory():
    """Fiber mode runs a block's threads in a fresh shuffled order between barriers: a read of
    shared memory that a missing __syncthreads leaves unordered with its write sees the value of
    an earlier block.  (OS-thread mode under ThreadSanitizer reports it as a race, below.)"""
    os.environ.pop("SPECOPS_SIM_THREADS", None)
    want = [(b + 1) * BLOCK * (BLOCK - 1) // 2 for b in range(4)]
    ok = PLANTED("ok_removed_barrier")
    assert [ok[b * BLOCK : (b + 1) * BLOCK] for b in range(4)] == [[w] * BLOCK for w in want]
    if TSAN_STAGE:
        pytest.skip("the TSan build always runs OS threads (the race test below covers it)")
    bad = PLANTED("removed_barrier")
    stale = sum(v != want[i // BLOCK] for i, v in enumerate(bad))
    assert stale > BLOCK  # most threads run before thread 0 in some block


@pytest.mark.skipif(not TSAN_STAGE, reason="ThreadSanitizer stage only (scripts/racecheck.sh)")
def test_removed_barrier_is_a_data_race_under_tsan(tmp_path):
    """The same planted kernel in a child process under ThreadSanitizer: a data race report
    naming the kernel, and a failing exit status."""
    code = "import specops; specops._build._C.cuda_sim_planted('removed_barrier')"
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert r.returncode != 0
    assert "WARNING: ThreadSanitizer: data race" in r.stderr
    assert "broadcast_sum_kernel<true>" in r.stderr


# --------------------------------------------------------------------------------------------
# every kernel: OS-thread mode == fiber mode == the CPU twin; race-free under TSan
# --------------------------------------------------------------------------------------------
V = 50


def _cases():
    g = gen(5)
    b = 2
    p = random_probs(b, 4, V, generator=g)
    q = random_probs(b, 3, V, generator=g)
    x = torch.randint(0, V, (b, 3), generator=g)
    tree = Tree.kary(2, 3)
    tp = random_probs(b, 7, V, generator=g)
    tq = random_probs(b, 7, V, generator=g)
    tx = torch.randint(0, V, (b, 7), generator=g)
    win = Tree.kary_chain(2, 2, 7)
    caches = torch.randn(2, 2, b, 12, 2, 8, generator=g)
    slots = torch.tensor([[0, 2, -1], [1, 2, 3]], dtype=torch.int32)

    def commit(be):
        c, cs = caches.clone(), torch.tensor([3, 5], dtype=torch.int32)
        specops.commit_kv(c, cs, slots, backend=be)
        return c, cs

    return {
        "sample": lambda be: specops.sample(p[:, 0], seed=3, backend=be),
        "verify_chain": lambda be: specops.verify_chain(p, x, q, seed=4, backend=be),
        "verify_tree": lambda be: specops.verify_tree(
            tp, tree, tx, tq, without_replacement=True, seed=5, backend=be
        ),
        "sample_without_replacement": lambda be: specops.sample_without_replacement(
            p[:, 1], 3, seed=6, backend=be
        ),
        "path_acceptance": lambda be: specops.path_acceptance(tp, tq, tree, tx, backend=be),
        "verify_jacobi chain": lambda be: specops.verify_jacobi(
            tp, tx, tq, num_candidates=2, seed=7, backend=be
        ),
        "verify_jacobi tree": lambda be: specops.verify_jacobi(
            tp, tx, tq, tree=win, num_candidates=2, seed=8, backend=be
        ),
        "commit_kv": commit,
    }


def _flat(r):
    return [t for t in (r if isinstance(r, tuple) else (r,)) if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("op", list(_cases()))
def test_every_kernel_in_both_modes(op, threads):
    """Under TSan (OS threads) a race in any kernel aborts the run with its report."""
    call = _cases()[op]
    want = _flat(call("cpu"))
    got = _flat(call("cuda_sim"))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


# --------------------------------------------------------------------------------------------
# backend selection
# --------------------------------------------------------------------------------------------
def test_backend_rules():
    p = torch.softmax(torch.randn(2, 9), -1)
    assert specops.build_info()["cuda_sim"] is True
    assert sorted(_build._C.cuda_sim_kernels) == sorted(
        ["sample", "verify_chain", "verify_tree", "sample_without_replacement",
         "path_acceptance", "verify_jacobi", "commit_kv"]
    )  # fmt: skip
    from specops.ops._common import pick_backend

    assert pick_backend("sample", "auto", p.device, ("cuda", "cpu", "reference")) == "cpu"
    with pytest.raises(RuntimeError, match="backend 'cuda_sim' is not available.*no CUDA kernel"):
        specops.gather_rows(torch.randn(1, 3, 2), torch.zeros(1, 1, dtype=torch.long),
                            backend="cuda_sim")  # fmt: skip
    if torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="needs CPU tensors"):
            specops.sample(p.cuda(), backend="cuda_sim")


def test_completion_counters_are_left_zero():
    """jacobi_tree_kernel and commit_kv_kernel signal completion through per-request counters
    that the last block resets (so the next launch, or a CUDA graph replay, starts from zero):
    repeated launches keep matching the CPU twin and leave the counters zero."""
    from specops.ops import jacobi, kv

    cases = _cases()
    for _ in range(3):
        for op in ("verify_jacobi tree", "commit_kv"):
            want, got = _flat(cases[op]("cpu")), _flat(cases[op]("cuda_sim"))
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, rtol=0, atol=0)
    cpu = [t for (dev, _, _), t in jacobi._COUNTERS.items() if dev == "cpu"]
    assert cpu and all(int(t.abs().sum()) == 0 for t in cpu)
    assert int(kv._counters[torch.device("cpu")].abs().sum()) == 0

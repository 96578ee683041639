"""The traffic counters of cuda_sim (bench/traffic_cuda.py, csrc/sim/traffic/traffic.cpp) count
what a GPU's l1tex counters count: planted kernels of known traffic give the exact numbers
worked out by hand, and counting a real op changes none of its results."""

from __future__ import annotations

import pytest
import torch

import specops
from bench import traffic_cuda

pytestmark = pytest.mark.skipif(
    not traffic_cuda.available(), reason="needs specops._traffic (a GCC build with cuda_sim)"
)

N = 8192  # float32 entries: 32 KiB a tensor


# kind, grid -> bytes read, bytes written, requests, sectors, CTAs with work, critical CTA bytes.
# A warp request is 32 lanes; a sector 32 bytes.  scalar4: N/32 load and N/32 store requests of
# 4 sectors.  vec16: N/128 each, 16 sectors (the float4 copy the compiler splits into scalar
# loads is put back together).  stride32: N/32 threads read src[32 g] (32 lanes 128 B apart: 32
# sectors a request) and write dst[g] (4 sectors): 8 + 8 requests.  twice: scalar4 twice.
# one_cta: block 0 alone makes the scalar4 pass; the other 7 return.
# tail: scalar4 over N - 40 entries: 254 full warps, then one of 24 active lanes (96 B: 3
# sectors), then a warp with none (no request); block 3 holds the 40 missing entries.
# barrier: scalar4's global traffic through shared memory, 2 barriers per 256-entry tile, 8 tiles
# a block at grid 4.  atomic: N/32 load requests of src (4 sectors), then each atomicAdd on
# 32 consecutive words a read and a write request of 4 sectors; 4 B read + 4 B written a lane.
PLANTED = {
    ("scalar4", 4): (4 * N, 4 * N, N // 16, N // 4, 4, 2 * N, 0),
    ("vec16", 4): (4 * N, 4 * N, N // 64, N // 4, 4, 2 * N, 0),
    ("stride32", 1): (N // 8, N // 8, 16, 8 * 32 + 8 * 4, 1, N // 4, 0),
    ("twice", 4): (8 * N, 8 * N, N // 8, N // 2, 4, 4 * N, 0),
    ("one_cta", 8): (4 * N, 4 * N, N // 16, N // 4, 1, 8 * N, 0),
    ("tail", 4): (4 * (N - 40), 4 * (N - 40), 2 * 255, 2 * (254 * 4 + 3), 4, 2 * N, 0),
    ("barrier", 4): (4 * N, 4 * N, N // 16, N // 4, 4, 2 * N, 4 * 16),
    ("atomic", 4): (8 * N, 4 * N, 3 * N // 32, 3 * N // 8, 4, 3 * N, 0),
}


@pytest.mark.parametrize("kind,grid", list(PLANTED))
def test_planted_kernels_give_the_numbers_worked_out_by_hand(kind, grid):
    t = traffic_cuda.planted(kind, N, grid)
    got = (t.bytes_read, t.bytes_written, t.requests, t.sectors, t.ctas_with_work)
    want = PLANTED[kind, grid]
    assert got == want[:5]
    assert t.critical_cta_bytes == want[5] and t.ctas == grid and t.barriers == want[6]
    if want[6]:
        assert t.cta_barriers == [want[6] // grid] * grid and t.critical_cta_barriers == 16


def test_sectors_per_request_tell_the_access_patterns_apart():
    spr = {k: traffic_cuda.planted(k, N, g).sectors_per_request for k, g in PLANTED}
    assert spr == {"scalar4": 4.0, "vec16": 16.0, "stride32": 18.0, "twice": 4.0, "one_cta": 4.0,
                   "tail": (254 * 4 + 3) / 255, "barrier": 4.0, "atomic": 4.0}  # fmt: skip


def test_counting_an_op_changes_nothing_and_counts_only_its_tensors():
    gen = torch.Generator().manual_seed(0)
    p = torch.rand(3, 5000, generator=gen)
    want = specops.sample(p, seed=4, backend="cuda_sim")
    with traffic_cuda.counting() as launches:
        got = specops.sample(p, seed=4, backend="cuda_sim")
    assert torch.equal(got, want)
    # 3 rows of 5000: each row split over 2 blocks (RowSplit: chunks of 2528 entries)
    sums, draw = launches
    assert sums.kernel == "sample_split_sum_kernel" and sums.grid == (6, 1, 1)
    # pass 1: every entry read once (4 bytes), one float64 chunk sum written per block; only
    # the probabilities, the sums and the token ids count, never shared memory
    assert sums.bytes_read == 3 * 5000 * 4 and sums.bytes_written == 6 * 8
    assert sorted(set(sums.cta_bytes)) == [2472 * 4 + 8, 2528 * 4 + 8]
    # pass 2: the row's two chunk sums, then in the chunk holding the target its tiles (2048
    # entries, the last one cut at the chunk's end) up to the target's, that one read twice (its
    # sum, then the scan): at most the chunk and one tile; one id out
    assert draw.kernel == "sample_split_draw_kernel" and draw.grid == (3, 1, 1)
    assert draw.bytes_written == 3 * 4 and draw.barriers > 0
    assert all(2 * 8 + 4 < b <= 2 * 8 + (2528 + 2048) * 4 + 4 for b in draw.cta_bytes)
    assert specops._build._C is not None and not hasattr(specops._build._C, "traffic_begin")


def test_specops_bench_traffic_runs_without_triton_interpret_set():
    # the interpreter must be switched on before anything imports triton (the environment line
    # does): `specops bench --ops traffic` does it itself, CUDA and Triton rows alike
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, "-m", "specops", "bench", "--device", "cpu", "--ops", "traffic"]
    out = subprocess.run([*cmd, "--quick"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("traffic,")]
    assert {ln.split(",")[2] for ln in lines[1:]} >= {"cuda", "triton"}
    assert lines[0].startswith("traffic,op,backend,kernel")

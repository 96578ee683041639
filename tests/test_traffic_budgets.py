"""Traffic budgets of the CUDA kernels at the served shapes (issue 36, docs/gpu_cost.md), counted
through cuda_sim by ``specops bench --ops traffic``'s own cases: bytes moved / the op's floor and
sectors per warp request may not grow.  A change that lowers a number tightens its budget in the
same commit (the numbers below are today's, rounded up by at most 1%); a change that raises one
must say why in the commit that raises the budget."""

from __future__ import annotations

import pytest

from bench import bench_traffic, traffic_cuda

pytestmark = pytest.mark.skipif(
    not traffic_cuda.available(), reason="needs specops._traffic (a GCC build with cuda_sim)"
)

# (op, shape, kernel): (max bytes read + written / min_bytes, max sectors per request).
# sample / verify_chain at these batches split each row over blocks (RowSplit): the sum pass
# reads every row once, coalesced (~4 sectors a request); the draw pass reads one chunk, its
# scan tile with ITEMS=8 consecutive entries per thread (lanes 32 bytes apart: ~16-18 sectors).
BUDGETS = {
    ("sample", "B=1 V=32000", "sample_split_sum_kernel"): (1.01, 3.96),
    ("sample", "B=1 V=32000", "sample_split_draw_kernel"): (0.129, 17.8),
    ("sample", "B=64 V=32000", "sample_split_sum_kernel"): (1.01, 3.99),
    ("sample", "B=64 V=32000", "sample_split_draw_kernel"): (0.22, 11.9),
    ("sample", "B=8 V=65536", "sample_split_sum_kernel"): (1.01, 3.96),
    ("sample", "B=8 V=65536", "sample_split_draw_kernel"): (0.0635, 17.8),
    ("sample", "B=2 V=184622", "sample_split_sum_kernel"): (1.01, 4.45),
    ("sample", "B=2 V=184622", "sample_split_draw_kernel"): (0.0232, 17.9),
    ("sample_without_replacement", "R=8 V=65536 k=3", "sample_wor_kernel"): (1.01, 4.0),
    ("verify_chain", "B=1 K=8 V=128256", "verify_chain_split_sum_kernel"): (1.02, 3.84),
    ("verify_chain", "B=1 K=8 V=128256", "verify_chain_split_draw_kernel"): (0.0332, 15.9),
    ("verify_chain", "B=8 K=4 V=32000", "verify_chain_split_sum_kernel"): (1.01, 3.85),
    ("verify_chain", "B=8 K=4 V=32000", "verify_chain_split_draw_kernel"): (0.134, 16.5),
    ("verify_chain", "B=64 K=8 V=32000", "verify_chain_split_sum_kernel"): (1.01, 3.96),
    ("verify_chain", "B=64 K=8 V=32000", "verify_chain_split_draw_kernel"): (0.31, 14.7),
    # greedy at small batch: every valid row's argmax split over ~260 blocks, then the walk over
    # the chunk results.  It reads the rows after the first mismatch too (9 rows where the walk
    # needs 6: 1.5x the floor) to spread the pass over the GPU (one block read them in turn)
    ("verify_chain", "greedy B=1 K=8 V=128256", "verify_chain_greedy_split_kernel"): (1.51, 3.82),
    ("verify_chain", "greedy B=1 K=8 V=128256", "verify_chain_greedy_walk_kernel"): (
        0.000748,
        2.66,
    ),
    # GSD's grouping: a pre-pass tests every valid draft at once, a block a draft, each a
    # coalesced pass over its row; the split chain kernels read the decisions.  It tests the
    # drafts after the first rejection too (3.4x the floor, where one block a request testing
    # in order read 1.15x of it, in 2 blocks: 58 -> 26 us in the traffic model)
    ("verify_chain", "gsd B=2 K=15 V=65536", "verify_chain_group_test_kernel"): (3.38, 4.42),
    ("verify_chain", "gsd B=2 K=15 V=65536", "verify_chain_split_sum_kernel"): (0.405, 3.65),
    ("verify_chain", "gsd B=2 K=15 V=65536", "verify_chain_split_draw_kernel"): (0.0270, 15.2),
    # verify_tree: one block per request; a rejected child costs one pass over the row(s),
    # folded in, nothing written (7.1 -> 3.0 MB at B=1 det; 4.52 -> 2.74 x the floor iid, where
    # the pass reads p and q together: 4.44 -> 4.99 sectors a request).  The iid floor now
    # charges a node's shared q row once and the full rows of a path node accepted after a
    # rejected sibling (1.79 -> 2.43 MB): 2.74 -> 2.02 x it, the same bytes.
    ("verify_tree", "B=1 N=21 V=128256 det", "verify_tree_kernel"): (5.77, 4.16),
    # greedy at small batch: every node row's argmax split over ~250 blocks, then the walk.  It
    # reads all 21 rows where the walk needs the path's 3 (7.6x the floor) to spread the pass
    # over the GPU (one block read the path's rows in turn: ~55 us in the traffic model, ~10 now)
    ("verify_tree", "greedy B=1 N=21 V=128256", "verify_tree_greedy_split_kernel"): (7.64, 3.87),
    ("verify_tree", "greedy B=1 N=21 V=128256", "verify_tree_greedy_walk_kernel"): (0.0048, 1.45),
    ("verify_tree", "B=8 N=15 V=32000 iid", "verify_tree_kernel"): (2.02, 4.99),
    ("verify_jacobi", "sjd B=2 L=64 V=65536", "jacobi_chain_kernel"): (2.13, 15.2),
    ("verify_jacobi", "sjd_pac root B=2 L=64 V=65536", "jacobi_tree_kernel"): (1.81, 15.6),
    # GSD's grouping: a pre-pass tests each slot once over a block, coalesced; the chain kernel
    # reads the decisions (the floor charges the tested rows and, again, the drawn ones)
    ("verify_jacobi", "gsd sjd B=2 L=64 V=65536", "jacobi_group_test_kernel"): (0.97, 4.42),
    ("verify_jacobi", "gsd sjd B=2 L=64 V=65536", "jacobi_chain_kernel"): (0.28, 14.9),
    ("path_acceptance", "B=8 N=21 V=65536", "path_acceptance_kernel"): (3.12, 5.98),
    ("commit_kv", "L=32 B=1 Hkv=32 D=128 m=8", "commit_kv_kernel"): (1.01, 14.8),
    ("commit_kv", "L=32 B=4 Hkv=32 D=128 m=8", "commit_kv_kernel"): (1.01, 14.8),
}


@pytest.fixture(scope="module")
def counted():
    return {
        (op, shape, t.kernel): (t, floor) for op, shape, t, floor in bench_traffic.count_cuda(False)
    }


def test_every_kernel_launch_has_a_budget(counted):
    assert set(counted) == set(BUDGETS)


@pytest.mark.parametrize("key", list(BUDGETS), ids=lambda k: f"{k[0]} {k[1]}")
def test_kernel_stays_within_its_budget(counted, key):
    t, floor = counted[key]
    ratio = (t.bytes_read + t.bytes_written) / floor
    max_ratio, max_spr = BUDGETS[key]
    assert ratio <= max_ratio, f"{key}: bytes / min_bytes {ratio:.3f} > budget {max_ratio}"
    assert t.sectors_per_request <= max_spr, (
        f"{key}: sectors per request {t.sectors_per_request:.2f} > budget {max_spr}"
    )


def test_tree_floor_by_hand():
    """verify_tree's floor on a worked case: Tree.kary(2, 3) (root 0; 1, 2; then 3, 4 under 1
    and 5, 6 under 2), the path 0 -> 2 (child 1 rejected first), both children of 2 rejected,
    V = 10.  With draft probabilities: 4 tested children x (p, q) x 4 B; rows: node 2's p row,
    node 0's p and q rows (2 accepted after a rejected sibling), node 2's q row once; the
    outputs (path width 3: 2 x 3 + 1 int32).  Deterministic drafts: the tests' p alone, node 2's
    p row, the outputs."""
    import types

    import torch

    from specops import Tree

    tree = Tree.kary(2, 3)
    p = torch.zeros(1, 7, 10)
    r = types.SimpleNamespace(num_accepted=torch.tensor([1]), path=torch.tensor([[0, 2, -1]]))
    outputs = 7 * 4
    assert bench_traffic._tree_floor(p, p, tree, r) == 4 * 2 * 4 + 4 * 10 * 4 + outputs
    assert bench_traffic._tree_floor(p, None, tree, r) == 4 * 1 * 4 + 1 * 10 * 4 + outputs

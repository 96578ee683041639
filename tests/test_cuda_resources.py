"""Every CUDA kernel compiles for sm_80 and sm_90 without register spills (ptxas's report,
tests/cuda_resources.py; the table is docs/cuda_resources.md).  Needs nvcc, not a GPU."""

from __future__ import annotations

import cuda_resources as cr
import pytest


@pytest.mark.skipif(cr.nvcc() is None, reason="needs nvcc")
def test_every_cuda_kernel_compiles_without_spills():
    rows = cr.collect(workers=2)
    kernels = {r["kernel"].split("(")[0].split("<")[0].rsplit("::", 1)[-1] for r in rows}
    want = {"sample_kernel", "verify_chain_kernel", "verify_tree_kernel", "sample_wor_kernel",
            "path_acceptance_kernel", "jacobi_chain_kernel", "jacobi_tree_kernel",
            "commit_kv_kernel"}  # fmt: skip
    assert want <= kernels, kernels
    assert {r["arch"] for r in rows} == set(cr.TARGETS)
    for r in rows:
        assert "regs" in r, r
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, r
        # the block's registers fit the 64K-entry register file at its launch size
        assert r["regs"] <= 255, r

"""Each decoding method's step compiles whole: torch.compile with fullgraph=True (a graph break is
an error; VVS's step is two graphs around its host decision), once per run (no recompile over
14+ steps: seeds are Python constants, Philox offsets and every counter are device tensors
advanced in place), and gives the eager run's tokens and statistics.  Backend aot_eager:
Dynamo's capture and AOT autograd's functionalisation, without Inductor's code generation
(minutes of C++ compiles on a CI CPU); what it proves (one graph, no guard failures, the ops'
fake kernels and in-place contracts) holds for every backend."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo as dynamo

import specops
from specops.decode import ar, sjd, sjd_pac, speculative, vvs
from specops.models.loading import load_default

CLASSES = torch.arange(2)


@pytest.fixture(scope="module")
def demo():
    return load_default()


RUNS = {
    "ar": lambda m, **k: ar(m.target, CLASSES, length=24, **k),
    "sjd": lambda m, **k: sjd(m.target, CLASSES, window=8, length=64, **k),
    "sjd_pac": lambda m, **k: sjd_pac(
        m.target, CLASSES, window=8, branch=2, depth=2, length=64, **k
    ),
    "spec_chain": lambda m, **k: speculative(
        m.target, m.drafter, CLASSES, tree=None, num_draft=3, length=64, **k
    ),
    "spec_tree": lambda m, **k: speculative(
        m.target, m.drafter, CLASSES, tree="dynamic", branch=3, depth=3, num_nodes=10,
        length=64, cfg_scale=2.0, **k,
    ),
    "vvs": lambda m, **k: vvs(
        m.target, m.drafter, CLASSES, m.vq.latents, threshold=0.7, branch=3, depth=3,
        num_nodes=10, length=64, **k,
    ),
}  # fmt: skip
# graphs per run: VVS's step is two around its host decision, the finishing half one function per
# outcome (a target pass, or every active request skipping: both happen in this run)
GRAPHS = {"vvs": (3,)}


@pytest.mark.parametrize("method", list(RUNS))
def test_step_compiles_once_and_matches_eager(demo, method):
    # fast mode: validation mode's value checks read the data (a host sync: no whole graph)
    with specops.validation(False):
        ref, ref_stats = RUNS[method](demo, seed=3)
        dynamo.reset()
        dynamo.utils.counters.clear()
        with dynamo.config.patch(error_on_recompile=True):
            got, stats = RUNS[method](demo, seed=3, compile_step="aot_eager")
    assert dynamo.utils.counters["stats"]["unique_graphs"] in GRAPHS.get(method, (1,))
    assert stats.target_passes >= 14, "too few steps to show that nothing recompiles"
    assert torch.equal(got, ref)
    assert stats.passes_per_request == ref_stats.passes_per_request
    assert stats.accept_hist == ref_stats.accept_hist
    assert (stats.target_passes, stats.drafter_passes) == (
        ref_stats.target_passes,
        ref_stats.drafter_passes,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("method", list(RUNS))
def test_gpu_step_replayed_as_a_cuda_graph_matches_eager(method):
    """The GPU issue's target: each method's whole decoding step (the demo model on the GPU)
    captured as a CUDA graph and replayed (torch.compile backend "cudagraphs": the step's graph
    recorded once, then replayed every step) with the Philox offsets and counters advanced on
    the device: the eager run's tokens, and no step left out of the graph."""
    demo = load_default("cuda")
    with specops.validation(False):
        ref, ref_stats = RUNS[method](demo, seed=3)
        dynamo.reset()
        dynamo.utils.counters.clear()
        patch = dict(error_on_recompile=True, cudagraph_backend_support_input_mutation=True)
        with dynamo.config.patch(**patch):
            got, stats = RUNS[method](demo, seed=3, compile_step="cudagraphs")
    skips = dynamo.utils.counters["inductor"]["cudagraph_skips"]
    assert skips == 0, f"{skips} graph(s) ran outside a CUDA graph (see the log's skip reason)"
    assert stats.target_passes >= 14
    assert torch.equal(got.cpu(), ref.cpu())
    assert stats.accept_hist == ref_stats.accept_hist

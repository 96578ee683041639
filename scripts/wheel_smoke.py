"""Run by scripts/wheel_smoke.sh in a fresh environment holding only torch and the wheel: the
build is what its version says, the package stands alone (weights, benchmark suite, license),
and one op per family gives the reference's answer."""

from importlib.metadata import distribution

import torch

import specops
from specops import Tree, reference

info = specops.build_info()
print("specops", info["version"], "cpp:", info["cpp"], "cuda kernels:", info["cuda_compiled"])
assert info["cpp"], f"the compiled module did not import: {info['cpp_import_error']}"
assert ("+cpu" in info["version"]) == (not info["cuda_compiled"]), (
    f"version {info['version']} does not say what was built (cuda_compiled={info['cuda_compiled']})"
)
files = {str(f) for f in distribution("specops").files}
assert any(f.endswith("LICENSE") for f in files), "no LICENSE in the wheel"
assert any(f.endswith("weights/ar.pt") for f in files), "no model weights in the wheel"
assert any(f.endswith("bench/harness.py") for f in files), "no benchmark suite in the wheel"
assert not any("bench/results" in f for f in files), "bench results shipped in the wheel"

g = torch.Generator().manual_seed(0)
B, K, V = 3, 4, 1000
off = torch.zeros(1, dtype=torch.int64)

# sampling: the C++ twin draws the reference's Philox stream
probs = torch.softmax(torch.randn(B, V, generator=g), -1)
got = specops.sample(probs, seed=1, offset=off)
assert torch.equal(got, reference.sample(probs, seed=1, offset=off)), "sample: cpu != reference"
p = specops.probs_from_logits(torch.randn(B, V, generator=g), temperature=0.7, top_k=50)
assert torch.allclose(p.sum(-1), torch.ones(B), atol=1e-5)

# verification: chain and tree, C++ twin == reference
target = torch.softmax(torch.randn(B, K + 1, V, generator=g), -1)
drafts = torch.randint(0, V, (B, K), generator=g)
got = specops.verify_chain(target, drafts, seed=2, offset=off, backend="cpu")
ref = specops.verify_chain(target, drafts, seed=2, offset=off, backend="reference")
assert all(torch.equal(a, b) for a, b in zip(got, ref)), "verify_chain: cpu != reference"
tree = Tree.kary_chain(2, 2, 8)
tp = torch.softmax(torch.randn(B, tree.num_nodes, V, generator=g), -1)
tt = torch.randint(0, V, (B, tree.num_nodes), generator=g)
got = specops.verify_tree(tp, tree, tt, seed=3, offset=off, greedy=True, backend="cpu")
ref = specops.verify_tree(tp, tree, tt, seed=3, offset=off, greedy=True, backend="reference")
assert all(torch.equal(a, b) for a, b in zip(got, ref)), "verify_tree: cpu != reference"

# tree attention over prefix + tree (CPU: the reference path)
S, H, D, N = 16, 2, 8, tree.num_nodes
q = torch.randn(B, N, H, D, generator=g)
kc, vc = torch.randn(B, S + N, H, D, generator=g), torch.randn(B, S + N, H, D, generator=g)
lens = torch.full((B,), S, dtype=torch.int32)
o = specops.tree_attention(q, kc, vc, lens, tree)
assert o.shape == q.shape and torch.isfinite(o).all()

# KV commit: cpu == reference
caches = torch.randn(2, 2, B, S + N, H, D, generator=g)
slots = torch.tensor([[0, 2, -1], [1, -1, -1], [-1, -1, -1]], dtype=torch.int32)
c1, c2 = caches.clone(), caches.clone()
l1, l2 = lens.clone(), lens.clone()
specops.commit_kv(c1, l1, slots, backend="cpu")
specops.commit_kv(c2, l2, slots, backend="reference")
assert torch.equal(c1, c2) and torch.equal(l1, l2), "commit_kv: cpu != reference"

# features
src = torch.randn(4, 6, 5, generator=g)
idx = torch.randint(0, 6, (4, 3), generator=g)
assert torch.equal(specops.gather_rows(src, idx), src.gather(1, idx[..., None].expand(4, 3, 5)))

# the decoding loop on the shipped model
from specops.decode import ar  # noqa: E402
from specops.models.loading import load_default  # noqa: E402

m = load_default(device="cpu")
tokens, stats = ar(m.target, torch.tensor([0, 1]), length=8)
assert tokens.shape == (2, 8) and stats.step_compression == 1.0
print("wheel smoke: ops and decoding loop OK")

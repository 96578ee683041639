"""One decoding step's specops work at real model shapes, piece by piece and in total.

- Lumina-mGPT-7B at 768px running SJD-PAC: 32 layers, 32 KV heads, head_dim 128, vocab 65536,
  window 64 = Tree.kary_chain(3, 3, 64), CFG batch 2 (one request), prefix about 2400:
  probs_from_logits (CFG 3.0, top-k 2000) -> verify_jacobi (adaptive continuation, 3
  proactive-drafting candidates) -> commit_kv (all layers, both CFG rows).
  SJD-PAC (appendix B, Table 4) reports 3.2 ms for "tree verification & generation" and 2.2 ms for
  "KV cache update & backtracking" per step next to a 44 ms forward on an A100/H100-class GPU.
- LlamaGen-XL with an EAGLE-2 drafter: 36 layers, 20 heads, head_dim 64, hidden 1280, vocab 16384,
  CFG batch 2, prefix about 300, a 64-node dynamic tree (depth 6, 8 children per node):
  select_frontier x 5 + build_dynamic_tree -> probs_from_logits -> verify_tree -> commit_kv ->
  drafter_inputs for the next step.
The forward passes themselves are the model's time and not included.  On CPU (--quick) the
shapes shrink to a few layers and a small vocabulary: that run only proves the suite works.
"""

from __future__ import annotations

import torch

import specops
from specops import Tree

from .harness import Row, time_fn


def _timed(pieces, prefix: str, shape: str, device: str, quick: bool, note: str = "") -> list[Row]:
    """One Row per (name, fn) of ``pieces``: ``prefix.name`` at ``shape``, backend auto."""
    rows = []
    for name, fn in pieces:
        st = time_fn(fn, device, quick=quick)
        rows.append(
            Row(f"{prefix}.{name}", shape, "auto", st.median_us, st.p20_us, st.p80_us, note=note)
        )
    return rows


def _lumina(device: str, quick: bool) -> list[Row]:
    layers, hkv, d, v, s = (2, 2, 16, 512, 256) if quick else (32, 32, 128, 65536, 4096)
    window, prefix = 64, (100 if quick else 2400)
    g = torch.Generator(device=device).manual_seed(0)
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    cond = torch.randn(1, window, v, device=device, generator=g).to(dt)
    uncond = torch.randn(1, window, v, device=device, generator=g).to(dt)
    tree = Tree.kary_chain(3, 3, window, device=device)
    draft_probs = torch.softmax(torch.randn(1, window, v, device=device, generator=g), -1)
    window_tokens = torch.multinomial(draft_probs[0], 1).T.to(torch.int32)
    caches = torch.randn(layers, 2, 2, s, hkv, d, device=device, generator=g).to(dt)
    seqlens0 = torch.full((2,), prefix, dtype=torch.int32, device=device)
    seqlens = seqlens0.clone()
    top_k = 2000 if not quick else 50

    def probs():
        return specops.probs_from_logits(cond, uncond_logits=uncond, cfg_scale=3.0, top_k=top_k)

    target = probs()

    def verify():
        return specops.verify_jacobi(
            target,
            window_tokens,
            draft_probs,
            tree=tree,
            continue_after_reject=True,
            num_candidates=3,
        )

    r = verify()
    slots = torch.where(r.path >= 0, r.path, -1).to(torch.int32).expand(2, -1).contiguous()

    def commit():
        seqlens.copy_(seqlens0)  # the same move every call (restores the committed length)
        specops.commit_kv(caches, seqlens, slots)

    def step():
        t = probs()
        res = specops.verify_jacobi(
            t, window_tokens, draft_probs, tree=tree, continue_after_reject=True, num_candidates=3
        )
        seqlens.copy_(seqlens0)
        specops.commit_kv(caches, seqlens, res.path.expand(2, -1).contiguous())

    pieces = [
        ("probs_from_logits", probs),
        ("verify_jacobi", verify),
        ("commit_kv", commit),
        ("step_total", step),
    ]
    shape = f"L{layers} Hkv{hkv} D{d} V{v} W{window} S{prefix}"
    note = "paper: 3200us verify+gen, 2200us KV update"
    return _timed(pieces, "lumina_sjdpac", shape, device, quick, note)


def _llamagen(device: str, quick: bool) -> list[Row]:
    layers, heads, d, hidden, v, s = (
        (2, 2, 16, 64, 512, 256) if quick else (36, 20, 64, 1280, 16384, 1024)
    )
    depth, width, k, nodes, prefix = 6, 8, 8, 64, (100 if quick else 300)
    b = 1
    g = torch.Generator(device=device).manual_seed(1)
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    root = torch.randint(0, v, (b,), device=device, generator=g)
    lp_all = torch.log_softmax(torch.randn(b, depth, width, k, device=device, generator=g), -1)
    tk_all = torch.randint(
        0, v, (b, depth, width, k), device=device, generator=g, dtype=torch.int32
    )
    logits = torch.randn(2 * b, nodes, v, device=device, generator=g).to(dt)
    caches = torch.randn(layers, 2, 2 * b, s, heads, d, device=device, generator=g).to(dt)
    seqlens0 = torch.full((2 * b,), prefix, dtype=torch.int32, device=device)
    seqlens = seqlens0.clone()
    embedding = torch.randn(v, hidden, device=device, generator=g).to(dt)
    feats = torch.randn(b, nodes, hidden, device=device, generator=g).to(dt)

    def build():
        frontier = torch.empty(b, depth - 1, width, dtype=torch.int32, device=device)
        f = specops.select_frontier(lp_all[:, 0, :1], width, tokens=tk_all[:, 0, :1])
        for dd in range(1, depth):
            frontier[:, dd - 1] = f.index
            f = specops.select_frontier(
                lp_all[:, dd], width, parent_scores=f.scores, tokens=tk_all[:, dd]
            )
        return specops.build_dynamic_tree(root, tk_all, lp_all, frontier, nodes)

    dyn = build()

    def probs():
        return specops.probs_from_logits(
            logits[:b], uncond_logits=logits[b:], cfg_scale=4.0, top_k=1000 if not quick else 50
        )

    target = probs()

    def verify():
        return specops.verify_tree(target, dyn.tree, dyn.draft_tokens, None)

    r = verify()
    slots = r.path[:, 1:].expand(2 * b, -1).contiguous()

    def commit():
        seqlens.copy_(seqlens0)
        specops.commit_kv(caches, seqlens, slots)

    def drafter():
        return specops.drafter_inputs(
            embedding, r.tokens.clamp_min(0), feats[:, : r.tokens.shape[1]]
        )

    pieces = [
        ("tree_build", build),
        ("probs_from_logits", probs),
        ("verify_tree", verify),
        ("commit_kv", commit),
        ("drafter_inputs", drafter),
    ]
    shape = f"L{layers} H{heads} D{d} V{v} N{nodes} S{prefix}"
    return _timed(pieces, "llamagen_eagle", shape, device, quick)


def run(device: str, quick: bool) -> list[Row]:
    return _lumina(device, quick) + _llamagen(device, quick)


if __name__ == "__main__":
    from .__main__ import main

    main(["--ops", "e2e_step"])

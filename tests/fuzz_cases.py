"""The cases of the boundary fuzz (tests/test_fuzz_boundary_*.py): for every public op, canonical
inputs (contiguous, seeded) and the call that runs it on a backend."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import torch
from helpers import kv_caches

import specops
from specops import Tree


def _gen(name: str) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(name.encode()))


# cases --------------------------------------------------------------------------------------
@dataclass
class Case:
    inputs: dict  # name -> tensor (canonical values, contiguous)
    call: object  # (backend, tensors dict) -> tensor or tuple of tensors
    backends: tuple
    written: tuple = ()  # inputs the op writes: honoured or rejected
    float_tol: float = 1e-5
    names: dict = field(default_factory=dict)  # input name -> the name error messages use
    # inputs not fuzzed as "expanded": a block table of a written cache whose rows all map to the
    # same pages makes requests overwrite each other (ill-defined, not a layout question)
    no_expand: tuple = ()


def _probs(g, *shape, dtype=torch.float32):
    return torch.softmax(torch.randn(*shape, generator=g) * 2, -1).to(dtype)


def _ids(g, hi, *shape, dtype=torch.int32):
    return torch.randint(0, max(hi, 1), shape, generator=g).to(dtype)


def _seed(g, b):
    return torch.randint(0, 2**62, (b,), generator=g, dtype=torch.int64)


def _off():
    return torch.tensor([5], dtype=torch.int64)


CPU_TRITON = ("cpu", "triton")


def c_sample(g, b=3, v=7, idt=torch.int32, fdt=torch.float32):
    t = {"probs": _probs(g, b, v, dtype=fdt), "seed": _seed(g, b), "offset": _off(),
         "out": torch.full((b,), -7, dtype=torch.int32)}  # fmt: skip
    call = lambda be, t: specops.sample(
        t["probs"], seed=t["seed"], offset=t["offset"], out=t["out"], backend=be
    )
    return Case(t, call, CPU_TRITON, written=("out",))


def c_sample_3d(g, b=3, v=7, idt=torch.int32, fdt=torch.float32):
    t = {"probs": _probs(g, b, 2, v, dtype=fdt), "seed": _seed(g, b)}
    call = lambda be, t: specops.sample(t["probs"], seed=t["seed"], offset=3, backend=be)
    return Case(t, call, CPU_TRITON)


def c_sample_uniforms(g, b=3, v=7, idt=torch.int32, fdt=torch.float32):
    t = {"probs": _probs(g, b, v, dtype=fdt), "uniforms": torch.rand(b, generator=g),
         "out": torch.full((b,), -7, dtype=torch.int32)}  # fmt: skip
    call = lambda be, t: specops.sample(t["probs"], uniforms=t["uniforms"], out=t["out"],
                                        backend=be)  # fmt: skip
    return Case(t, call, CPU_TRITON, written=("out",))


def c_sample_wor(g, b=3, v=7, idt=torch.int32, fdt=torch.float32):
    t = {"probs": _probs(g, b, v, dtype=fdt), "seed": _seed(g, b), "offset": _off()}
    call = lambda be, t: specops.sample_without_replacement(
        t["probs"], min(3, v), seed=t["seed"], offset=t["offset"], backend=be
    )
    return Case(t, call, ("cpu",))


def c_sample_wor_uniforms(g, b=3, v=7, idt=torch.int32, fdt=torch.float32):
    t = {"probs": _probs(g, b, v, dtype=fdt), "uniforms": torch.rand(b, v, generator=g)}
    call = lambda be, t: specops.sample_without_replacement(
        t["probs"], min(3, v), uniforms=t["uniforms"], backend=be
    )
    return Case(t, call, ("cpu",))


def c_verify_chain(g, b=3, v=7, k=3, idt=torch.int32, fdt=torch.float32):
    t = {
        "target_probs": _probs(g, b, k + 1, v, dtype=fdt),
        "draft_tokens": _ids(g, v, b, k, dtype=idt),
        "draft_probs": _probs(g, b, k, v, dtype=fdt),
        "num_draft": torch.randint(0, k + 1, (b,), generator=g).to(idt),
        "seed": _seed(g, b),
        "offset": _off(),
    }
    call = lambda be, t: specops.verify_chain(
        t["target_probs"], t["draft_tokens"], t["draft_probs"], num_draft=t["num_draft"],
        seed=t["seed"], offset=t["offset"], backend=be,
    )  # fmt: skip
    return Case(t, call, CPU_TRITON)


def c_verify_chain_uniforms(g, b=3, v=7, k=3, idt=torch.int32, fdt=torch.float32):
    t = {
        "target_probs": _probs(g, b, k + 1, v, dtype=fdt),
        "draft_tokens": _ids(g, v, b, k, dtype=idt),
        "draft_probs": _probs(g, b, k, v, dtype=fdt),
        "uniforms": torch.rand(b, k + 1, generator=g),
    }
    call = lambda be, t: specops.verify_chain(
        t["target_probs"], t["draft_tokens"], t["draft_probs"], uniforms=t["uniforms"], backend=be
    )
    return Case(t, call, CPU_TRITON)


_TREE = Tree.kary(2, 3)  # 7 nodes


def c_verify_tree(g, b=3, v=7, idt=torch.int32, fdt=torch.float32, wor=False, uniforms=False):
    n = _TREE.num_nodes
    t = {
        "target_probs": _probs(g, b, n, v, dtype=fdt),
        "draft_tokens": _ids(g, v, b, n, dtype=idt),
        "draft_probs": _probs(g, b, n, v, dtype=fdt),
    }
    if uniforms:
        t["uniforms"] = torch.rand(b, n, generator=g)
    else:
        t["seed"], t["offset"] = _seed(g, b), _off()

    def call(be, t):
        rng = ({"uniforms": t["uniforms"]} if "uniforms" in t
               else {"seed": t["seed"], "offset": t["offset"]})  # fmt: skip
        return specops.verify_tree(
            t["target_probs"], _TREE, t["draft_tokens"], t["draft_probs"],
            without_replacement=wor, backend=be, **rng,
        )  # fmt: skip

    return Case(t, call, ("cpu",))


def c_verify_tree_wor_uniforms(g, **kw):
    return c_verify_tree(g, wor=True, uniforms=True, **kw)


def _jacobi_window(g, b, L, v, idt, fdt):
    """verify_jacobi's window: target probs, window tokens and draft probs [B, L(, V)]."""
    return {
        "target_probs": _probs(g, b, L, v, dtype=fdt),
        "window_tokens": _ids(g, v, b, L, dtype=idt),
        "draft_probs": _probs(g, b, L, v, dtype=fdt),
    }


def c_verify_jacobi(g, b=3, v=7, L=4, idt=torch.int32, fdt=torch.float32):
    t = {**_jacobi_window(g, b, L, v, idt, fdt), "seed": _seed(g, b), "offset": _off()}
    call = lambda be, t: specops.verify_jacobi(
        t["target_probs"], t["window_tokens"], t["draft_probs"], seed=t["seed"],
        offset=t["offset"], backend=be,
    )  # fmt: skip
    return Case(t, call, ("cpu",))


_KCHAIN = Tree.kary_chain(2, 2, 5)


def c_verify_jacobi_tree(g, b=3, v=7, idt=torch.int32, fdt=torch.float32):
    L = _KCHAIN.num_nodes
    t = _jacobi_window(g, b, L, v, idt, fdt)
    t["uniforms"] = torch.rand(b, 2 * L + L * 2, generator=g)  # 2 candidates
    call = lambda be, t: specops.verify_jacobi(
        t["target_probs"], t["window_tokens"], t["draft_probs"], tree=_KCHAIN, num_candidates=2,
        uniforms=t["uniforms"], backend=be,
    )  # fmt: skip
    return Case(t, call, ("cpu",))


def c_path_acceptance(g, b=3, v=7, idt=torch.int32, fdt=torch.float32):
    n = _TREE.num_nodes
    t = {
        "target_probs": _probs(g, b, n, v, dtype=fdt),
        "draft_probs": _probs(g, b, n, v, dtype=fdt),
        "draft_tokens": _ids(g, v, b, n, dtype=idt),
    }
    call = lambda be, t: specops.path_acceptance(
        t["target_probs"], t["draft_probs"], _TREE, t["draft_tokens"], backend=be
    )
    return Case(t, call, ("cpu",), float_tol=1e-5)


def c_probs_from_logits(g, b=3, v=7, idt=torch.int32, fdt=torch.float32):
    t = {
        "logits": (torch.randn(b, v, generator=g) * 2).to(fdt),
        "uncond_logits": (torch.randn(b, v, generator=g) * 2).to(fdt),
        "temperature": torch.rand(b, generator=g) + 0.5,
        "top_k": torch.randint(0, v + 1, (b,), generator=g).to(idt),
        "top_p": torch.rand(b, generator=g) * 0.5 + 0.5,
        "cfg_scale": torch.rand(b, generator=g) * 3,
        "out": torch.full((b, v), -7.0),
    }
    call = lambda be, t: specops.probs_from_logits(
        t["logits"], temperature=t["temperature"], top_k=t["top_k"], top_p=t["top_p"],
        cfg_scale=t["cfg_scale"], uncond_logits=t["uncond_logits"], out=t["out"], backend=be,
    )  # fmt: skip
    return Case(t, call, ("triton",), written=("out",), float_tol=1e-4)


def _kv_geometry(g, b, n, s, page, hkv, d, fdt):
    """(k_cache, v_cache, cache_seqlens, block_table or None): room for n tokens per request."""
    if page is None:
        kc = torch.randn(b, s, hkv, d, generator=g).to(fdt)
        bt = None
    else:
        width = s // page
        pool = b * width + 2
        kc = torch.randn(pool, page, hkv, d, generator=g).to(fdt)
        bt = torch.randperm(pool, generator=g)[: b * width].view(b, width).to(torch.int32)
    vc = torch.randn(kc.shape, generator=g).to(fdt)
    cs = torch.randint(0, s - n + 1, (b,), generator=g).to(torch.int32)
    return kc, vc, cs, bt


def c_tree_attention(g, b=3, n=4, s=16, hq=4, hkv=2, d=8, page=None, idt=torch.int32,
                     fdt=torch.float32):  # fmt: skip
    kc, vc, cs, bt = _kv_geometry(g, b, n, s, page, hkv, d, fdt)
    mask = Tree.kary(2, 2, batch=1).mask_bits[:, :3]  # 3 nodes; the 4th: a chain after node 2
    mask = torch.cat([mask, (mask[:, 2:3] | 8)], 1).expand(b, n, 1).contiguous()
    t = {"q": torch.randn(b, n, hq, d, generator=g).to(fdt), "k_cache": kc, "v_cache": vc,
         "cache_seqlens": cs.to(idt), "tree": mask}  # fmt: skip
    if bt is not None:
        t["block_table"] = bt.to(idt)
    call = lambda be, t: specops.tree_attention(
        t["q"], t["k_cache"], t["v_cache"], t["cache_seqlens"], t["tree"],
        block_table=t.get("block_table"), return_lse=True, backend=be,
    )  # fmt: skip
    tol = 2e-3 if fdt == torch.float16 else 1e-4
    return Case(t, call, CPU_TRITON, float_tol=tol)


def c_tree_attention_paged(g, **kw):
    return c_tree_attention(g, page=4, **kw)


def c_append_kv(g, b=3, n=4, s=16, hkv=2, d=8, page=None, idt=torch.int32, fdt=torch.float32):
    kc, vc, cs, bt = _kv_geometry(g, b, n, s, page, hkv, d, fdt)
    k, v = (torch.randn(b, n, hkv, d, generator=g).to(fdt) for _ in range(2))
    t = {"k_cache": kc, "v_cache": vc, "k": k, "v": v, "cache_seqlens": cs.to(idt)}
    if bt is not None:
        t["block_table"] = bt.to(idt)

    def call(be, t):
        specops.append_kv(t["k_cache"], t["v_cache"], t["k"], t["v"], t["cache_seqlens"],
                          block_table=t.get("block_table"), backend=be)  # fmt: skip
        return t["k_cache"], t["v_cache"]

    return Case(t, call, ("triton", "cpu"), written=("k_cache", "v_cache"),
                no_expand=("block_table",))  # fmt: skip


def c_append_kv_paged(g, **kw):
    return c_append_kv(g, page=4, **kw)


def _slots(g, b, m, window, idt):
    slots = torch.full((b, m), -1, dtype=torch.int64)
    for r in range(b):
        k = int(torch.randint(0, m + 1, (1,), generator=g)) if r else m
        slots[r, :k] = torch.randperm(window, generator=g)[:k].sort().values
    return slots.to(idt)


def c_commit_kv(g, layers=2, b=3, m=3, s=16, hkv=2, d=4, page=None, as_list=False,
                idt=torch.int32, fdt=torch.float32):  # fmt: skip
    caches, bt = kv_caches(g, layers, b, s, hkv, d, page, dtype=fdt, idt=idt)
    window = 6
    cs = torch.randint(0, s - window + 1, (b,), generator=g).to(torch.int32)
    t = {"caches": caches, "cache_seqlens": cs, "accepted_slots": _slots(g, b, m, window, idt)}
    if bt is not None:
        t["block_table"] = bt

    def call(be, t):
        c = t["caches"]
        arg = [(c[i, 0], c[i, 1]) for i in range(c.shape[0])] if as_list else c
        specops.commit_kv(arg, t["cache_seqlens"], t["accepted_slots"],
                          block_table=t.get("block_table"), backend=be)  # fmt: skip
        return c, t["cache_seqlens"]

    return Case(
        t, call, CPU_TRITON, written=("caches", "cache_seqlens"), no_expand=("block_table",)
    )


def c_commit_kv_paged(g, **kw):
    return c_commit_kv(g, page=4, **kw)


def c_commit_kv_list(g, **kw):
    return c_commit_kv(g, as_list=True, **kw)


def c_commit_kv_list_paged(g, **kw):
    return c_commit_kv(g, page=4, as_list=True, **kw)


def c_gather_rows(g, b=3, n=6, m=4, h=5, idt=torch.int32, fdt=torch.float32):
    idx = torch.randint(-1, n, (b, m), generator=g).to(idt)
    t = {"src": torch.randn(b, n, h, generator=g).to(fdt), "index": idx}
    call = lambda be, t: specops.gather_rows(t["src"], t["index"], backend=be)
    return Case(t, call, CPU_TRITON)


def c_drafter_inputs(g, b=3, m=4, v=7, e=5, h=3, s=2, step="full", idt=torch.int32,
                     fdt=torch.float32):  # fmt: skip
    t = {"embedding": torch.randn(v, e, generator=g).to(fdt),
         "tokens": torch.randint(-1, v, (b, m), generator=g).to(idt),
         "features": torch.randn(b, m, h, generator=g).to(fdt)}  # fmt: skip
    if step == "full":
        t["step_embedding"] = torch.randn(b, m, s, generator=g).to(fdt)
    elif step == "one":
        t["step_embedding"] = torch.randn(s, generator=g).to(fdt)
    call = lambda be, t: specops.drafter_inputs(
        t["embedding"], t["tokens"], t["features"], t.get("step_embedding"), backend=be
    )
    return Case(t, call, CPU_TRITON)


def c_drafter_inputs_step1(g, **kw):
    return c_drafter_inputs(g, step="one", **kw)


def c_path_similarity(g, b=3, p=3, L=4, v=7, cdim=5, idt=torch.int32, fdt=torch.float32):
    t = {"paths": _ids(g, v, b, p, L, dtype=idt),
         "codebook": torch.randn(v, cdim, generator=g).to(fdt)}  # fmt: skip
    call = lambda be, t: specops.path_similarity(t["paths"], t["codebook"], alpha=0.8,
                                                 backend=be)  # fmt: skip
    return Case(t, call, CPU_TRITON, float_tol=1e-4)


def c_feature_cache(g, b=3, cap=8, m=3, h=4, idt=torch.int32, fdt=torch.float32):
    pos = torch.stack([torch.randperm(cap, generator=g)[:m] for _ in range(b)]) if b else \
        torch.zeros(0, m, dtype=torch.int64)  # fmt: skip
    if m:
        pos[:, -1] = -1
    t = {
        "positions": pos.to(idt),
        "feats": torch.randn(b, m, h, generator=g).to(fdt),
        "step": torch.randint(0, 100, (b,), generator=g, dtype=torch.int64),
        "read_positions": torch.randint(-1, cap, (b, m + 1), generator=g).to(idt),
        "age_step": torch.randint(100, 200, (b,), generator=g, dtype=torch.int64),
    }

    def call(be, t):
        fc = specops.FeatureCache(b, cap, h, dtype=fdt, device=t["feats"].device, backend=be)
        fc.write(t["positions"], t["feats"], t["step"])
        rp = t["read_positions"]
        return fc.features, fc.stamps, fc.read(rp), fc.age(rp, t["age_step"])

    names = {"read_positions": "positions", "age_step": "step"}
    return Case(t, call, CPU_TRITON, names=names)


BUILDERS = {f.__name__[2:]: f for f in [
    c_sample, c_sample_3d, c_sample_uniforms, c_sample_wor, c_sample_wor_uniforms,
    c_verify_chain, c_verify_chain_uniforms, c_verify_tree, c_verify_tree_wor_uniforms,
    c_verify_jacobi, c_verify_jacobi_tree, c_path_acceptance, c_probs_from_logits,
    c_tree_attention, c_tree_attention_paged, c_append_kv, c_append_kv_paged, c_commit_kv,
    c_commit_kv_paged, c_commit_kv_list, c_commit_kv_list_paged, c_gather_rows,
    c_drafter_inputs, c_drafter_inputs_step1, c_path_similarity, c_feature_cache,
]}  # fmt: skip

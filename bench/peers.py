"""The verification ops' peers, loaded where installed or carried (.peers/, scripts/pack_peers.sh):
FlashInfer's and SGLang's chain samplers and SGLang's tree sampler, each returned as (callable,
"") or (None, why), with the argument builders that put specops's inputs into their layouts."""

from __future__ import annotations

import importlib.util
import inspect
import os

import torch


def flashinfer_chain():
    try:
        from flashinfer.sampling import chain_speculative_sampling

        return chain_speculative_sampling, ""
    except Exception as exc:  # not installed / no kernels for this GPU
        return None, f"flashinfer unavailable: {type(exc).__name__}"


def sglang_chain():
    """SGLang 0.5.23's pure-Triton chain sampler, loaded from its one file (the sglang wheel does
    not import without CUDA torch's extras): $SPECOPS_SGLANG_REJECT_SAMPLING or
    .peers/sglang_reject_sampling.py (sglang/kernels/ops/speculative/reject_sampling.py)."""
    path = os.environ.get("SPECOPS_SGLANG_REJECT_SAMPLING", ".peers/sglang_reject_sampling.py")
    try:
        spec = importlib.util.spec_from_file_location("_sglang_reject_sampling", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.chain_speculative_sampling_triton, ""
    except Exception as exc:
        return None, f"sglang triton sampler unavailable ({path}): {type(exc).__name__}"


def sglang_chain_args(p, x, q, gen):
    """SGLang's layout: candidates [B, K+1] = (last token, drafts), flat retrive_index, its
    uniforms drawn outside the kernel (here before timing, which favours the peer)."""
    b, k1, _ = p.shape
    dev = p.device
    cand = torch.cat([torch.zeros(b, 1, dtype=torch.int64, device=dev), x.long()], 1)
    idx = torch.arange(b * k1, device=dev, dtype=torch.int64).view(b, k1)
    predicts = torch.empty(b * k1, dtype=torch.int32, device=dev)
    acc_idx = torch.empty(b, k1, dtype=torch.int32, device=dev)
    acc_num = torch.empty(b, dtype=torch.int32, device=dev)
    u = torch.rand(b, k1, generator=gen, device=dev)
    u_final = torch.rand(b, generator=gen, device=dev)
    return (predicts, acc_idx, acc_num, cand, idx, idx, idx, u, u_final, p, q, 1.0, 1.0, True)


def sgl_tree():
    """sgl-kernel's tree sampler, else SGLang 0.5.23's JIT one compiled ahead of time into
    $SPECOPS_SGLANG_TREE_SO or .peers/sglang_tree_sampling.so (scripts/pack_peers.sh; its
    index tensors are int64)."""
    try:
        from sgl_kernel import tree_speculative_sampling_target_only

        return tree_speculative_sampling_target_only, ""
    except Exception as exc:
        note = f"sgl-kernel unavailable: {type(exc).__name__}"
    path = os.environ.get("SPECOPS_SGLANG_TREE_SO", ".peers/sglang_tree_sampling.so")
    try:
        import tvm_ffi

        mod = tvm_ffi.load_module(path)
    except Exception as exc:
        return None, f"{note}; sglang jit tree sampler unavailable ({path}): {type(exc).__name__}"

    def sampler(predicts, accept_index, accept_token_num, candidates, retrive_index,
                retrive_next_token, retrive_next_sibling, uniform_samples,
                uniform_samples_for_final_sampling, target_probs, draft_probs,
                threshold_single=1.0, threshold_acc=1.0, deterministic=True):  # fmt: skip
        mod.sample(predicts, accept_index, accept_token_num, candidates, retrive_index,
                   retrive_next_token, retrive_next_sibling, uniform_samples,
                   uniform_samples_for_final_sampling, target_probs, draft_probs,
                   threshold_single, threshold_acc)  # fmt: skip

    sampler.index_dtype = torch.int64
    return sampler, ""


def sgl_call(fn, p, tree, tok, depth):
    """sgl-kernel's target-only tree sampling (deterministic drafts) on our tree layout."""
    b, n, v = p.shape
    dev = p.device
    idt = getattr(fn, "index_dtype", torch.int32)
    fc = tree.first_child.to(dev).expand(b, -1).to(idt).contiguous()
    ns = tree.next_sibling.to(dev).expand(b, -1).to(idt).contiguous()
    cand = tok.to(idt).contiguous()
    ridx = (torch.arange(b * n, device=dev, dtype=idt)).reshape(b, n)
    predicts = torch.full((b * n,), -1, dtype=torch.int32, device=dev)
    acc_idx = torch.full((b, depth + 1), -1, dtype=torch.int32, device=dev)
    acc_num = torch.zeros(b, dtype=torch.int32, device=dev)
    coins = torch.rand(b, n, device=dev)
    coins_final = torch.rand(b, device=dev)
    draft = torch.zeros_like(p)
    kw = dict(
        predicts=predicts,
        accept_index=acc_idx,
        accept_token_num=acc_num,
        candidates=cand,
        retrive_index=ridx,
        retrive_next_token=fc,
        retrive_next_sibling=ns,
        uniform_samples=coins,
        target_probs=p,
        draft_probs=draft,
        deterministic=True,
    )
    if "uniform_samples_for_final_sampling" in inspect.signature(fn).parameters:
        kw["uniform_samples_for_final_sampling"] = coins_final
    return lambda: fn(**kw)

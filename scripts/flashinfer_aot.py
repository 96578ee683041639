"""Compile FlashInfer's JIT modules that specops' benchmarks call, ahead of time, into
flashinfer/data/aot/<name>/<name>.so of the installed flashinfer (scripts/pack_peers.sh).

FlashInfer loads a module from that folder instead of compiling it on first use, so a GPU lease
spends no minutes in nvcc.  Set FLASHINFER_CUDA_ARCH_LIST (e.g. 9.0a) when no GPU is present.
The modules: the sampling module (chain_speculative_sampling), the quantization module
(segment_packbits: the custom-mask prefill packs its mask), and fa2's batch prefill for bf16,
head dim 128 with int32 indices (bench_tree_attention's custom-mask paged prefill)."""

import shutil
import time

import torch
from flashinfer import prefill
from flashinfer.jit import env as jit_env
from flashinfer.jit.quantization import gen_quantization_module
from flashinfer.jit.sampling import gen_sampling_module

# (q, kv, o dtype, index dtype, head dims qk/vo, posenc, sliding window, logits cap, fp16 qk)
PREFILL = (torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int32, 128, 128, 0, False,
           False, False)  # fmt: skip


def main() -> None:
    specs = [
        gen_sampling_module(),
        gen_quantization_module(),
        prefill._gen_batch_prefill_primary_module("fa2", *PREFILL),
        prefill._gen_batch_prefill_independent_paged_module("fa2", *PREFILL),
    ]
    for spec in specs:
        t0 = time.time()
        spec.build(verbose=False)
        dst = jit_env.FLASHINFER_AOT_DIR / spec.name / f"{spec.name}.so"
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(spec.get_library_path(), dst)
        print(f"{spec.name}: {time.time() - t0:.0f} s -> {dst}", flush=True)


if __name__ == "__main__":
    main()

"""specops's vLLM plugin against vLLM 0.33.0's own V1 rejection sampler, same inputs, on the CPU.

    CUDA_VISIBLE_DEVICES= TRITON_INTERPRET=1 build/vllm-venv/bin/python bench/engines_cpu.py
    (the venv of scripts/vllm_stage.sh: vLLM installed --no-deps with the CPU torch; run it from
    outside the checkout so the installed specops wheel is imported)

Median wall time per call of ``rejection_sample(...)`` (specops.vllm's, then vLLM's own) after a
warm-up, on requests of K drafts each: greedy (temperature 0), sampled with one-hot drafts
(ngram / EAGLE greedy drafting) and sampled with draft probabilities.  The drafts are sampled
from the draft distribution; the target puts its mass on 3 drafts in 4 and none on the others,
so rows stop part way (the accepted drafts per request are printed: about 2.1 of K = 4).
vLLM's rejection sampler is Triton kernels, which run on a CPU only in Triton's interpreter:
the ratio is specops's C++ twin against the only CPU path vLLM has, and says nothing about
either on a GPU (issue 24's bench has those rows).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402


def metadata(temperature: torch.Tensor):
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata

    greedy = bool((temperature == 0).all())
    return SamplingMetadata(
        temperature=None if greedy else temperature, all_greedy=greedy, all_random=not greedy,
        top_p=None, top_k=None, generators={}, max_num_logprobs=None, no_penalties=True,
        prompt_token_ids=None, frequency_penalties=torch.tensor([]),
        presence_penalties=torch.tensor([]), repetition_penalties=torch.tensor([]),
        output_token_ids=[], allowed_token_ids_mask=None, bad_words_token_ids={},
        logitsprocs=LogitsProcessors(),
    )  # fmt: skip


def inputs(b: int, k: int, v: int, mode: str, seed: int = 0):
    """(args of rejection_sample) for b requests of k drafts over v tokens."""
    g = torch.Generator().manual_seed(seed)
    q = torch.softmax(torch.randn(b * k, v, generator=g) * 2, -1)
    drafts = torch.multinomial(q, 1, generator=g)[:, 0].to(torch.int32)
    # the target agrees with 3 drafts in 4 (its mass and argmax on the draft), elsewhere not:
    # rows stop part way, in every mode
    target = torch.randn(b * k, v, generator=g)
    agree = torch.rand(b * k, generator=g) < 0.75
    target[torch.arange(b * k), drafts.long()] += torch.where(agree, 14.0, -14.0)
    n = [k] * b
    cu = torch.arange(1, b + 1, dtype=torch.int32) * k
    bonus = torch.randint(0, v, (b, 1), generator=g, dtype=torch.int64)
    temp = torch.zeros(b) if mode == "greedy" else torch.ones(b)
    probs = q if mode == "draft probs" else None
    return (drafts, n, k, cu, probs, target, bonus, metadata(temp))


def timed(fn, args, repeats: int) -> tuple[float, torch.Tensor]:
    out = fn(*args[:5], args[5].clone(), *args[6:])  # warm-up (Triton's interpreter, binding)
    times = []
    for _ in range(repeats):
        logits = args[5].clone()  # vLLM's kernels may write into the target logits
        t = time.perf_counter()
        out = fn(*args[:5], logits, *args[6:])
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    import vllm
    from vllm.v1.sample import rejection_sampler as rs

    import specops
    import specops.vllm as sv

    vllm_fn = rs.rejection_sample
    backend = "C++" if specops.build_info().get("cpp") else "reference"
    print(f"vLLM {vllm.__version__} (V1 rejection_sample, Triton interpreter) against specops "
          f"{specops.__version__} ({backend}); torch {torch.__version__}, {args.threads} "
          f"thread(s), median of {args.repeats}")  # fmt: skip
    head = f"{'mode':<12} {'B':>3} {'K':>2} {'V':>6}  {'specops ms':>10} {'vLLM ms':>9} "
    head += f"{'ratio':>7}"
    print(head + "  accepted/req")
    print("-" * (len(head) + 14))
    for mode in ("greedy", "one-hot", "draft probs"):
        for b, k, v in ((1, 4, 32000), (8, 4, 32000), (8, 8, 128256)):
            a = inputs(b, k, v, mode)
            t_s, out = timed(sv.rejection_sample, a, args.repeats)
            t_v, _ = timed(vllm_fn, a, args.repeats)
            acc = float(((out[:, :k] != -1).sum(1).float() - 1).clamp(min=0).mean())
            print(f"{mode:<12} {b:>3} {k:>2} {v:>6}  {1e3 * t_s:>10.2f} {1e3 * t_v:>9.1f} "
                  f"{t_v / t_s:>6.0f}x  {acc:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

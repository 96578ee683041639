"""End to end on a transformers model: wall time per generated token of AR, SJD, SJD-PAC and
chain speculative decoding (draft model = a copy of the target) through ``specops.hf.generate``,
against transformers' own greedy ``generate``, with the share of each run spent in specops ops.

    python -m bench.hf_e2e [--hidden 1024 --layers 12 --tokens 32 --dtype float32]

A Llama-style random-weight model (about 220M parameters at the defaults, so a forward pass on a
CPU is bound by reading its weights).  Greedy decoding of random weights repeats itself, which
forces acceptance high: the numbers measure the machinery (passes saved, overhead per pass), not
a drafting quality.  Every specops run is checked token-identical to transformers' output.
Needs ``pip install 'specops[hf]'``.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch


def build(hidden: int, layers: int, vocab: int, dtype: torch.dtype):
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=int(hidden * 2.75) // 64 * 64,
        num_hidden_layers=layers, num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 64, max_position_embeddings=2048,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(cfg).to(dtype).eval()


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = ap.parse_args(argv)

    import specops.hf

    dtype = getattr(torch, args.dtype)
    model = build(args.hidden, args.layers, args.vocab, dtype)
    n_params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, args.vocab, (1, args.prompt), generator=torch.Generator().manual_seed(0))
    n = args.tokens
    print(
        f"Llama {n_params / 1e6:.0f}M params {args.dtype}, prompt {args.prompt}, {n} new tokens, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=2)
        t_ref, ref = timed(
            lambda: model.generate(
                ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n
            )
        )
    print(f"{'run':<28}{'ms/token':>10}{'passes':>8}{'tok/pass':>10}{'specops':>9}{'equal':>7}")
    print(f"{'transformers generate':<28}{t_ref / n * 1e3:>10.1f}{n:>8}{1.0:>10.2f}{'':>9}{'':>7}")
    twin = copy.deepcopy(model)
    runs = [
        ("ar", "ar", {}),
        ("sjd window 16", "sjd", {"window": 16}),
        ("sjd_pac window 32", "sjd_pac", {"window": 32}),
        ("speculative chain K=4 (copy)", "speculative", {"drafter": twin, "tree": None}),
    ]
    for name, method, opts in runs:
        dt, (out, st) = timed(
            lambda m=method, o=opts: specops.hf.generate(
                model, ids, method=m, max_new_tokens=n, do_sample=False, **o
            )
        )
        print(
            f"{name:<28}{dt / n * 1e3:>10.1f}{st.target_passes:>8}{st.step_compression:>10.2f}"
            f"{st.specops_s / dt:>9.1%}{str(bool(torch.equal(out, ref))):>7}"
        )


if __name__ == "__main__":
    main()

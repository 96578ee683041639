"""End to end on a transformers model: wall time per generated token of AR, SJD, SJD-PAC and
chain speculative decoding (draft model = a copy of the target) through ``specops.hf.generate``,
against transformers' own greedy ``generate``, with the share of each run spent in specops ops.

    python -m bench.hf_e2e [--hidden 1024 --layers 12 --tokens 32 --dtype float32]
                           [--repeats 5 --threads 1]

Runs alternate (transformers, then each specops method, ``--repeats`` rounds after one warm-up
round) and every row reports the median ms/token with the range over the rounds: single runs on a
shared CPU swing by up to 20%.

A Llama-style random-weight model (about 220M parameters at the defaults, so a forward pass on a
CPU is bound by reading its weights).  Greedy decoding of random weights repeats itself, which
forces acceptance high: the numbers measure the machinery (passes saved, overhead per pass), not
a drafting quality.  Every specops run is checked token-identical to transformers' output.
Needs ``pip install 'specops[hf]'``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
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
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch and specops threads (0: keep)")
    args = ap.parse_args(argv)

    import specops.hf

    if args.threads:
        torch.set_num_threads(args.threads)
        specops.set_num_threads(args.threads)

    dtype = getattr(torch, args.dtype)
    model = build(args.hidden, args.layers, args.vocab, dtype)
    n_params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, args.vocab, (1, args.prompt), generator=torch.Generator().manual_seed(0))
    n = args.tokens
    print(
        f"Llama {n_params / 1e6:.0f}M params {args.dtype}, prompt {args.prompt}, {n} new tokens, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    twin = copy.deepcopy(model)
    mask = torch.ones_like(ids)

    def hf_generate():
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=n)
        return out[:, ids.shape[1] :], None

    def specops_run(method, opts):
        return lambda: specops.hf.generate(
            model, ids, method=method, max_new_tokens=n, do_sample=False, **opts
        )

    runs = [
        ("transformers generate", hf_generate),
        ("ar", specops_run("ar", {})),
        ("sjd window 16", specops_run("sjd", {"window": 16})),
        ("sjd_pac window 32", specops_run("sjd_pac", {"window": 32})),
        (
            "speculative chain K=4 (copy)",
            specops_run("speculative", {"drafter": twin, "tree": None}),
        ),
    ]
    times: dict[str, list[float]] = {name: [] for name, _ in runs}
    last = {}
    for rnd in range(args.repeats + 1):  # round 0 warms up (not counted)
        for name, fn in runs:
            dt, out = timed(fn)
            if rnd:
                times[name].append(dt / n * 1e3)
            last[name] = (dt, out)
    ref = last["transformers generate"][1][0]
    base = statistics.median(times["ar"])
    print(
        f"{'run':<30}{'ms/token':>10}{'range':>15}{'vs AR':>7}{'passes':>8}{'tok/pass':>10}"
        f"{'specops':>9}{'equal':>7}"
    )
    for name, _ in runs:
        med, lo, hi = statistics.median(times[name]), min(times[name]), max(times[name])
        dt, (out, st) = last[name]
        tail = ""
        if st is not None:
            equal = bool(torch.equal(out[:, -n:] if out.shape[1] > n else out, ref))
            tail = (f"{st.target_passes:>8}{st.step_compression:>10.2f}{st.specops_s / dt:>9.1%}"
                    f"{str(equal):>7}")  # fmt: skip
        print(f"{name:<30}{med:>10.1f}{f'{lo:.1f}-{hi:.1f}':>15}{med / base:>7.2f}{tail}")


if __name__ == "__main__":
    main()

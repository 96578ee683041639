"""specops.sample: every backend vs torch.multinomial (the eager op it replaces) and a memcpy of
the same bytes (ratio memcpy = copy time / sample time)."""

from __future__ import annotations

import torch

import specops

from .harness import Row, memcpy_time, time_fn, timed_backends, with_ratios

SHAPES_GPU = [(1, 32000), (64, 32000), (256, 65536), (128, 184622)]
SHAPES_CPU = [(16, 32000), (2, 65536)]
SHAPES_QUICK = [(4, 1000)]


def run(device: str, quick: bool) -> list[Row]:
    shapes = SHAPES_QUICK if quick else (SHAPES_GPU if device == "cuda" else SHAPES_CPU)
    backends = timed_backends("sample", device)
    rows = []
    for rows_, vocab in shapes:
        g = torch.Generator(device=device).manual_seed(0)
        probs = [
            torch.softmax(torch.randn(rows_, vocab, device=device, generator=g), -1)
            for _ in range(4 if device == "cuda" else 1)
        ]
        out = torch.empty(rows_, dtype=torch.int32, device=device)
        nbytes = probs[0].numel() * 4
        shape = f"B={rows_} V={vocab}"
        for be in backends:
            fns = [
                lambda p=p, be=be, o=out: specops.sample(p, seed=1, backend=be, out=o)
                for p in probs
            ]
            st = time_fn(fns, device, quick=quick)
            rows.append(
                Row(
                    "sample",
                    shape,
                    be,
                    st.median_us,
                    st.p20_us,
                    st.p80_us,
                    nbytes / (st.median_us * 1e-6) / 1e9,
                )
            )
        fns = [lambda p=p: torch.multinomial(p, 1) for p in probs]
        st = time_fn(fns, device, quick=quick)
        rows.append(
            Row(
                "sample",
                shape,
                "torch.multinomial",
                st.median_us,
                st.p20_us,
                st.p80_us,
                nbytes / (st.median_us * 1e-6) / 1e9,
            )
        )
        # the memory floor: a copy of the same bytes in the same run (issue 13 target for the
        # CPU twin at B >= 16: ratio memcpy >= 0.5, i.e. at least half of memcpy's bandwidth)
        st = memcpy_time(nbytes, device)
        note = "target cpu memcpy>=0.5" if device == "cpu" and rows_ >= 16 else ""
        rows.append(
            Row("sample", shape, "memcpy", st.median_us, st.p20_us, st.p80_us,
                nbytes / (st.median_us * 1e-6) / 1e9, note=note)
        )  # fmt: skip
    return with_ratios(rows, ("cuda", "triton", "cpu"))


if __name__ == "__main__":
    from .__main__ import main

    main(["--ops", "sample"])

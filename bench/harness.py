"""Timing, ceilings and reporting shared by every bench_*.py.

GPU: CUDA events around a CUDA-graph replay of `reps` calls (falls back to eager launches when
the function cannot be captured), warm-up first, inputs rotated across `rotate` copies so the L2
does not hold them, medians with p20/p80 over `trials`.  CPU: wall clock over repeats.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as _dt
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable

import torch

# Set by the runner's --profile: cudaProfilerStart/Stop around the timed trials only, so
# `nsys profile --capture-range=cudaProfilerApi` / `ncu --profile-from-start off` skip warm-up.
PROFILE = False


@dataclasses.dataclass
class Stats:
    median_us: float
    p20_us: float
    p80_us: float


@dataclasses.dataclass
class Row:
    op: str
    shape: str
    backend: str
    median_us: float
    p20_us: float
    p80_us: float
    gbps: float | None = None
    ratios: str = ""  # "peer=x.xx;peer2=y.yy": peer time / this time (>1: this is faster)
    note: str = ""


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _summary(samples_us: list[float]) -> Stats:
    return Stats(
        statistics.median(samples_us), _quantile(samples_us, 0.2), _quantile(samples_us, 0.8)
    )


def per_call_us(fn: Callable[[], object], calls: int, trials: int) -> list[float]:
    """``trials`` timings of ``calls`` back-to-back calls of ``fn``, each in us per call."""
    out = []
    for _ in range(trials):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return out


def time_cpu(
    fn: Callable[[], object], *, warmup: int = 2, trials: int = 7, min_time_s: float = 0.05
) -> Stats:
    for _ in range(warmup):
        fn()
    # calls per trial so that one trial lasts about min_time_s
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    return _summary(per_call_us(fn, max(1, int(min_time_s / one)), trials))


def time_cuda(
    fns: list[Callable[[], object]] | Callable[[], object],
    *,
    warmup: int = 5,
    trials: int = 15,
    reps: int = 20,
    use_graph: bool = True,
) -> Stats:
    """``fns``: one callable per rotated input copy (called round-robin)."""
    if callable(fns):
        fns = [fns]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            for f in fns:
                f()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()

    def body():
        for i in range(reps):
            fns[i % len(fns)]()

    run = body
    if use_graph:
        try:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                body()
            run = g.replay
        except Exception:  # not capturable: time eager launches
            torch.cuda.synchronize()
            run = body
    run()
    torch.cuda.synchronize()
    samples = []
    if PROFILE:
        torch.cuda.cudart().cudaProfilerStart()
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / reps)
    if PROFILE:
        torch.cuda.cudart().cudaProfilerStop()
    return _summary(samples)


def timed_backends(op: str, device: str) -> list[str]:
    """The backends a benchmark times for ``op``: every available one, less the reference on a
    GPU (leased minutes go to the kernels and their peers; the reference is the ground truth of
    the tests, not a peer)."""
    import specops

    backends = specops.available_backends(op, device)
    return [b for b in backends if not (device == "cuda" and b == "reference")]


def time_fn(fn, device: str, *, quick: bool = False, **kw) -> Stats:
    """Time ``fn`` (or a list of rotated copies) on ``device``; ``quick``: few trials (CI)."""
    if quick:
        kw = {"warmup": 1, "trials": 3, **kw}
    if device == "cuda":
        return time_cuda(fn, **kw)
    kw.pop("reps", None)
    kw.pop("use_graph", None)
    return time_cpu(fn if callable(fn) else fn[0], **kw)


def memcpy_time(nbytes: int, device: str) -> Stats:
    """A copy of ``nbytes`` (``dst.copy_(src)``, float32 buffers, torch's current thread count):
    the memory floor a pass that reads those bytes is compared with, timed in the same run.  The
    source is written first: an untouched ``torch.empty`` buffer reads the kernel's shared zero
    page on the CPU (a copy from cache, not from memory)."""
    src = torch.ones(max(nbytes // 4, 1), device=device)
    dst = torch.empty_like(src)
    return time_fn(lambda: dst.copy_(src), device)


def ceilings(device: str) -> dict[str, float]:
    """Measured in the same run: copy GB/s (read + write; device-to-device on a GPU, a 64 MiB
    memcpy on the CPU) and, on a GPU, bf16 matmul TFLOP/s."""
    if device != "cuda":
        n = 64 * 1024 * 1024
        src = torch.ones(n, dtype=torch.uint8)
        dst = torch.empty_like(src)
        st = time_cpu(lambda: dst.copy_(src), trials=5, min_time_s=0.1)
        return {"copy_gbps": 2 * n / (st.median_us * 1e-6) / 1e9}
    n = 256 * 1024 * 1024  # 256 MiB
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    st = time_cuda(lambda: dst.copy_(src), reps=10, trials=10)
    copy_gbps = 2 * n / (st.median_us * 1e-6) / 1e9
    m = 8192
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    st = time_cuda(lambda: a @ b, reps=5, trials=10)
    tflops = 2 * m**3 / (st.median_us * 1e-6) / 1e12
    return {"copy_gbps": copy_gbps, "bf16_matmul_tflops": tflops}


def git_commit() -> str:
    """The checkout's commit (``-dirty`` with local changes); for an installed package, which
    lives in no checkout of its own, ``specops <version>``."""
    if os.environ.get("SPECOPS_COMMIT"):  # a lease's clean commit, passed in (the device's
        return os.environ["SPECOPS_COMMIT"]  # copy of the tree has no clean git state)
    here = os.path.dirname(os.path.abspath(__file__))
    if not os.path.exists(os.path.join(os.path.dirname(here), "csrc")):  # not a checkout
        return os.environ.get("SPECOPS_COMMIT", f"specops {_package_version()}")
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=here,
            capture_output=True,
            text=True,
            check=True,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
        ).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except Exception:
        return os.environ.get("SPECOPS_COMMIT", "unknown")


def _package_version() -> str:
    from specops import build_info

    return build_info()["version"]


def environment(device: str) -> dict[str, str]:
    try:
        import triton

        triton_v = triton.__version__
    except ImportError:
        triton_v = "none"
    if device == "cuda":
        name = torch.cuda.get_device_name()
    else:
        name = platform.processor() or platform.machine()
        name = f"cpu:{name}:{os.cpu_count()}cores"
    return {
        "device": name,
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "triton": triton_v,
        "commit": git_commit(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


class Table:
    """A plain-text results table (the end-to-end scripts): printed line by line as it grows and,
    with ``out``, appended to that file once complete."""

    def __init__(self, title: str, head: str, out: str | None = None):
        self.lines, self.out = [title, head, "-" * len(head)], out
        print("\n".join(self.lines), flush=True)

    def add(self, line: str) -> None:
        self.lines.append(line)
        print(line, flush=True)

    def save(self) -> None:
        if self.out:
            with open(self.out, "a") as f:
                f.write("\n".join(self.lines) + "\n")


def e2e_table(script: str, setting: str, head: str, out: str | None = None) -> Table:
    """The table of an end-to-end script (``bench.<script>``), titled with the commit, ``setting``
    and torch's CPU thread count."""
    title = f"bench.{script} at {git_commit()}: {setting}, {torch.get_num_threads()} CPU thread(s)"
    return Table(title, head, out)


def class_setting(cls, seeds: list[int], *more: str) -> str:
    """The setting of an end-to-end table on class prompts ``cls``: their count, the seeds, then
    ``more``."""
    return ", ".join((f"{len(cls)} class prompts", f"seeds {seeds}", *more))


def e2e_setup(ap: argparse.ArgumentParser, argv=None):
    """Adds the options an end-to-end script on the embedded model ends with (``--classes``,
    ``--seeds``, ``--threads``, ``--out``), parses ``argv``, sets torch's CPU threads and loads
    the embedded models: -> (args, models, class prompts)."""
    from specops.models.loading import load_default

    ap.add_argument("--classes", type=int, nargs="*", default=list(range(10)))
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="also append the table here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    m = load_default()
    return args, m, torch.tensor(args.classes)


def greedy_seeds(temperature: float, seeds: list[int]) -> list[int]:
    """The seeds a run at ``temperature`` takes: all, or the first alone when greedy
    (temperature 0 is deterministic)."""
    return seeds if temperature > 0 else seeds[:1]


def with_ratios(rows: list[Row], subject_backends: tuple[str, ...]) -> list[Row]:
    """For every (op, shape), ratio of each other backend's time to each subject backend's."""
    by_case: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        by_case.setdefault((r.op, r.shape), []).append(r)
    for case in by_case.values():
        for r in case:
            if r.backend not in subject_backends:
                continue
            r.ratios = ";".join(
                f"{o.backend}={o.median_us / r.median_us:.2f}" for o in case if o is not r
            )
    return rows


CSV_FIELDS = [
    "op",
    "shape",
    "backend",
    "median_us",
    "p20_us",
    "p80_us",
    "gbps",
    "ratios",
    "note",
    "device",
    "torch",
    "cuda",
    "triton",
    "commit",
    "date",
]


def write_csv(path: str, rows: list[Row], env: dict[str, str]) -> None:
    new = not os.path.exists(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        if new:
            w.writeheader()
        for r in rows:
            d = dataclasses.asdict(r)
            d["gbps"] = "" if r.gbps is None else f"{r.gbps:.1f}"
            for k in ("median_us", "p20_us", "p80_us"):
                d[k] = f"{d[k]:.2f}"
            d.update(env)
            w.writerow(d)


def check_csv(path: str) -> int:
    """Raise ValueError unless ``path`` is a benchmark CSV of this schema: the CSV_FIELDS header
    and, on every row, op / shape / backend / device / torch / commit / date set, median, p20
    and p80 positive floats, gbps empty or a float, ratios empty or ``name=float;...``.  Rows that
    carry no time are allowed where they say why: the measured ceilings (op "ceiling", the value
    in gbps) and a peer that could not run (shape "-", the reason in note).
    Returns the number of rows (bench/gpu_run.sh's dry run checks its CSV with it)."""
    with open(path, newline="") as f:
        r = csv.reader(f)
        header = next(r, None)
        if header != CSV_FIELDS:
            raise ValueError(f"{path}: header {header} != {CSV_FIELDS}")
        n = 0
        for n, row in enumerate(r, 1):
            if len(row) != len(CSV_FIELDS):
                raise ValueError(f"{path}:{n + 1}: {len(row)} fields, want {len(CSV_FIELDS)}")
            d = dict(zip(CSV_FIELDS, row))
            for k in ("op", "shape", "backend", "device", "torch", "commit", "date"):
                if not d[k]:
                    raise ValueError(f"{path}:{n + 1}: empty {k}")
            untimed = d["op"] == "ceiling" or (d["shape"] == "-" and d["note"])
            for k in ("median_us", "p20_us", "p80_us"):
                if not untimed and not float(d[k]) > 0:
                    raise ValueError(f"{path}:{n + 1}: {k} = {d[k]!r} is not a positive time")
            if d["gbps"]:
                float(d["gbps"])
            for part in filter(None, d["ratios"].split(";")):
                name, _, value = part.partition("=")
                if not name or not value:
                    raise ValueError(f"{path}:{n + 1}: ratio {part!r} is not name=value")
                float(value)
    if n == 0:
        raise ValueError(f"{path}: no rows")
    print(f"{path}: {n} rows, schema ok")
    return n


def print_table(rows: list[Row], ceil: dict[str, float] | None = None) -> None:
    if ceil:
        print("ceilings: " + ", ".join(f"{k}={v:.1f}" for k, v in ceil.items()))
    hdr = (
        f"{'op':<34} {'shape':<34} {'backend':<18} {'median_us':>10} {'p20':>9} {'p80':>9}"
        f" {'GB/s':>8}  ratios (peer time / this)"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        gb = "" if r.gbps is None else f"{r.gbps:.1f}"
        print(
            f"{r.op:<34} {r.shape:<34} {r.backend:<18} {r.median_us:>10.2f} {r.p20_us:>9.2f} "
            f"{r.p80_us:>9.2f} {gb:>8}  {r.ratios} {r.note}"
        )

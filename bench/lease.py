"""One lease command that answers the ledger (bench/ledger.json) on a GPU in at most 300 s.

    python3 -m bench.lease --commit $(git rev-parse --short=12 HEAD)          # on the GPU
    DRY_RUN=1 python3 -m bench.lease --commit $(git rev-parse --short=12 HEAD)  # here, first

Stages, in order, each under its own timeout (the plan in ledger.json's ``lease`` section; the
dry run fails when the timeouts of the schedule add up to more than the budget):
1. build: ``pip install -e .`` for sm_90 (no cuda_sim); stops the run at once if the build
   fails, CUDA or sm_90 is missing, or a ledger CUDA kernel is not compiled.
2. checks, in parallel: the ledger's GPU tests (SPECOPS_GPU_ONLY=1: no CPU cases) and
   compute-sanitizer memcheck, racecheck, synccheck and initcheck on the ledger's CUDA test files.
3. bench: every ledger case beside its peers (lease_cases.py; never the reference).
4. ncu: Nsight Compute on each counted case (the traffic bench's shapes): DRAM bytes and L1
   global sectors / requests, set against the CPU traffic counts.
5. table: change | tests | before | now | predicted | peer | ratio | ncu bytes / counted |
   ncu sectors per request / counted | check (bench/lease_table.py).

At most 8 files come back, each written as the run goes: lease.log, build.json, tests.log,
sanitize.log, bench.csv, ncu.csv, table.md, stages.json.  ``--commit`` is the clean commit the
run measures (rows carry it; never read from git on the device).  ``python -m bench.ingest DIR``
takes the files into bench/results and the ledger.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

from . import lease_table, ledger

FILES = (
    "lease.log", "build.json", "tests.log", "sanitize.log", "bench.csv", "ncu.csv", "table.md",
    "stages.json",
)  # fmt: skip
SANITIZERS = ("memcheck", "racecheck", "synccheck", "initcheck")
NCU_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum") + tuple(
    f"l1tex__t_{what}_pipe_lsu_mem_global_op_{op}.sum"
    for op in ("ld", "st")
    for what in ("sectors", "requests")
)


class Lease:
    def __init__(self, args, data: dict):
        self.args, self.data, self.dry = args, data, args.dry_run
        self.out = args.out
        self.plan = data["lease"]
        self.stages: dict[str, dict] = {}
        self._lock = threading.Lock()  # the checks stage records from five threads
        os.makedirs(self.out, exist_ok=True)
        self._log = open(os.path.join(self.out, "lease.log"), "a", buffering=1)

    # ---- bookkeeping -----------------------------------------------------------------------
    def log(self, msg: str) -> None:
        print(msg, flush=True)
        self._log.write(msg + "\n")

    def path(self, name: str) -> str:
        assert name in FILES, name
        return os.path.join(self.out, name)

    def record(self, stage: str, t0: float, ok: bool, **info) -> bool:
        with self._lock:
            self.stages[stage] = {"seconds": round(time.time() - t0, 1), "ok": ok, **info}
            with open(self.path("stages.json"), "w") as f:
                json.dump({"commit": self.args.commit, "dry_run": self.dry, "stages": self.stages},
                          f, indent=1)  # fmt: skip
        self.log(f"== {stage}: {'ok' if ok else 'FAILED'} in {self.stages[stage]['seconds']} s")
        return ok

    def timeout(self, stage: str) -> int:
        return int(self.plan["stages"][stage]["timeout_s"])

    def run(self, cmd, log_name, timeout, env=None, prefix=""):
        """Run ``cmd``, its output appended line by line to ``log_name``; -> its exit code (124
        when killed at ``timeout`` seconds, 127 when it cannot start)."""
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        with open(self.path(log_name), "a", buffering=1) as f:
            f.write(f"{prefix}$ {' '.join(cmd)}\n")
            try:
                p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env)  # fmt: skip
            except FileNotFoundError as e:
                f.write(f"{prefix}{e}\n")
                return 127
            timer = threading.Timer(timeout, p.kill)
            timer.start()
            for line in p.stdout:
                f.write(prefix + line)
            rc = p.wait()
            timer.cancel()
            if rc == -9:
                f.write(f"{prefix}killed at its {timeout} s timeout\n")
                rc = 124
        return rc

    # ---- 0: the plan -------------------------------------------------------------------------
    def check_plan(self) -> bool:
        t0 = time.time()
        problems = []
        if not re.fullmatch(r"[0-9a-f]{7,40}", self.args.commit):
            problems.append(f"--commit {self.args.commit!r}: want a clean commit's hex hash")
        if self.dry and shutil.which("git"):
            head = ledger._git(ledger.ROOT, "rev-parse", "HEAD").strip()
            dirty = ledger._git(ledger.ROOT, "status", "--porcelain", "--untracked-files=no")
            if not head.startswith(self.args.commit):
                problems.append(f"--commit {self.args.commit} is not HEAD ({head[:12]})")
            if dirty.strip() and not self.args.allow_dirty:
                problems.append("the tree has uncommitted changes: rows would not be of --commit")
        total = lease_table.plan_seconds(self.plan)
        if total > self.plan["budget_s"]:
            problems.append(f"the plan's timeouts add up to {total} s > {self.plan['budget_s']} s")
        recorded = lease_table.recorded_seconds(self.plan)
        if recorded > self.plan["budget_s"]:
            problems.append(f"the stages' recorded times add up to {recorded} s > "
                            f"{self.plan['budget_s']} s")  # fmt: skip
        for p in problems:
            self.log(f"plan: {p}")
        return self.record("plan", t0, not problems, planned_s=total)

    # ---- 1: build ----------------------------------------------------------------------------
    def peers(self) -> None:
        """Peers travel in .peers/ (site-folder tarballs: FlashInfer with its AOT kernels, SGLang's
        sampler files) and .whl/ (wheels): unpacked into /tmp/site, put on PYTHONPATH."""
        import glob

        tars, wheels = sorted(glob.glob(".peers/*.tar.xz")), sorted(glob.glob(".whl/*.whl"))
        self.log(f"peers: {len(tars)} tarballs, {len(wheels)} wheels"
                 f"{' (dry run: not unpacked)' if self.dry else ''}")  # fmt: skip
        if self.dry or not (tars or wheels):
            return
        os.makedirs("/tmp/site", exist_ok=True)
        for t in tars:
            self.run(["tar", "xJf", t, "-C", "/tmp/site"], "lease.log", 60)
        if wheels:
            pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
            self.run([*pip, "--no-compile", "--target", "/tmp/site", *wheels], "lease.log", 60)
        os.environ["PYTHONPATH"] = "/tmp/site" + os.pathsep + os.environ.get("PYTHONPATH", "")

    def build(self) -> bool:
        t0 = time.time()
        rc = 0
        self.peers()
        if not self.dry:
            env = {"SPECOPS_CUDA_ARCHS": "90", "SPECOPS_CUDA_SIM": "0"}
            cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
                   "--no-build-isolation", "-e", "."]  # fmt: skip
            rc = self.run(cmd, "lease.log", self.timeout("build"), env)
        info = self._build_info()
        with open(self.path("build.json"), "w") as f:
            json.dump(info, f, indent=1)
        problems = [] if rc == 0 else [f"pip install exited {rc}"]
        problems += lease_table.build_problems(info, self.data, gpu=not self.dry)
        for p in problems:
            self.log(f"build: {p}")
        return self.record("build", t0, not problems)

    def _build_info(self) -> dict:
        code = (
            "import json, torch, specops; info = specops.build_info();"
            "info['gpu'] = torch.cuda.get_device_name() if torch.cuda.is_available() else None;"
            "info['torch_cuda_available'] = torch.cuda.is_available();"
            "print(json.dumps(info))"
        )
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        info = json.loads(r.stdout) if r.returncode == 0 else {"import_error": r.stderr[-2000:]}
        info["commit"] = self.args.commit
        try:
            import triton

            info["triton"] = triton.__version__
        except ImportError:
            info["triton"] = None
        smi = shutil.which("nvidia-smi")
        if smi:
            q = "--query-gpu=name,driver_version,memory.total"
            r = subprocess.run([smi, q, "--format=csv,noheader"], capture_output=True, text=True)
            info["nvidia_smi"] = r.stdout.strip()
        return info

    # ---- 2: tests and sanitizers, in parallel ---------------------------------------------------
    def checks(self) -> bool:
        t0 = time.time()
        tests = lease_table.test_ids(self.data)
        cuda_files = lease_table.sanitizer_files(self.data)
        py = sys.executable
        if self.dry:
            rc = self.run([py, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           *tests], "tests.log", self.timeout("checks"))  # fmt: skip
            with open(self.path("tests.log")) as f:
                missing = lease_table.uncollected(tests, f.read())
            for m in missing:
                self.log(f"tests: {m} collects nothing")
            san = _sanitizer()
            self.log(f"sanitize: compute-sanitizer = {san or 'not on this machine'}; files: "
                     f"{' '.join(cuda_files)}")  # fmt: skip
            rc2 = self.run([py, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                            "-m", "gpu", *cuda_files], "sanitize.log", 120)  # fmt: skip
            return self.record("checks", t0, rc == 0 and rc2 == 0 and not missing)
        jobs = [threading.Thread(target=self._tests, args=(tests,))]
        jobs += [threading.Thread(target=self._sanitize, args=(t, cuda_files)) for t in SANITIZERS]
        for j in jobs:
            j.start()
        for j in jobs:
            j.join()
        results = {k: v for k, v in self.stages.items() if k.startswith(("tests", "san:"))}
        return self.record("checks", t0, all(v["ok"] for v in results.values()))

    def _tests(self, tests) -> None:
        t0 = time.time()
        junit = os.path.join("/tmp", "specops_lease_junit.xml")
        if os.path.exists(junit):  # another run's results must not count as this one's
            os.remove(junit)
        xdist = ["-n", "8"] if _has("xdist") else []
        cmd = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", *xdist,
               f"--junitxml={junit}", *tests]  # fmt: skip
        rc = self.run(cmd, "tests.log", self.timeout("checks"), {"SPECOPS_GPU_ONLY": "1"})
        per_entry = lease_table.junit_by_entry(junit, self.data)
        self.record("tests", t0, rc == 0, rc=rc, per_entry=per_entry)

    def _sanitize(self, tool: str, files) -> None:
        t0 = time.time()
        san = _sanitizer() or "compute-sanitizer"
        env = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"} if tool in ("memcheck", "initcheck") else {}
        cmd = [san, "--tool", tool, "--error-exitcode", "1", "--print-limit", "20",
               "--target-processes", "all", sys.executable, "-m", "pytest", "-q",
               "-p", "no:cacheprovider", "-m", "gpu", "-k", "not graph and not fuzz and not many",
               *files]  # fmt: skip
        rc = self.run(cmd, "sanitize.log", self.timeout("checks"), env, prefix=f"[{tool}] ")
        self.record(f"san:{tool}", t0, rc == 0, rc=rc)

    # ---- 3: bench ----------------------------------------------------------------------------
    def bench(self) -> bool:
        t0 = time.time()
        deadline = str(self.timeout("bench") - 5)
        cmd = [sys.executable, "-m", "bench.lease_bench", "--commit", self.args.commit,
               "--csv", self.path("bench.csv"), "--deadline", deadline]  # fmt: skip
        if self.dry:
            cmd.append("--dry-run")
        rc = self.run(cmd, "lease.log", self.timeout("bench"))
        return self.record("bench", t0, rc == 0, rc=rc)

    # ---- 4: ncu ------------------------------------------------------------------------------
    def ncu(self) -> bool:
        t0 = time.time()
        driver = [sys.executable, "-m", "bench.lease_bench", "--ncu-driver",
                  "--commit", self.args.commit]  # fmt: skip
        ncu = (
            shutil.which("ncu")
            or _glob_first("/usr/local/cuda*/bin/ncu")
            or _glob_first("/opt/nvidia/nsight-compute/*/ncu")
        )
        if self.dry:
            self.log(f"ncu: {ncu or 'not on this machine'}")
            rc = self.run([*driver, "--dry-run"], "lease.log", self.timeout("ncu"))
            return self.record("ncu", t0, rc == 0)
        cmd = [ncu or "ncu", "--clock-control", "none", "--profile-from-start", "off",
               "--target-processes", "all", "--metrics", ",".join(NCU_METRICS), "--csv",
               "--page", "raw", "--log-file", self.path("ncu.csv"), *driver]  # fmt: skip
        rc = self.run(cmd, "lease.log", self.timeout("ncu"))
        return self.record("ncu", t0, rc == 0, rc=rc)

    # ---- 5: table ----------------------------------------------------------------------------
    def table(self) -> None:
        text = lease_table.table(self.data, self.out, self.stages)
        with open(self.path("table.md"), "w") as f:
            f.write(text + "\n")
        self.log(text)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _sanitizer() -> str | None:
    return (
        shutil.which("compute-sanitizer")
        or _glob_first("/usr/local/cuda*/bin/compute-sanitizer")
        or _glob_first("/opt/nvidia/*/compute-sanitizer/compute-sanitizer")
    )


def _glob_first(pattern: str) -> str | None:
    import glob

    hits = sorted(glob.glob(pattern))
    return hits[-1] if hits else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.lease", description=__doc__.split("\n")[0],
                                 allow_abbrev=False)  # fmt: skip
    ap.add_argument("--commit", required=True, help="the clean commit measured (hex)")
    ap.add_argument("--out", default=os.environ.get("OUT") or "lease_out")
    ap.add_argument("--dry-run", action="store_true", default=os.environ.get("DRY_RUN") == "1",
                    help="everything but the GPU calls (default: DRY_RUN=1)")  # fmt: skip
    ap.add_argument("--allow-dirty", action="store_true",
                    help="dry run only: rehearse with uncommitted changes (tests do)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.allow_dirty and not args.dry_run:
        ap.error("--allow-dirty: only with the dry run (a lease measures a clean commit)")
    os.chdir(ledger.ROOT)
    os.environ["SPECOPS_COMMIT"] = args.commit  # every row written below carries it
    lease = Lease(args, ledger.load())
    lease.log(f"== lease of {args.commit}{' (dry run)' if args.dry_run else ''} -> {args.out}")
    ok = lease.check_plan() and lease.build()
    if ok:
        ok = lease.checks() & lease.bench() & lease.ncu()
    lease.table()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

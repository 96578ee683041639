"""The ledger of kernel changes not yet measured on a GPU (issue 45): bench/ledger.json.

A GPU is lent to about one session in five, for 15 minutes.  Between leases, kernels change
without running; the ledger says which, and what the next lease must answer for each change:

- ``kernels``: every GPU kernel unit (``cuda:<op>`` compiled from a ``csrc/*.cu`` file, or
  ``triton:<op>`` from a ``triton_kernels`` module), its root sources and the (op, backend)
  CSV rows that measure it.  Its *sources* are the roots and everything they include
  (``#include "..."`` under csrc/, ``specops.triton_kernels`` imports), computed here.
- ``runs``: the GPU runs ingested so far (commit, CSV files).  A unit's *baseline* is the newest
  run whose CSV has one of its rows.
- ``entries``: one per change: the kernel units it touches, the commits that made it, the GPU
  test ids that exercise it, the bench cases (op, backend, shape: the traffic bench's shapes),
  the last GPU row before it, the traffic model's prediction at HEAD and the peer to beat.

``python -m bench.ledger check`` (CI, tests/test_ledger.py) fails when a commit after a unit's
baseline changed one of its sources and no open entry names both the unit and the commit.
``python -m bench.ledger pending`` lists those commits; ``render`` prints the README's list.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
LEDGER = os.path.join(ROOT, "bench", "ledger.json")
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
_TRITON_IMPORT = re.compile(
    r"^\s*from\s+specops\.triton_kernels(?:\.(\w+))?\s+import\s+(.+)$", re.M
)


def load(path: str = LEDGER) -> dict:
    with open(path) as f:
        data = json.load(f)
    validate(data)
    return data


def save(data: dict, path: str = LEDGER) -> None:
    validate(data)
    with open(path, "w") as f:
        json.dump(data, f, indent=1, ensure_ascii=False)
        f.write("\n")


_ENTRY_KEYS = {
    "id": str, "title": str, "kernels": list, "commits": list, "tests": list, "bench": list,
    "status": str,
}  # fmt: skip
_CASE_KEYS = ("op", "backend", "shape", "peer", "before")


def validate(data: dict) -> None:
    """Raise ValueError naming the entry and field that breaks the schema above."""
    for key in ("kernels", "runs", "entries"):
        if key not in data:
            raise ValueError(f"ledger: no {key!r} section")
    ids = set()
    for e in data["entries"]:
        where = f"ledger entry {e.get('id', '?')!r}"
        for k, t in _ENTRY_KEYS.items():
            if k not in e or not isinstance(e[k], t):
                raise ValueError(f"{where}: field {k!r} missing or not {t}")
        if e["id"] in ids:
            raise ValueError(f"{where}: id used twice")
        ids.add(e["id"])
        if e["status"] not in ("open", "measured"):
            raise ValueError(f"{where}: status {e['status']!r} is not open or measured")
        for k in e["kernels"]:
            if k not in data["kernels"]:
                raise ValueError(f"{where}: unknown kernel unit {k!r}")
        for c in e["bench"]:
            if any(k not in c for k in _CASE_KEYS):
                raise ValueError(f"{where}: bench case {c} lacks one of {_CASE_KEYS}")
            b = c["before"]
            if b is not None and not all(k in b for k in ("csv", "commit", "shape", "us")):
                raise ValueError(
                    f"{where}: bench case {c['shape']!r}: before needs csv, commit, "
                    "shape and us (or null: no GPU row before)"
                )
        if e["status"] == "open" and not e["tests"]:
            raise ValueError(f"{where}: an open entry names the GPU tests that exercise it")


def open_entries(data: dict) -> list[dict]:
    """The entries a lease still has to answer."""
    return [e for e in data["entries"] if e["status"] == "open"]


# ---- sources ---------------------------------------------------------------------------------
def _includes(path: str, root: str) -> list[str]:
    """The project headers ``path`` includes (csrc/ and csrc/include/ are the include roots)."""
    with open(os.path.join(root, path)) as f:
        text = f.read()
    out = []
    for name in _INCLUDE.findall(text):
        for base in ("csrc/include", "csrc", os.path.dirname(path)):
            cand = os.path.normpath(os.path.join(base, name))
            if os.path.exists(os.path.join(root, cand)):
                out.append(cand)
                break
    return out


def _triton_imports(path: str, root: str) -> list[str]:
    """The triton_kernels modules ``path`` imports (``from specops.triton_kernels.x import``)."""
    with open(os.path.join(root, path)) as f:
        text = f.read()
    out = []
    for mod, names in _TRITON_IMPORT.findall(text):
        mods = [mod] if mod else [n.strip() for n in names.strip("()").split(",")]
        for m in mods:
            cand = f"triton_kernels/{m}.py"
            if os.path.exists(os.path.join(root, cand)):
                out.append(cand)
    return out


def sources(unit: dict, root: str = ROOT, opaque: tuple[str, ...] = ()) -> list[str]:
    """A kernel unit's roots and, transitively, the project files they include or import.  An
    ``opaque`` header (csrc/launchers.h: the launchers' declarations, no device code) counts
    itself but not what it includes."""
    seen, todo = set(), list(unit["roots"])
    while todo:
        path = todo.pop()
        if path in seen or not os.path.exists(os.path.join(root, path)):
            continue
        seen.add(path)
        if path in opaque:
            continue
        todo += _triton_imports(path, root) if path.endswith(".py") else _includes(path, root)
    return sorted(seen)


def unit_sources(data: dict, unit: str, root: str = ROOT) -> list[str]:
    """``sources`` of the ledger's kernel unit ``unit``, with the ledger's opaque headers."""
    srcs = sources(data["kernels"][unit], root, tuple(data.get("opaque", ())))
    if not srcs:
        raise ValueError(f"kernel unit {unit}: none of its roots exists under {root}")
    return srcs


# ---- baselines and what changed since ----------------------------------------------------------
def _csv_rows(path: str, root: str) -> set[tuple[str, str]]:
    with open(os.path.join(root, path), newline="") as f:
        return {(r["op"], r["backend"]) for r in csv.DictReader(f)}


def baselines(data: dict, root: str = ROOT) -> dict[str, str | None]:
    """Each kernel unit's baseline: the commit of the newest ingested run (``runs`` is oldest
    first) whose CSVs have one of the unit's rows; None for a unit never measured."""
    rows = {}
    for run in data["runs"]:
        seen = set()
        for path in run["csv"]:
            seen |= _csv_rows(path, root)
        rows[run["commit"]] = seen
    out = {}
    for name, unit in data["kernels"].items():
        want = {tuple(r) for r in unit["rows"]}
        out[name] = None
        for run in data["runs"]:
            if rows[run["commit"]] & want:
                out[name] = run["commit"]
    return out


def _git(root: str, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True, check=True
    ).stdout


@dataclass
class Unlisted:
    unit: str
    commit: str
    files: list[str]
    subject: str

    def __str__(self) -> str:
        return (
            f"{self.commit} changed {', '.join(self.files)} ({self.unit}) and no open ledger "
            f"entry names it: {self.subject[:90]}"
        )


def changes(data: dict, root: str = ROOT) -> dict[str, list[tuple[str, list[str], str]]]:
    """Per kernel unit: the commits after its baseline that changed one of its sources, oldest
    first, as (short hash, files, subject).  A unit never measured lists every commit."""
    out = {}
    for name, base in baselines(data, root).items():
        srcs = unit_sources(data, name, root)
        rng = [f"{base}..HEAD"] if base else ["HEAD"]
        # each commit opens with a NUL (a subject may hold any printable character)
        log = _git(root, "log", "--reverse", "--format=%x00%h %s", "--name-only", *rng, "--", *srcs)
        commits = []
        for block in log.split("\0")[1:]:
            head, *files = [ln for ln in block.splitlines() if ln.strip()]
            short, _, subject = head.partition(" ")
            commits.append((short, [f for f in files if f in srcs], subject))
        out[name] = commits
    return out


def _same(a: str, b: str) -> bool:
    n = min(len(a), len(b))
    return n >= 7 and a[:n] == b[:n]


def unlisted(data: dict, root: str = ROOT) -> list[Unlisted]:
    """The kernel changes no open entry names (unit and commit both)."""
    named = [(set(e["kernels"]), e["commits"]) for e in open_entries(data)]
    out = []
    for unit, commits in changes(data, root).items():
        for short, files, subject in commits:
            if not any(unit in ks and any(_same(short, c) for c in cs) for ks, cs in named):
                out.append(Unlisted(unit, short, files, subject))
    return out


def check(root: str = ROOT, path: str | None = None) -> list[str]:
    """Problems with the ledger at ``root``: runs whose commit git does not know (checked first:
    the baselines need them), else the unlisted kernel changes.  Empty: the ledger holds."""
    data = load(path or os.path.join(root, "bench", "ledger.json"))
    problems = []
    for run in data["runs"]:
        if subprocess.run(
            ["git", "cat-file", "-e", f"{run['commit']}^{{commit}}"], cwd=root, capture_output=True
        ).returncode:
            problems.append(f"run {run['commit']}: not a commit of this repository")
    if problems:
        return problems
    problems += [str(u) for u in unlisted(data, root)]
    return problems


# ---- the CPU traffic counts at HEAD (bench/results/cpu-traffic-<commit>.csv) --------------------
def traffic_rows(data: dict, root: str = ROOT) -> list[dict]:
    """The committed traffic CSV's rows (``specops bench --device cpu --ops traffic``)."""
    with open(os.path.join(root, data["traffic"]["csv"]), newline="") as f:
        lines = [ln for ln in f if not ln.startswith("#")]
    return list(csv.DictReader(lines))


def counted(case: dict, rows: list[dict]) -> list[dict]:
    """The traffic rows of one bench case: one per kernel launch of that (op, backend, shape)."""
    return [
        r
        for r in rows
        if r["op"] == case["op"] and r["backend"] == case["backend"] and r["shape"] == case["shape"]
    ]


def predicted_us(case: dict, rows: list[dict]) -> float | None:
    """The time model's prediction for a case (its launches summed), None where not counted."""
    launches = counted(case, rows)
    return round(sum(float(r["predicted_us"]) for r in launches), 2) if launches else None


def stale_units(data: dict, root: str = ROOT) -> dict[str, list[str]]:
    """Kernel units of open entries whose sources changed after the commit the committed traffic
    counts measured, with those commits: their predictions and ncu comparisons would be of
    other code."""
    base = data["traffic"]["commit"]
    out = {}
    for unit in sorted({k for e in open_entries(data) for k in e["kernels"]}):
        srcs = unit_sources(data, unit, root)
        commits = _git(root, "log", "--format=%h", f"{base}..HEAD", "--", *srcs).split()
        if commits:
            out[unit] = commits
    return out


def stale_counts(data: dict, root: str = ROOT) -> list[str]:
    """``stale_units`` as one line each."""
    base = data["traffic"]["commit"]
    return [
        f"{unit}: changed at {', '.join(log)} after the traffic counts ({base})"
        for unit, log in stale_units(data, root).items()
    ]


def unit_of(data: dict, op: str, backend: str) -> str | None:
    """The kernel unit that runs ``op`` on ``backend``: ``backend:op`` itself, else the unit whose
    CSV rows name the op (``triton:features`` runs gather_rows)."""
    if f"{backend}:{op}" in data["kernels"]:
        return f"{backend}:{op}"
    for name, unit in data["kernels"].items():
        if name.startswith(backend + ":") and [op, backend] in unit["rows"]:
            return name
    return None


# ---- the README's list -----------------------------------------------------------------------
def _case_text(case: dict, rows: list[dict]) -> str:
    b = case["before"]
    was = f"{b['us']} us at {b['commit']}" if b else "no GPU row before"
    pred = predicted_us(case, rows)
    pred = f"{pred} us predicted" if pred is not None else "not counted at this shape"
    return f"{case['op']} {case['backend']} `{case['shape']}` ({was}; {pred}; peer: {case['peer']})"


def render(data: dict, root: str = ROOT) -> str:
    """The README's "not yet run on a GPU" list, one item per open entry."""
    rows = traffic_rows(data, root)
    lines = []
    for e in open_entries(data):
        cases = "; ".join(_case_text(c, rows) for c in e["bench"]) or "tests only"
        lines.append(
            f"- **{e['id']}** ({', '.join(e['commits'])}): {e['title']} Kernels: "
            f"{', '.join(e['kernels'])}. Bench: {cases}."
        )
    return "\n".join(lines)


README_BEGIN = "<!-- ledger:begin (generated by python -m bench.ledger render --write) -->"
README_END = "<!-- ledger:end -->"


def write_readme(data: dict, readme: str = os.path.join(ROOT, "README.md")) -> bool:
    """Replace the README's generated block; True if it changed."""
    with open(readme) as f:
        text = f.read()
    start, end = text.index(README_BEGIN), text.index(README_END)
    new = text[: start + len(README_BEGIN)] + "\n" + render(data) + "\n" + text[end:]
    if new != text:
        with open(readme, "w") as f:
            f.write(new)
    return new != text


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cmd = argv[0] if argv else "check"
    data = load()
    if cmd == "check":
        problems = check()
        for p in problems:
            print(f"ledger: {p}")
        print(f"ledger: {'FAILED' if problems else 'ok'} ({len(problems)} unlisted)")
        return 1 if problems else 0
    if cmd == "pending":
        base_of = baselines(data)
        for unit, commits in changes(data).items():
            base = base_of[unit]
            print(f"== {unit} (baseline {base}): {len(commits)} commits")
            for short, files, subject in commits:
                print(f"  {short} {','.join(files)} :: {subject[:100]}")
        return 0
    if cmd == "render":
        if "--write" in argv:
            print("README changed" if write_readme(data) else "README unchanged")
        else:
            print(render(data))
        return 0
    print(f"usage: python -m bench.ledger [check|pending|render [--write]] (got {cmd!r})")
    return 2


if __name__ == "__main__":
    sys.exit(main())

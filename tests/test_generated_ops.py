"""The public ops are plain functions in committed files (specops/ops/_generated_<family>.py,
written from the declarations by scripts/gen_ops.py): regenerating them changes nothing, grep
and inspect find each one, nothing in specops/ builds code at run time, and the checked path
reaches the compiled binding in a few frames."""

from __future__ import annotations

import ast
import inspect
import pathlib
import subprocess
import sys
import traceback

import pytest
import torch
from fast_path_table import _OPS, _kwargs

import specops
from specops import _build
from specops.ops._decl import _DECLS

ROOT = pathlib.Path(__file__).resolve().parents[1]
PUBLIC = sorted(n for n, d in _DECLS.items() if d.api is not None)
MAX_FRAMES = 4  # public op, OpDecl.run, a kernel hook, OpDecl.launch (issue 47)


def test_generated_ops_are_current():
    """scripts/gen_ops.py --check: the committed modules are what the declarations give."""
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_ops.py"), "--check"],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("op", PUBLIC)
def test_every_public_op_is_a_def_in_a_generated_file(op):
    d = _DECLS[op]
    family = d.check.__module__.rsplit(".", 1)[1]
    path = ROOT / "specops" / "ops" / f"_generated_{family}.py"
    assert f"def {op}(" in path.read_text(encoding="utf-8")
    fn = getattr(sys.modules[f"specops.ops._generated_{family}"], op)
    assert pathlib.Path(inspect.getsourcefile(fn)) == path
    assert inspect.getsource(fn).lstrip().startswith(("@traced", "def "))
    if hasattr(specops, op):
        assert getattr(specops, op) is fn


def test_specops_builds_no_code_at_run_time():
    """No exec / eval / compile and no sys._getframe anywhere in specops/."""
    found = []
    for path in (ROOT / "specops").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                name = node.func.id if node.func.id in ("exec", "eval", "compile") else None
            elif isinstance(node, ast.Attribute) and node.attr == "_getframe":
                name = "_getframe"
            if name:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert not found, found


# frames from the public op to the binding on the checked path ---------------------------------
def _frames_to_binding(op: str, monkeypatch) -> int:
    """Calls ``specops.<op>`` (validation mode: the checked path) with a spy in place of its CPU
    binding -> the frames from the public function to the one calling the binding, both
    included."""
    fn = getattr(specops, op)
    code = inspect.unwrap(fn).__code__
    binding, depth = getattr(_build._C, f"{op}_cpu"), []

    def spy(*args, **kwargs):
        stack = traceback.extract_stack()[:-1]  # outermost first; the spy's own frame dropped
        start = max(i for i, f in enumerate(stack) if f.filename == code.co_filename
                    and f.name == code.co_name)  # fmt: skip
        depth.append(len(stack) - start)
        return binding(*args, **kwargs)

    monkeypatch.setattr(_build._C, f"{op}_cpu", spy)
    with specops.validation(True):
        fn(**{**_kwargs(op, lambda kw: kw), "backend": "cpu"})
    assert depth, f"{op}: the binding was not called"
    return depth[0]


@pytest.mark.skipif(not _build.has_cpp(), reason="needs the compiled specops._C")
@pytest.mark.parametrize("op", [op for op in _OPS if op in PUBLIC])
def test_checked_path_reaches_the_binding_in_at_most_4_frames(op, monkeypatch):
    assert _frames_to_binding(op, monkeypatch) <= MAX_FRAMES


@pytest.mark.skipif(not _build.has_cpp(), reason="needs the compiled specops._C")
def test_frame_count_sees_the_kernel_hook(monkeypatch):
    """The count is of real frames: sample runs its kernel hook (public, run, _kernel, launch)."""
    assert _frames_to_binding("sample", monkeypatch) == 4
    assert _frames_to_binding("verify_chain", monkeypatch) == 3  # public, run, launch


def test_traceback_names_the_generated_file():
    with pytest.raises(ValueError) as e:
        specops.verify_chain(torch.rand(2, 3, 5), torch.zeros(2, 7, dtype=torch.long))
    files = [f.filename for f in traceback.extract_tb(e.value.__traceback__)]
    assert any(f.endswith("_generated_verify.py") for f in files), files

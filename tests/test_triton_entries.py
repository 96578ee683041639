"""One way from a declaration to its Triton kernel (issue 47): every op with a "triton" backend
names its entry in its declaration (``OpDecl.triton``), the ops layer reaches Triton only through
``OpDecl.triton_kernel`` (the names an entry takes: tests/test_declarations.py)."""

from __future__ import annotations

import re
from pathlib import Path

import specops  # noqa: F401  (registers every declaration)
from specops.ops._decl import _DECLS

ROOT = Path(__file__).resolve().parents[1]
IMPORT = re.compile(r"^\s*(from\s+specops\.triton_kernels|import\s+specops\.triton_kernels)", re.M)


def test_every_triton_op_names_its_entry():
    missing = [d.name for d in _DECLS.values() if "triton" in d.backends and not d.triton]
    assert not missing, f"ops with a triton backend and no triton= entry: {missing}"


def test_the_ops_layer_imports_no_triton_kernel_itself():
    hits = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "specops").rglob("*.py"))
        if IMPORT.search(p.read_text()) and p.name != "_decl.py"
    ]
    assert not hits, f"reach Triton through OpDecl.triton_kernel, not an import: {hits}"

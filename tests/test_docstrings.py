"""Every public op documents each of its parameters in a numpydoc ``Parameters`` section
(name : [shape] dtype, then the meaning), which docs/api renders as a table."""

from __future__ import annotations

import inspect

import pytest

import specops
from specops import ops


def _documented(doc: str) -> list[str]:
    lines = inspect.cleandoc(doc).split("\n")
    start = next(
        (
            i
            for i, x in enumerate(lines[:-1])
            if x.strip() == "Parameters" and set(lines[i + 1]) == {"-"}
        ),
        None,
    )
    if start is None:
        return []
    names = []
    for line in lines[start + 2 :]:
        if not line.strip():
            break
        if not line.startswith(" "):
            names += [n.strip() for n in line.partition(" : ")[0].split(",")]
    return names


OPS = [
    n
    for n in ops.__all__
    if callable(getattr(specops, n)) and not isinstance(getattr(specops, n), type)
]


@pytest.mark.parametrize("name", OPS)
def test_public_op_has_a_parameters_table(name):
    fn = getattr(specops, name)
    documented = _documented(fn.__doc__ or "")
    params = [p for p in inspect.signature(fn).parameters if p not in ("self",)]
    missing = [p for p in params if p not in documented]
    assert not missing, f"specops.{name}: Parameters section lacks {missing}"
    extra = [p for p in documented if p not in params]
    assert not extra, f"specops.{name}: Parameters section names {extra}, not parameters"

"""Outputs that share memory with an input or with another output are a clear error on every
backend, and the compiled bindings refuse them on their own too."""

from __future__ import annotations

import pytest
import torch
from fast_path_cases import _I32, B, K, V
from fast_path_table import _ALIAS, _head, _kwargs
from helpers import CUDA_SIM, NO_GROUP, gen, random_probs

import specops
from specops import _build
from specops.ops import _common as c

pytestmark = pytest.mark.skipif(not _build.has_cpp(), reason="needs the compiled specops._C")


_ALIAS_CASES = [(op, name, m) for op, t in _ALIAS.items() for name, m in t.items()]


@pytest.mark.parametrize("backend", ["auto", "reference", "cpu", "triton", CUDA_SIM])
@pytest.mark.parametrize(
    ("op", "name", "mutate"), _ALIAS_CASES, ids=[f"{o}-{n}" for o, n, _ in _ALIAS_CASES]
)
def test_outputs_that_alias_are_rejected(op, name, mutate, backend):
    """An out buffer sharing bytes with an input or another output is a clear error on every
    backend (the Python check), and the compiled binding refuses it on its own too."""
    if backend not in ("auto", *c.backend_table()[op]):
        pytest.skip(f"{op} has no {backend} backend")
    kw = _kwargs(op, mutate)
    with specops.validation(False), pytest.raises(ValueError, match="shares memory"):
        getattr(specops, op)(**kw, backend=backend)


def test_bindings_reject_aliased_outputs():
    probs = random_probs(B, V, generator=gen(0))
    with pytest.raises(ValueError, match="out shares memory with probs"):
        _build._C.sample_cpu(probs, (None, 1, None, 0), None, _head(probs, (B,)))
    buf = torch.zeros(B, K + 1, dtype=_I32)
    target, chain = random_probs(B, K + 1, V, generator=gen(0)), _build._C.verify_chain_cpu
    rest = (None, None, (None, 1, None, 0), None, 0.0, *NO_GROUP, False, None, False)  # declared
    with pytest.raises(ValueError, match="out_tokens shares memory with draft_tokens"):
        chain(target, buf[:, :K], *rest, buf, None)
    with pytest.raises(ValueError, match="out_num_accepted shares memory with out_tokens"):
        chain(target, torch.zeros(B, K, dtype=_I32), *rest, buf, buf.view(-1)[:B])

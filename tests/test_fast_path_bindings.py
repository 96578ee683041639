"""The compiled bindings the fast path calls: the same results without torch's DLPack exchange
table, and calls of two Python threads at once."""

from __future__ import annotations

import pytest
import torch
from helpers import gen, random_probs

import specops
from specops import _build

pytestmark = pytest.mark.skipif(not _build.has_cpp(), reason="needs the compiled specops._C")


_WITHOUT_EXCHANGE = """
import torch, specops
from specops import _build, Tree
assert not _build._C.dlpack_exchange
g = torch.Generator().manual_seed(0)
p = torch.softmax(torch.randn(3, 5, 11, generator=g), -1)
x = torch.randint(0, 11, (3, 4), generator=g)
r = specops.verify_chain(p, x, p[:, :4].contiguous(), seed=1, offset=torch.tensor([2]))
t = Tree.kary(2, 2)
pt = torch.softmax(torch.randn(3, 3, 11, generator=g), -1)
rt = specops.verify_tree(pt, t, torch.randint(0, 11, (3, 3), generator=g), pt, seed=1)
s = specops.sample(p[:, 0], seed=4)
print(r.tokens.tolist(), r.num_accepted.tolist(), rt.path.tolist(), s.tolist())
"""


def test_without_the_dlpack_exchange_table():
    """torch < 2.10 has no exchange table: the bindings read the tensors' Python attributes and
    make outputs with torch.empty.  Same results (SPECOPS_DLPACK_EXCHANGE=0 takes that path)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, SPECOPS_DLPACK_EXCHANGE="0", SPECOPS_VALIDATE="0")
    cwd = os.path.dirname(__file__)  # not the checkout root: its source tree would shadow a wheel
    res = subprocess.run([sys.executable, "-c", _WITHOUT_EXCHANGE], env=env, cwd=cwd,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    env["SPECOPS_DLPACK_EXCHANGE"] = "1"
    script = _WITHOUT_EXCHANGE.replace("assert not", "assert")
    want = subprocess.run([sys.executable, "-c", script], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert want.returncode == 0, want.stderr[-3000:]
    assert res.stdout == want.stdout


def test_bindings_from_two_threads():
    """The CPU twins run with the GIL released: calls of two Python threads overlap and end in any
    order.  Each call's outputs stay its own (the bindings' per-call state is per thread)."""
    import threading

    g = gen(8)
    target, draft = random_probs(4, 9, 4000, generator=g), random_probs(4, 8, 4000, generator=g)
    tokens = torch.randint(0, 4000, (4, 8), generator=g)
    src = torch.randn(4, 50, 64, generator=g)
    idx = torch.randint(0, 50, (4, 30), generator=g)
    with specops.validation(False):
        want_chain = specops.verify_chain(target, tokens, draft, seed=3)
        want_rows = specops.gather_rows(src, idx)
    errors = []

    def chain():
        for _ in range(600):
            r = specops.verify_chain(target, tokens, draft, seed=3)
            if not (torch.equal(r.tokens, want_chain.tokens) and len(r) == 2):
                errors.append("verify_chain")

    def rows():
        for _ in range(600):
            r = specops.gather_rows(src, idx)
            if not torch.equal(r, want_rows):
                errors.append("gather_rows")

    threads = [threading.Thread(target=f) for f in (chain, rows, chain, rows)]
    with specops.validation(False):  # a process-wide switch: set once, outside the threads
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[:5]

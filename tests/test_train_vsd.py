"""VSD drafter training (specops.models.train_vsd): the differentiable path acceptance equals
specops.path_acceptance, gradients reach the drafter, a tiny --objective vsd run writes a loadable
file, and the shipped VSD drafter loads and decodes greedy-exactly."""

from __future__ import annotations

import shutil

import pytest
import torch

import specops
from specops import Tree
from specops.models.drafter import Drafter
from specops.models.loading import WEIGHTS, load_default
from specops.models.train_vsd import (
    chain_log_survival,
    path_acceptance_torch,
    rollout,
    vsd_loss,
)
from specops.models.transformer import ARConfig, Transformer


def _random_tree(n, g):
    parents = [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, n)]
    return Tree.from_parents(torch.tensor(parents, dtype=torch.int32))


@pytest.mark.parametrize("n", [1, 2, 7, 16])
@pytest.mark.parametrize("with_q", [True, False])
def test_path_acceptance_torch_equals_op(n, with_q):
    g = torch.Generator().manual_seed(n)
    b, v = 3, 11
    tree = _random_tree(n, g)
    p = torch.rand(b, n, v, generator=g).softmax(-1)
    q = (3 * torch.rand(b, n, v, generator=g)).softmax(-1) if with_q else None
    x = torch.randint(0, v, (b, n), generator=g)
    x[:, 0] = 0
    kappa, e_len = specops.path_acceptance(p, q, tree, x.int(), backend="reference")
    k2, e2 = path_acceptance_torch(p, q, tree.parents, x)
    torch.testing.assert_close(k2, kappa, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(e2, e_len, rtol=1e-5, atol=1e-6)


def test_chain_log_survival_equals_op_on_chains():
    g = torch.Generator().manual_seed(0)
    b, length, v = 4, 5, 9
    p = torch.rand(b, length + 1, v, generator=g).softmax(-1)
    q = torch.rand(b, length + 1, v, generator=g).softmax(-1)
    x = torch.randint(0, v, (b, length + 1), generator=g)
    kappa, e_len = specops.path_acceptance(p, q, Tree.chain(length + 1), x.int())
    # node i (1..L) carries x_i drafted from row i - 1
    rows = torch.arange(length)
    lp = p[:, rows].gather(-1, x[:, 1:, None])[..., 0].log()
    lq = q[:, rows].gather(-1, x[:, 1:, None])[..., 0].log()
    log_s = chain_log_survival(lp, lq)
    torch.testing.assert_close(log_s[:, -1].exp(), kappa[:, 0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(log_s.exp().sum(-1), e_len[:, 0], rtol=1e-5, atol=1e-6)


def test_path_acceptance_torch_is_differentiable():
    g = torch.Generator().manual_seed(1)
    tree = _random_tree(9, g)
    logits = torch.randn(2, 9, 7, generator=g, requires_grad=True)
    p = torch.rand(2, 9, 7, generator=g).softmax(-1)
    x = torch.randint(0, 7, (2, 9), generator=g)
    kappa, e_len = path_acceptance_torch(p, logits.softmax(-1), tree.parents, x)
    e_len.sum().backward()
    assert torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0


def test_vsd_loss_gradients_reach_the_drafter():
    torch.manual_seed(0)
    cfg = ARConfig(vocab=24, dim=32, layers=2, heads=2, kv_heads=1, head_dim=16, ffn=64,
                   max_seq=40, grid=4)  # fmt: skip
    target = Transformer(cfg).eval().requires_grad_(False)
    drafter = Drafter(cfg).bind(target)
    seq = torch.cat([torch.full((2, 1), cfg.vocab), torch.randint(0, cfg.vocab, (2, 16))], 1)
    gen = torch.Generator().manual_seed(0)
    logq, logp = rollout(drafter, target, seq, torch.tensor([0, 3, 7]), 4, 4, gen)
    assert logq.shape == logp.shape == (2, 3, 9, 4)
    assert (logq <= 0).all() and (logp <= 0).all()
    loss, stats = vsd_loss(logq, logp, 4)
    loss.backward()
    grads = [p.grad for p in drafter.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(gr).all() for gr in grads)
    assert sum(gr.abs().sum() for gr in grads) > 0
    assert 0 < stats["exp_len"] <= 4


def test_train_objective_vsd_smoke(tmp_path):
    from specops.models import train

    for name in ("vq.pt", "ar.pt", "drafter.pt"):
        shutil.copy(WEIGHTS / name, tmp_path / name)
    train.main(
        [
            "--out", str(tmp_path), "--only-drafter", "--objective", "vsd", "--per-class", "2",
            "--vsd-steps", "2", "--drafter-batch", "1", "--vsd-samples", "2",
            "--vsd-prefixes", "2", "--threads", "1",
        ]
    )  # fmt: skip
    m = load_default(weights_dir=tmp_path, drafter="vsd")
    assert m.train["drafter"]["objective"] == "vsd" and m.drafter is not None
    ce = torch.load(tmp_path / "drafter.pt", weights_only=True)
    assert ce["state"]["fc.weight"].dtype == torch.float16


def test_shipped_vsd_drafter_loads():
    """(Greedy exactness with it: test_decode.py::test_greedy_speculative_equals_greedy_ar[vsd].)"""
    m = load_default(drafter="vsd")
    assert m.train["drafter"]["objective"] == "vsd"
    assert m.drafter is m.drafter_named("vsd") and m.drafter.target is m.target
    ce = m.drafter_named("ce")
    assert not torch.equal(ce.fc.weight, m.drafter.fc.weight)
    with pytest.raises(ValueError, match="drafter"):
        load_default(drafter="kl")


def test_drafters_bench_smoke(capsys):
    from specops.bench import drafters_e2e

    rows = drafters_e2e.main(
        ["--classes", "0", "--seeds", "0", "--temperatures", "0", "--trees", "chain K=4"]
    )
    assert [r["drafter"] for r in rows] == ["ce", "vsd"] and rows[0]["tau"] > 1
    assert "tau" in capsys.readouterr().out

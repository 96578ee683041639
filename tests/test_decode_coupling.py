"""Coupled Jacobi drafts (MC-SJD, issue 48): ``sjd(coupling=...)`` and ``sjd_pac(coupling=...)``.

* Exact law end to end: the coupled methods reproduce the Markov chain's joint distribution
  (tests/markov_chain_lm.py, the test every lossless method passes), and deliberately wrong
  couplings fail it: keeping the old token always, or Gumbel noise keyed by the window slot
  instead of the absolute position (the noise that decided a committed token is reused).
* Adaptive continuation is the maximal coupling: by quadrature over the two uniforms (midpoint
  grids, exact up to 1/(2N) a threshold), ``verify_jacobi``'s kept-or-resampled token has law
  q_new and is the old token with probability sum_x min(q_old(x), q_new(x)).
* Gumbel-max with position-keyed noise: each draw has law q, two draws of one position agree
  with the probability the coupling's formula gives, and the noise depends on the position only.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from helpers import chi2_pvalue
from markov_chain_lm import CLASSES, CLASSES_PAC, LENGTH, MarkovLM, _check

import specops
from specops import Tree
from specops.decode import sjd, sjd_pac
from specops.decode._coupling import gumbel_draw, gumbel_uniforms

SJD = sys.modules["specops.decode.sjd"]  # the modules (the package exports the functions)
COUPLING = sys.modules["specops.decode._coupling"]  # SJD-PAC draws through its ``draw``


@pytest.fixture(scope="module")
def markov():
    return MarkovLM()


# end-to-end exact law -------------------------------------------------------------------------
@pytest.mark.parametrize("init", ["target", "uniform"])
@pytest.mark.parametrize("coupling", ["maximal", "gumbel"])
def test_sjd_coupled_lossless(markov, coupling, init):
    tokens, stats = sjd(markov, CLASSES, window=4, init=init, coupling=coupling, length=LENGTH,
                        seed=13)  # fmt: skip
    _check(markov, tokens)
    assert stats.step_compression > 1.0


@pytest.mark.parametrize("window", [3, 6])
@pytest.mark.parametrize("proactive", [True, False], ids=["pac", "ac-only"])
def test_sjd_pac_gumbel_lossless(markov, window, proactive):
    """Window 3 with K = 2, D = 2: the PD tree fills the window, so every chain window after it
    is drawn fresh (Gumbel) from the deepest row; window 6 takes the branch continuation too."""
    kw = dict(branch=2, depth=2, proactive=proactive, length=LENGTH, seed=14)
    tokens, stats = sjd_pac(markov, CLASSES_PAC, window=window, coupling="gumbel", **kw)
    _check(markov, tokens)
    assert stats.step_compression > 1.0


def test_keep_old_coupling_is_detected(markov, monkeypatch):
    """Negative control: "maximal" coupling that always keeps the old token of the slots after
    the rejection (drawn from the stale q_i, passed on as draws of p_i) must fail."""
    real = specops.verify_jacobi

    def keep_old(target_probs, window_tokens, draft_probs, **kw):
        r = real(target_probs, window_tokens, draft_probs, **kw)
        after = torch.arange(window_tokens.shape[1])[None, :] > r.num_accepted[:, None]
        return r._replace(next_window=torch.where(after, window_tokens, r.next_window).int())

    monkeypatch.setattr(specops, "verify_jacobi", keep_old)
    tokens, _ = sjd(markov, CLASSES, window=4, coupling="maximal", length=LENGTH, seed=13)
    _check(markov, tokens, expect_pass=False)


def _slot_keyed(q, positions, seed):
    """Gumbel noise keyed by the window slot (position - first position) instead of the
    position: slot i's noise, which drew a token that was then committed, draws the next
    window's slot i again."""
    return gumbel_draw(q, positions - positions[:, :1], seed)


@pytest.mark.parametrize("method", ["sjd", "sjd_pac"])
def test_slot_keyed_gumbel_is_detected(markov, monkeypatch, method):
    if method == "sjd":
        monkeypatch.setattr(SJD, "gumbel_draw", _slot_keyed)
        tokens, _ = sjd(markov, CLASSES, window=4, coupling="gumbel", length=LENGTH, seed=13)
    else:
        monkeypatch.setattr(COUPLING, "gumbel_draw", _slot_keyed)
        tokens, _ = sjd_pac(markov, CLASSES_PAC, window=3, branch=2, depth=2, coupling="gumbel",
                            length=LENGTH, seed=14)  # fmt: skip
    _check(markov, tokens, expect_pass=False)


def test_coupling_errors(markov):
    with pytest.raises(ValueError, match="sjd: coupling must be one of"):
        sjd(markov, CLASSES[:2], window=4, coupling="gumble", length=LENGTH)
    with pytest.raises(ValueError, match="sjd: coupling='gumbel' needs sampling"):
        sjd(markov, CLASSES[:2], window=4, coupling="gumbel", temperature=0, length=LENGTH)
    with pytest.raises(ValueError, match="sjd_pac: coupling='maximal' is what adaptive"):
        sjd_pac(markov, CLASSES[:2], window=6, branch=2, depth=2, coupling="maximal")
    with pytest.raises(ValueError, match="sjd_pac: coupling='gumbel' needs sampling"):
        sjd_pac(markov, CLASSES[:2], window=6, branch=2, depth=2, coupling="gumbel",
                temperature=0)  # fmt: skip
    with pytest.raises(ValueError, match="sjd_pac: coupling must be one of"):
        sjd_pac(markov, CLASSES[:2], window=6, branch=2, depth=2, coupling=None)
    # greedy without coupling is fine
    sjd(markov, CLASSES[:2], window=4, coupling="none", temperature=0, length=LENGTH)


# adaptive continuation = the maximal coupling, by quadrature over the uniforms ------------------
V, N = 5, 256
GRID = (torch.arange(N, dtype=torch.float64) + 0.5) / N  # midpoints: exact up to 1/(2N)


def _dists():
    g = np.random.default_rng(7)
    q_old, q_new = (torch.tensor(g.dirichlet([0.7] * V)).float() for _ in range(2))
    q_old[3] = 0.0  # a token the old row cannot draw ...
    q_new[1] = 0.0  # ... and one the new row cannot
    return q_old / q_old.sum(), q_new / q_new.sum()


def _chain_continuation(backend, continue_after_reject=True):
    """Slot 1 of a 2-slot chain window after slot 0 was rejected (its token has no target mass):
    -> run(x [R], u_test [R], u_res [R]) -> slot 1's next token [R]."""

    def run(q_old, q_new, x, u_test, u_res):
        r = x.shape[0]
        p = torch.stack([torch.eye(V)[0], q_new])[None].expand(r, 2, V).contiguous()
        q = torch.stack([torch.eye(V)[1], q_old])[None].expand(r, 2, V).contiguous()
        w = torch.stack([torch.ones_like(x), x], 1).int()  # slot 0 = token 1: p = 0 there
        u = torch.stack([torch.full_like(u_test, 0.5), u_test, u_res, u_res], 1).float()
        res = specops.verify_jacobi(p, w, q, continue_after_reject=continue_after_reject,
                                    uniforms=u, backend=backend)  # fmt: skip
        assert bool((res.num_accepted == 0).all())
        return res.next_window[:, 1].long()

    return run


def _tree_continuation(backend):
    """SJD-PAC's tree mode: ``Tree.chain(3)``, node 1 rejected (no target mass), node 2's token
    continued against target row 1 / draft row 1 (test draw 1, resample draw L + 1 = 4)."""
    tree = Tree.chain(3)

    def run(q_old, q_new, x, u_test, u_res):
        r = x.shape[0]
        p = torch.stack([torch.eye(V)[0], q_new, q_new])[None].expand(r, 3, V).contiguous()
        q = torch.stack([torch.eye(V)[1], q_old, q_old])[None].expand(r, 3, V).contiguous()
        w = torch.stack([torch.zeros_like(x), torch.ones_like(x), x], 1).int()
        u = torch.full((r, 6), 0.5)
        u[:, 0], u[:, 1], u[:, 4] = 0.5, u_test.float(), u_res.float()
        res = specops.verify_jacobi(p, w, q, tree=tree, continue_after_reject=True, uniforms=u,
                                    backend=backend)  # fmt: skip
        assert bool((res.num_accepted == 0).all()) and bool((res.first_reject == 0).all())
        return res.next_window[:, 1].long()  # the token at depth 2

    return run


def coupled_law(run, q_old, q_new):
    """The law of the next token and P(next = old token), the old token x ~ q_old, the two
    uniforms (test, resample) integrated over the product of midpoint grids.  -> (law [V],
    keep)."""
    ut, ur = (g.reshape(-1) for g in torch.meshgrid(GRID, GRID, indexing="ij"))
    law, keep = torch.zeros(V, dtype=torch.float64), 0.0
    for x in range(V):
        if q_old[x] == 0:
            continue
        out = run(q_old, q_new, torch.full_like(ut, x, dtype=torch.long), ut, ur)
        law += q_old[x] * torch.bincount(out, minlength=V).double() / out.numel()
        keep += float(q_old[x] * (out == x).double().mean())
    return law, keep


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("mode", ["chain", "tree"])
def test_continuation_is_the_maximal_coupling(mode, backend):
    q_old, q_new = _dists()
    run = _chain_continuation(backend) if mode == "chain" else _tree_continuation(backend)
    law, keep = coupled_law(run, q_old, q_new)
    assert torch.allclose(law, q_new.double(), atol=5e-3), (law, q_new)
    maximal = float(torch.minimum(q_old, q_new).sum())  # = 1 - TV(q_old, q_new)
    assert keep == pytest.approx(maximal, abs=5e-3)


def test_maximal_coupling_checks_can_fail():
    """The same checks reject a fresh redraw (right law, keeps only sum_x q_old(x) q_new(x)) and
    a rule that always keeps the old token (keeps all, law q_old)."""
    q_old, q_new = _dists()
    law, keep = coupled_law(_chain_continuation("reference", False), q_old, q_new)
    assert torch.allclose(law, q_new.double(), atol=5e-3)
    assert abs(keep - float(torch.minimum(q_old, q_new).sum())) > 0.05
    assert keep == pytest.approx(float((q_old * q_new).sum()), abs=5e-3)
    law, keep = coupled_law(lambda qo, qn, x, ut, ur: x, q_old, q_new)
    assert not torch.allclose(law, q_new.double(), atol=0.05) and keep == pytest.approx(1.0)


# Gumbel-max with position-keyed noise --------------------------------------------------------
def _gumbel_keep(q_old, q_new) -> float:
    """P(both Gumbel-max draws agree) = sum_x 1 / sum_v max(q_old(v)/q_old(x), q_new(v)/q_new(x))
    over the x both can draw (specops/decode/_coupling.py)."""
    total = 0.0
    for x in range(V):
        if q_old[x] > 0 and q_new[x] > 0:
            w = torch.maximum(q_old / q_old[x], q_new / q_new[x])
            total += 1.0 / float(w.sum())
    return total


def test_gumbel_draw_law_and_agreement():
    """Over 40000 positions (fixed seed): each draw is a sample of its row (chi-square), the two
    rows' draws at one position agree as often as the formula says (within 4 sigma), which lies
    between (1 - TV) / (1 + TV) and 1 - TV."""
    q_old, q_far = _dists()
    q_new = 0.6 * q_old + 0.4 * q_far  # overlapping rows, as a slot's successive drafts are
    n = 40000
    pos = torch.arange(n).reshape(4, n // 4) + 1000
    key = torch.tensor(5)
    a = gumbel_draw(q_old.expand(4, n // 4, V), pos, key).reshape(-1)
    b = gumbel_draw(q_new.expand(4, n // 4, V), pos, key).reshape(-1)
    assert chi2_pvalue(torch.bincount(a.long(), minlength=V), q_old.numpy()) > 1e-3
    assert chi2_pvalue(torch.bincount(b.long(), minlength=V), q_new.numpy()) > 1e-3
    agree, want = float((a == b).double().mean()), _gumbel_keep(q_old, q_new)
    assert abs(agree - want) < 4 * (want * (1 - want) / n) ** 0.5, (agree, want)
    tv = 1 - float(torch.minimum(q_old, q_new).sum())
    assert (1 - tv) / (1 + tv) <= want <= 1 - tv
    # independent noise (another seed) agrees only sum_x q_old(x) q_new(x) of the time
    c = gumbel_draw(q_new.expand(4, n // 4, V), pos, torch.tensor(6)).reshape(-1)
    indep = float((q_old * q_new).sum())
    assert abs(float((a == c).double().mean()) - indep) < 4 * (indep * (1 - indep) / n) ** 0.5
    assert indep < want - 0.1


def test_gumbel_noise_is_keyed_by_request_and_position():
    """The noise of (seed, request, position) is the same wherever the position sits in the
    window, and differs between requests, positions and seeds."""
    key = torch.tensor(3)
    pos = torch.arange(8)[None, :].expand(2, 8) + torch.tensor([[10], [10]])
    u = gumbel_uniforms(key, pos, 7)
    shifted = gumbel_uniforms(key, pos + 3, 7)
    assert torch.equal(u[:, 3:], shifted[:, :5])
    assert not torch.equal(u[0], u[1])  # requests
    assert not torch.equal(u[:, 0], u[:, 1])  # positions
    assert not torch.equal(u, gumbel_uniforms(torch.tensor(4), pos, 7))  # seeds
    assert float(u.min()) > 0 and float(u.max()) < 1


# the entry points that pass coupling on ----------------------------------------------------
@pytest.fixture(scope="module")
def lg_dir(tmp_path_factory):
    from specops.imagegen.tiny import llamagen_dir

    return llamagen_dir(tmp_path_factory.mktemp("llamagen"))


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--coupling", "gumble"], "--coupling: invalid choice: 'gumble'"),
        (["--method", "ar", "--coupling", "gumbel"], "takes the options"),
        (["--coupling", "gumbel", "--temperature", "0"], "--coupling gumbel needs sampling"),
        (["--method", "sjd_pac", "--coupling", "maximal"], "already is the maximal coupling"),
    ],
)
def test_cli_coupling_errors(argv, words, lg_dir, tmp_path, capsys):
    from specops import cli

    base = ["generate", "--model", str(lg_dir), "--class-id", "1", "--method", "sjd"]
    assert cli.main([*base, *argv, "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 + ("usage" in err), err
    assert not (tmp_path / "x.png").exists()


def test_cli_generates_with_coupling(lg_dir, tmp_path, capsys):
    from specops import cli

    out = tmp_path / "fox.png"
    argv = ["generate", "--model", str(lg_dir), "--class-id", "3", "--method", "sjd",
            "--coupling", "gumbel", "--opt", "window=8", "--out", str(out)]  # fmt: skip
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert out.exists()


def test_hf_generate_takes_coupling():
    transformers = pytest.importorskip("transformers")
    import specops.hf

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    m = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    seqs, stats = specops.hf.generate(m, ids, method="sjd", max_new_tokens=12, window=4,
                                      coupling="gumbel", seed=1)  # fmt: skip
    assert seqs.shape == (2, 15) and stats.step_compression >= 1
    with pytest.raises(ValueError, match="coupling='maximal' needs sampling"):
        specops.hf.generate(m, ids, method="sjd", max_new_tokens=4, do_sample=False,
                            coupling="maximal")  # fmt: skip


@pytest.mark.parametrize(
    "method,coupling", [("sjd", "maximal"), ("sjd", "gumbel"), ("sjd_pac", "gumbel")]
)
def test_coupled_step_compiles_once_and_matches_eager(method, coupling):
    """As tests/test_decode_compile.py: the coupled step is one graph (no host sync: the Gumbel
    noise's key and positions are device tensors), compiled once, the eager run's tokens."""
    import torch._dynamo as dynamo

    from specops.models.loading import load_default

    m, classes = load_default(), torch.arange(2)
    fn, kw = (sjd, dict(window=8)) if method == "sjd" else (sjd_pac, dict(window=8, branch=2,
                                                                            depth=2))  # fmt: skip
    with specops.validation(False):
        ref, ref_stats = fn(m.target, classes, length=64, coupling=coupling, seed=3, **kw)
        dynamo.reset()
        dynamo.utils.counters.clear()
        with dynamo.config.patch(error_on_recompile=True):
            got, stats = fn(m.target, classes, length=64, coupling=coupling, seed=3,
                            compile_step="aot_eager", **kw)  # fmt: skip
    assert dynamo.utils.counters["stats"]["unique_graphs"] == 1
    assert stats.target_passes >= 14
    assert torch.equal(got, ref) and stats.accept_hist == ref_stats.accept_hist

"""specops.reference.probs_from_logits against its contract and an independent per-row loop."""

import math

import pytest
import torch

from specops.reference import probs_from_logits as ref


def naive_row(c, u=None, *, t=1.0, k=0, p=1.0, s=1.0):
    """One row, written out: float32 CFG and temperature, then Python sorting for the filters."""
    c = c.float()
    v = c.numel()
    if u is not None:
        u = u.float()
        masked = (c == -math.inf) | (u == -math.inf)
        lg = torch.where(masked, -math.inf, u + s * (c - u))  # same float32 ops, same order
    else:
        lg = c
    vals = lg.tolist()
    out = [0.0] * v
    if t < 1e-5 or max(vals) == -math.inf:
        best = max(range(v), key=lambda i: (vals[i], -i))  # arg-max, lowest index on ties
        out[best] = 1.0
        return torch.tensor(out)
    x = (lg / torch.tensor(t, dtype=torch.float32)).tolist()
    order = sorted(range(v), key=lambda i: -x[i])  # stable: ties in index order
    keep = [True] * v
    if 1 <= k < v:
        kth = x[order[k - 1]]
        keep = [xi >= kth for xi in x]
    m = max(x)
    w = torch.exp(torch.tensor(x, dtype=torch.float32) - m).tolist()  # float32 exp as backends
    w = [wi if kp else 0.0 for wi, kp in zip(w, keep)]
    if p < 1:
        z = math.fsum(w)
        acc = []
        tau = m
        for i in order:
            if not keep[i]:
                continue
            acc.append(w[i])
            if math.fsum(acc) >= p * z:
                tau = x[i]
                break
        keep = [kp and xi >= tau for kp, xi in zip(keep, x)]
        w = [wi if kp else 0.0 for wi, kp in zip(w, keep)]
    z = math.fsum(w)
    return torch.tensor([wi / z for wi in w], dtype=torch.float32)


def naive(logits, uncond=None, *, temperature=1.0, top_k=None, top_p=None, cfg_scale=1.0):
    v = logits.shape[-1]
    b = logits.shape[0] if logits.dim() > 1 else 1
    flat = logits.reshape(-1, v)
    uf = uncond.reshape(-1, v) if uncond is not None else None
    per = flat.shape[0] // b

    def at(val, r, default):
        if val is None:
            return default
        if isinstance(val, torch.Tensor):
            return val.reshape(-1)[r // per if val.numel() > 1 else 0].item()
        return val

    rows = [
        naive_row(
            flat[r],
            None if uf is None else uf[r],
            t=at(temperature, r, 1.0),
            k=int(at(top_k, r, 0)),
            p=at(top_p, r, 1.0),
            s=at(cfg_scale, r, 1.0),
        )
        for r in range(flat.shape[0])
    ]
    return torch.stack(rows).reshape(logits.shape)


def assert_same(got, want):
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert torch.equal(got > 0, want > 0), "kept sets differ"
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("v", [7, 111, 32000])
def test_matches_naive_loop(v):
    gen = torch.Generator().manual_seed(v)
    b, n = 3, 2
    logits = torch.randn(b, n, v, generator=gen) * 3
    uncond = torch.randn(b, n, v, generator=gen) * 3
    t = torch.tensor([0.7, 0.0, 1.5])
    k = torch.tensor([min(5, v - 1), 0, v // 3], dtype=torch.int32)
    p = torch.tensor([0.9, 0.5, 1.0])
    s = torch.tensor([4.0, 1.0, 7.5])
    for kw in (
        dict(temperature=t, top_k=k, top_p=p, cfg_scale=s, uncond_logits=uncond),
        dict(temperature=1.0, top_k=None, top_p=0.8),
        dict(temperature=0.9, top_k=v // 2 + 1),
        dict(temperature=t),
    ):
        got = ref(logits, **kw)
        nkw = dict(kw)
        u = nkw.pop("uncond_logits", None)
        if nkw.get("cfg_scale") is None:
            nkw["cfg_scale"] = 1.0
        assert_same(got, naive(logits, u, **nkw))
        torch.testing.assert_close(got.sum(-1), torch.ones(b, n), rtol=0, atol=1e-5)


def test_fp16_bf16_inputs_are_upcast():
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(4, 111, generator=gen) * 4).half()
    u = (torch.randn(4, 111, generator=gen) * 4).half()
    got = ref(x, top_k=20, top_p=0.7, cfg_scale=3.0, uncond_logits=u, temperature=0.8)
    want = naive(x, u, top_k=20, top_p=0.7, cfg_scale=3.0, temperature=0.8)
    assert_same(got, want)
    xb = x.bfloat16()
    assert_same(ref(xb, top_k=9), naive(xb.float(), top_k=9))


def test_top_k_keeps_every_tie_of_the_kth_value():
    x = torch.tensor([[3.0, 1.0, 2.0, 2.0, 2.0, 0.0]])
    got = ref(x, top_k=2)
    assert (got > 0).tolist() == [[True, False, True, True, True, False]]
    e = torch.exp(torch.tensor([3.0, 2.0, 2.0, 2.0]) - 3)
    torch.testing.assert_close(got[0, [0, 2, 3, 4]], e / e.sum())
    assert (ref(x, top_k=1) > 0).sum() == 1
    assert (ref(x, top_k=5) > 0).sum() == 5
    assert torch.equal(ref(x, top_k=6), ref(x))  # k >= V: no filter
    assert torch.equal(ref(x, top_k=0), ref(x))  # k = 0: no filter


def test_top_p_is_the_smallest_prefix_reaching_p_with_ties():
    x = torch.log(torch.tensor([[0.4, 0.3, 0.2, 0.1]]))
    assert (ref(x, top_p=0.4) > 0).tolist() == [[True, False, False, False]]
    assert (ref(x, top_p=0.45) > 0).tolist() == [[True, True, False, False]]
    assert (ref(x, top_p=0.85) > 0).tolist() == [[True, True, True, False]]
    assert (ref(x, top_p=0.95) > 0).tolist() == [[True, True, True, True]]
    assert (ref(x, top_p=1e-9) > 0).sum() == 1  # at least one token
    ties = torch.log(torch.tensor([[0.25, 0.25, 0.25, 0.25]]))
    assert (ref(ties, top_p=0.3) > 0).all()  # the boundary value is tied: all kept
    # after top-k, the mass is measured among the survivors
    got = ref(x, top_k=2, top_p=0.6)  # survivors 0.4, 0.3 -> 4/7 < 0.6 <= 1
    assert (got > 0).tolist() == [[True, True, False, False]]
    got = ref(x, top_k=2, top_p=0.55)
    assert (got > 0).tolist() == [[True, False, False, False]]


def test_temperature_zero_and_tiny_is_argmax_lowest_index():
    x = torch.tensor([[1.0, 5.0, 5.0, 2.0], [0.0, 0.0, 0.0, 0.0]])
    for t in (0.0, 1e-6, torch.tensor([0.0, 0.0])):
        got = ref(x, temperature=t, top_k=3, top_p=0.5)
        assert got.tolist() == [[0, 1, 0, 0], [1, 0, 0, 0]]
    mixed = ref(x, temperature=torch.tensor([0.0, 2.0]))
    assert mixed[0].tolist() == [0, 1, 0, 0]
    torch.testing.assert_close(mixed[1], torch.full((4,), 0.25))


def test_cfg_combine_and_masks():
    c = torch.tensor([[1.0, 2.0, -math.inf, 0.5]])
    u = torch.tensor([[0.0, 3.0, 1.0, -math.inf]])
    got = ref(c, cfg_scale=2.0, uncond_logits=u)
    lg = torch.tensor([2.0, 1.0])  # u + 2 (c - u) on the unmasked tokens
    assert got[0, 2] == 0 and got[0, 3] == 0
    torch.testing.assert_close(got[0, :2], torch.softmax(lg, 0))
    masked_c = torch.where(u == -math.inf, -math.inf, c)
    torch.testing.assert_close(ref(c, cfg_scale=1.0, uncond_logits=u), ref(masked_c))


def test_all_masked_row_is_onehot_token_0():
    x = torch.full((2, 5), -math.inf)
    x[1, 3] = 0.0
    got = ref(x, top_k=2, top_p=0.5)
    assert got.tolist() == [[1, 0, 0, 0, 0], [0, 0, 0, 1, 0]]


def test_per_request_parameters_broadcast_over_positions():
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 40, generator=gen)
    k = torch.tensor([3, 10])
    got = ref(x, top_k=k)
    assert ((got > 0).sum(-1) == torch.tensor([[3], [10]])).all()
    for b in range(2):
        torch.testing.assert_close(got[b], ref(x[b], top_k=int(k[b])))


def test_one_dim_and_empty():
    x = torch.randn(9)
    assert ref(x, top_k=2).shape == (9,)
    assert ref(torch.zeros(0, 4)).shape == (0, 4)

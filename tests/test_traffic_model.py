"""The time model's fit (bench/traffic_model.py): it recovers known parameters from rows they
generated, sums a split call's launches, and reports each family's error held out."""

from __future__ import annotations

import pytest
from specops.bench import traffic_model as tm
from specops.bench.traffic_common import KernelTraffic


def _launch(bytes_, ctas, crit, barriers=0, spr=4.0):
    per = max(1, ctas)
    t = KernelTraffic("cuda", "k", (per, 1, 1), bytes_read=bytes_, bytes_written=0,
                      requests=int(bytes_ / 128), sectors=int(bytes_ / 128 * spr),
                      cta_bytes=[crit] + [bytes_ // per] * (per - 1),
                      cta_barriers=[barriers] * per)  # fmt: skip
    return t


ROWS = [
    _launch(10_000_000, 132, 80_000),  # bandwidth-bound
    _launch(200_000, 1, 200_000, barriers=40),  # one CTA walks the row
    _launch(2_000_000, 8, 250_000, barriers=5),
    _launch(50_000, 1, 50_000),
    [_launch(128_000, 15, 8_600, 3), _launch(16_500, 1, 16_500, 22)],  # a split call
]
TRUE = (3.0, 40.0, 0.5, 0.25)


def test_fit_recovers_the_parameters_that_made_the_rows():
    rows = [(f"fam{i % 3}", "s", tm.predict_call_us(t, TRUE), t) for i, t in enumerate(ROWS)]
    got = tm.fit(rows)
    for r in rows:  # the fitted parameters reproduce every row (the grid holds TRUE)
        assert tm.predict_call_us(r[3], got) == pytest.approx(r[2], rel=1e-6)
    assert tm.errors(rows, got) == pytest.approx((1.0, 1.0))


def test_a_split_call_is_the_sum_of_its_launches():
    a, b = ROWS[-1]
    assert tm.predict_call_us([a, b], TRUE) == pytest.approx(
        tm.predict_us(a, TRUE) + tm.predict_us(b, TRUE)
    )


def test_held_out_reports_every_family():
    rows = [(f"fam{i % 3}", "s", tm.predict_call_us(t, TRUE) * (1.3 if i == 1 else 1.0), t)
            for i, t in enumerate(ROWS)]  # fmt: skip
    out = tm.held_out(rows)
    assert set(out) == {"fam0", "fam1", "fam2"}
    assert all(w >= m >= 1.0 for m, w in out.values())
    assert out["fam1"][1] > 1.05  # the family with a 30% slower row shows it when held out

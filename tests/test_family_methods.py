"""bench/family_methods.py (issue 48): every method runs through a family's pipeline and its row
reads as the table in docs/methods.md does."""

from __future__ import annotations

import pytest

pytest.importorskip("PIL")

from bench import family_methods  # noqa: E402


def test_llamagen_rows(tmp_path):
    rows = family_methods.run_family("llamagen", tmp_path, [0])
    names = [r.split("|")[2].strip() for r in rows]
    assert names[: len(family_methods.COUPLED)] == [n for n, _, _ in family_methods.COUPLED]
    assert any("GSD" in n for n in names) and any("LANTERN" in n for n in names)
    ar = rows[0].split("|")
    assert float(ar[3]) == 1.0 and float(ar[4]) == 64.0  # AR: one token a pass, 8 x 8 codes
    assert all(float(r.split("|")[3]) >= 1.0 for r in rows)

"""docs/api is generated from the docstrings (scripts/gen_api_docs.py): a changed signature or
docstring fails here until the pages are regenerated."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_api_reference_is_current():
    res = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "gen_api_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr

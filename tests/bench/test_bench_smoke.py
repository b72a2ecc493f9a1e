"""The benchmark scripts run end to end in their reduced form and speak the summary format.

Only the shape is checked, not the goals: on a shared CI machine the numbers mean little.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

KEYS = {"metric", "value", "floor", "ratio", "goal", "goal_met"}


@pytest.mark.parametrize("script", ["launch", "am_scale"])
def test_quick_run_prints_the_summary_and_writes_the_result_file(script, tmp_path):
    argv = [sys.executable, str(REPO / "bench" / f"{script}.py"), "--quick", "--json", "--out", str(tmp_path)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert KEYS <= summary.keys(), summary
    assert isinstance(summary["goal_met"], bool)
    assert isinstance(summary["value"], (int, float)) and isinstance(summary["floor"], (int, float))
    assert summary["quick"] is True
    stored = json.loads((tmp_path / f"{script}.json").read_text())
    assert KEYS <= stored.keys() and stored["name"] == script and stored["quick"] is True

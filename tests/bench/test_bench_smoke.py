"""The benchmark scripts run end to end in their reduced form and speak the summary format.

Only the shape is checked, not the goals: on a shared CI machine the numbers mean little.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.job

KEYS = {"metric", "value", "floor", "ratio", "goal", "goal_met"}


@pytest.mark.parametrize("script", ["launch", "am_scale", "history_server"])
def test_quick_run_prints_the_summary_and_writes_the_result_file(script, tmp_path):
    argv = [sys.executable, str(REPO / "bench" / f"{script}.py"), "--quick", "--json", "--out", str(tmp_path)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=tmp_path, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert KEYS <= summary.keys(), summary
    assert isinstance(summary["goal_met"], bool)
    assert isinstance(summary["value"], (int, float)) and isinstance(summary["floor"], (int, float)), (
        summary, r.stderr[-3000:])
    assert summary["quick"] is True
    stored = json.loads((tmp_path / f"{script}.json").read_text())
    assert KEYS <= stored.keys() and stored["name"] == script and stored["quick"] is True


def test_gang_packing_quick_on_the_embedded_cluster_reports_order_idle_memory_and_deadlocks(tmp_path):
    argv = [sys.executable, str(REPO / "bench" / "gang_packing.py"), "--quick", "--json", "--backend", "local",
            "--out", str(tmp_path)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert KEYS <= summary.keys() and summary["name"] == "gang_packing", summary
    stored = json.loads((tmp_path / "gang_packing.json").read_text())
    [row] = stored["rows"]
    assert row["succeeded"] == 4 and row["deadlock"] is False, row
    assert len(row["places_late"]) == 4 and sum(row["places_late"]) == 0   # places late and early balance out
    assert row["idle_gb_s_while_waiting"] >= 0 and 0 <= row["idle_share_while_waiting"] <= 1
    assert stored["ideal_s"] > 0 and stored["ratio_median"] == row["ratio"]
    # The ideal: a first round of two jobs started side by side, then one job alone, each timed
    # twice in the same run (a median of two is their mean); four jobs alone over two beside it.
    assert len(stored["round_s"]) == len(stored["alone_s"]) == len(stored["bare_round_s"]) == 2, stored
    first, alone = sum(stored["round_s"]) / 2, sum(stored["alone_s"]) / 2
    assert abs(stored["ideal_s"] - (first + alone)) <= 0.15 and abs(stored["ideal_alone_s"] - 2 * alone) <= 0.15
    assert row["ratio_alone"] > 0
    # Where the hand-offs went: two jobs waited for the room of the first two, each step read from
    # the jobs' records, in order, adding up to the whole.
    assert len(row["handoffs"]) == 2 and stored["handoffs"] == 2, row["handoffs"]
    for h in row["handoffs"]:
        steps = [h["noticing"], h["am"], h["forming"], h["starting"]]
        assert all(x >= 0 for x in steps) and h["ending"] >= 0, h
        assert abs(sum(steps) - h["total"]) < 0.05, h

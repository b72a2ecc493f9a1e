"""When the AM gives up on a running task (:mod:`tony_workflow.am.liveness`)."""
from __future__ import annotations

from tony_workflow.am.liveness import Liveness


def test_liveness_judges_stalls_only_after_a_first_report():
    rules = Liveness(1000, 25, 0, progress_timeout_ms=5000)
    assert rules.stalled("worker:0", None, 1e9) is None, "a task that never reported is never stalled"
    assert rules.stalled("worker:0", 100.0, 104.0) is None
    why = rules.stalled("worker:0", 100.0, 106.0)
    assert "worker:0" in why and "tony.task.progress-timeout-ms=5000" in why
    assert Liveness(1000, 25).stalled("worker:0", 100.0, 1e9) is None, "0 turns the rule off"

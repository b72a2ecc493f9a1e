"""The AM's view of the checkpoint store (:mod:`tony_workflow.am.store_watch`): failures and
recoveries as events and warnings, the job's failure when the spec says so, and resumes that lost
steps."""
from __future__ import annotations

from tony_workflow.am.store_watch import StoreWatch
from tony_workflow.events import EventLog, read_events


def test_a_failure_is_warned_once_until_a_write_succeeds(tmp_path):
    watch = StoreWatch(EventLog(tmp_path / "events.jsonl"))
    assert watch.report("chief:0", 0, None) == (False, None)          # nothing written yet
    assert watch.report("chief:0", 0, "HDFS unreachable") == (True, None)
    assert watch.report("chief:0", 0, "HDFS unreachable") == (False, None)  # the same failure again
    assert watch.warnings == ["chief:0: HDFS unreachable"]
    assert watch.report("chief:0", 1, None, ok=True) == (True, None)  # a later session's task recovers it
    assert watch.warnings == []
    assert [e["event"] for e in read_events(tmp_path / "events.jsonl")] == ["checkpoint_store_failed",
                                                                          "checkpoint_store_recovered"]


def test_in_fail_mode_a_failure_ends_the_job_naming_the_key(tmp_path):
    changed, why = StoreWatch(EventLog(tmp_path / "e.jsonl"), "fail").report("chief:0", 0, "quota exceeded")
    assert changed and why.startswith("chief:0 quota exceeded") and "on-store-failure=fail" in why


def test_a_resume_that_lost_steps_is_a_warning(tmp_path):
    watch = StoreWatch(EventLog(tmp_path / "e.jsonl"))
    assert not watch.restored("chief:0", 1, {"source": "store", "step": 20, "lost_steps": 0})
    assert watch.restored("chief:0", 2, {"source": "/tmp/c/checkpoint", "step": 20, "lost_steps": 5})
    assert watch.warnings == [("session 2 resumed from step 20 of /tmp/c/checkpoint; the newest checkpoint seen "
                               "was 5 step(s) newer but incomplete: 5 step(s) lost")]
    assert watch.restored("chief:0", 3, {"lost_steps": 40})
    assert "found no complete checkpoint and started over" in watch.warnings[-1]

"""The per-job event log (:mod:`tony_workflow.events`): one JSON object a line, read back whole even
when the writer died mid-line; and the stderr tails diagnostics quote."""
from __future__ import annotations

from tony_workflow.events import EventLog, log_tail, read_events


def test_events_are_written_with_a_time_and_read_back_in_order(tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    first = log.emit("session_started", session=0)
    log.emit("task_state", task="worker:0", state="RUNNING")
    log.close()
    events = list(read_events(tmp_path / "events.jsonl"))
    assert [e["event"] for e in events] == ["session_started", "task_state"]
    assert events[0] == first and isinstance(first["ts"], float)


def test_a_torn_last_line_and_a_missing_log_are_no_error(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"event": "a", "ts": 1}\n\n{"event": "b", "ts"')
    assert [e["event"] for e in read_events(path)] == ["a"]
    assert list(read_events(tmp_path / "none.jsonl")) == []


def test_a_log_tail_keeps_the_last_lines_without_the_noise(tmp_path):
    path = tmp_path / "stderr"
    path.write_text("".join(f"line {i}\n" for i in range(30)) + "noise: heartbeat\n\n")
    tail = log_tail(path, lines=3, skip="noise")
    assert tail == "Last lines of stderr:\nline 27\nline 28\nline 29"
    assert log_tail(None) == "" and log_tail(tmp_path / "missing") == ""


def test_an_echoed_log_writes_each_event_as_one_readable_line_too(tmp_path, caplog):
    import logging

    from tony_workflow.events import EventLog
    log = EventLog(tmp_path / "events.jsonl", echo=logging.getLogger("tony-am"))
    with caplog.at_level(logging.INFO, logger="tony-am"):
        log.emit("task_state", task="worker:0", state="RUNNING", pid=12)
        log.emit("cluster_spec_ready", cluster={"worker": ["h:1"]}, note="x" * 400)
    log.close()
    assert caplog.messages[0] == "task_state task=worker:0 state=RUNNING pid=12"
    assert caplog.messages[1].startswith('cluster_spec_ready cluster={"worker": ["h:1"]} note=xxx')
    assert caplog.messages[1].endswith("...") and len(caplog.messages[1]) < 360  # a long value is cut
    assert [e["event"] for e in read_events(tmp_path / "events.jsonl")] == ["task_state", "cluster_spec_ready"]

"""What the ``tony`` command prints of jobs that ran (:mod:`tony_workflow.client.records`); the
commands themselves, run for real, are test_cli.py's and test_history.py's."""
from __future__ import annotations

import time

import pytest

from tony_workflow.client.records import TABLE_HEADER, _since, show_record, table_row
from tony_workflow.errors import UsageError


def test_a_row_lines_up_under_the_header_and_a_running_job_took_as_long_as_it_has_run():
    row = table_row("application_1_0001", "RUNNING", time.time() - 65, None, "mnist", {"source": "airflow",
                                                                                       "dag_id": "d", "task_id": "t"})
    assert row.index("RUNNING") == TABLE_HEADER.index("STATE") and row.split()[4].rstrip("s") in ("65", "66")
    assert row.endswith(")") and "mnist" in row


def test_since_takes_a_duration_or_a_moment_and_names_what_it_got_otherwise():
    assert abs(_since("2h") - (time.time() - 7200)) < 5
    assert _since("2026-11-20T10:00+00:00") == 1795168800.0
    with pytest.raises(UsageError, match="'yesterday' is neither a duration"):
        _since("yesterday")


def test_a_record_shows_each_training_curve_in_one_line(capsys):
    record = {"application_id": "application_1_0001", "state": "SUCCEEDED", "name": "m", "user": "u",
              "backend": "local", "started_at": 1.0, "finished_at": 2.0, "sessions": [{}], "tasks": [],
              "series": {"t": [1.0, 2.0, 3.0], "metrics": {"loss": [2.3, None, 0.25], "never": [None, None, None]}}}
    show_record(record)
    out = capsys.readouterr().out
    assert "  loss: 2.3 first, 0.25 to 2.3, 0.25 last (2 points)\n" in out and "never" not in out


def test_an_elastic_group_is_shown_with_its_size_changes_and_causes(capsys):
    from tony_workflow.client.records import show_group

    show_group({"size": 2, "target": 3, "min": 2, "changes": 1, "max_changes": 10, "waiting": ["worker:1"],
                 "history": [{"at": 110.0, "size": 3, "event": "group formed", "joined": ["worker:0", "worker:1"]},
                             {"at": 130.0, "size": 2, "event": "group shrank", "left": ["worker:1"],
                              "causes": {"worker:1": "its container was preempted by the scheduler"}}]})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("elastic group: 2 of 3 nodes (at least 2), membership changes 1 of 10; "
                        "waiting to join: worker:1")
    assert lines[1].endswith("size 3  group formed; joined: worker:0, worker:1")
    assert lines[2].endswith("size 2  group shrank; left: worker:1; worker:1: its container was preempted by the scheduler")

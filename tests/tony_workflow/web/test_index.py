"""The history server's index (:mod:`tony_workflow.web.index`) over real job histories written as
the AM writes them: filters, pages, records that arrive or are purged after the first look, the
latest of two records of one job, and a submitter's history with its proxied users'."""
from __future__ import annotations

import time

import pytest

from tony_workflow.history import JobHistory, SubmitterHistory, build_record
from tony_workflow.storage import LocalStorage
from tony_workflow.web.index import Filters, HistoryIndex

T0 = 1_790_000_000.0  # 2026-09-21


def record(n: int, *, user: str = "alice", state: str = "SUCCEEDED", started: float | None = None,
           context: dict | None = None, name: str | None = None, acls: str = "", submitter: str | None = None) -> dict:
    """The record of job ``n`` as the AM builds it: one worker task, an hour long, that asked for 2 GiB
    and used 200 MiB."""
    started = T0 + n * 60 if started is None else started
    status = {"application_id": f"application_1_{n:04d}", "name": name or f"job-{n}", "state": state,
              "started_at": started, "finished_at": started + 3600, "backend": "local", "context": context,
              "tasks": [{"type": "worker", "index": 0, "state": state, "exit_code": 0, "metrics": {"max_rss_mb": 200.0}}]}
    r = build_record(status, [], user=user, conf={"tony.application.view-acls": acls} if acls else {},
                     requested={"worker": {"memory_mb": 2048, "vcores": 1, "gpus": 0}})
    r["submitter"] = submitter or user
    return r


def airflow(dag: str, task: str = "train", run: str = "r1") -> dict:
    return {"source": "airflow", "dag_id": dag, "dag_run_id": run, "task_id": task, "map_index": "-1"}


def history_with(tmp_path, records: list[dict], name: str = "history") -> JobHistory:
    h = JobHistory(LocalStorage(tmp_path / name), retention_s=0)
    for r in records:
        h.write(r)
    return h


def ids(page) -> list[str]:
    return [s["application_id"] for s in page.rows]


def test_filters_and_pages_newest_first(tmp_path):
    records = [record(n, user="bob" if n % 3 == 0 else "alice", state="FAILED" if n % 5 == 0 else "SUCCEEDED",
                      context=airflow("nightly" if n % 2 else "hourly")) for n in range(1, 31)]
    index = HistoryIndex(history_with(tmp_path, records))
    everything = index.page(Filters(), 0, 10)
    assert everything.total == 30 and ids(everything) == [f"application_1_{n:04d}" for n in range(30, 20, -1)]
    assert everything.next_offset == 10 and everything.previous_offset is None
    last = index.page(Filters(), 20, 10)
    assert ids(last)[-1] == "application_1_0001" and last.next_offset is None and last.previous_offset == 10
    assert {s["user"] for s in index.page(Filters(user="bob"), 0, 50).rows} == {"bob"}
    assert index.page(Filters(user="bob"), 0, 50).total == 10
    failed = index.page(Filters(state="failed"), 0, 50)
    assert failed.total == 6 and {s["state"] for s in failed.rows} == {"FAILED"}
    nightly = index.page(Filters(context={"dag_id": "NIGHTLY"}), 0, 50)  # compared without case
    assert nightly.total == 15 and all(s["context"]["dag_id"] == "nightly" for s in nightly.rows)
    window = index.page(Filters(since=T0 + 10 * 60, until=T0 + 20 * 60), 0, 50)
    assert ids(window) == [f"application_1_{n:04d}" for n in range(19, 9, -1)]
    assert ids(index.page(Filters(name="job-2"), 0, 50))[:2] == ["application_1_0029", "application_1_0028"]
    both = index.page(Filters(user="alice", state="FAILED", context={"dag_id": "hourly"}), 0, 50)
    assert ids(both) == ["application_1_0020", "application_1_0010"]
    # What the viewer may not see is not counted either.
    mine = index.page(Filters(), 0, 5, visible=lambda s: s["user"] == "bob")
    assert mine.total == 10 and all(s["user"] == "bob" for s in mine.rows)


def test_records_written_or_purged_after_the_first_look_are_seen_once_it_is_stale(tmp_path):
    h = history_with(tmp_path, [record(1), record(2)])
    index = HistoryIndex(h, ttl=0.2)
    assert len(index) == 2
    h.write(record(3))
    assert index.page(Filters(), 0, 10).total == 2  # not stale yet: the listing is not read again
    time.sleep(0.3)
    assert ids(index.page(Filters(), 0, 10))[0] == "application_1_0003"
    h.retention_s = 1
    assert h.purge(now=T0 + 2 * 60 + 3600 + 2) == ["application_1_0001", "application_1_0002"]
    index.refresh(force=True)
    assert ids(index.page(Filters(), 0, 10)) == ["application_1_0003"] and index.record("application_1_0001") is None


def test_the_latest_record_of_a_job_is_its_own_with_its_configuration(tmp_path):
    first = record(7, state="FAILED")
    later = {**record(7, acls="carol"), "finished_at": first["finished_at"] + 60}
    index = HistoryIndex(history_with(tmp_path, [first, later]))
    assert index.page(Filters(), 0, 10).total == 1
    assert index.summary("application_1_0007")["state"] == "SUCCEEDED"
    assert index.summary("application_1_0007")["view_acls"] == (("carol",), ())
    whole = index.record("application_1_0007")
    assert whole["state"] == "SUCCEEDED" and whole["conf"] == {"tony.application.view-acls": "carol"}
    assert index.summary("application_1_9999") is None and index.record("application_1_9999") is None


def test_a_submitters_index_holds_its_own_jobs_and_those_it_ran_as_others_not_theirs(tmp_path):
    own = history_with(tmp_path, [record(1, user="svc")], "svc")
    theirs = history_with(tmp_path, [record(2, user="alice", submitter="svc"), record(3, user="alice")], "alice")
    index = HistoryIndex(SubmitterHistory(own, [("alice", theirs)], "svc"))
    assert ids(index.page(Filters(), 0, 10)) == ["application_1_0002", "application_1_0001"]
    assert index.record("application_1_0003") is None
    assert index.record("application_1_0002")["user"] == "alice"


def test_runs_of_the_same_workflow_task(tmp_path):
    records = [record(1, context=airflow("d", "train", "r1")), record(2, context=airflow("d", "train", "r2")),
               record(3, context=airflow("d", "eval", "r2")), record(4)]
    index = HistoryIndex(history_with(tmp_path, records))
    runs = index.list(context={"dag_id": "d", "task_id": "train"}, limit=5)
    assert [r["application_id"] for r in runs] == ["application_1_0002", "application_1_0001"]
    assert all("conf" in r and r["tasks"] for r in runs)  # whole records, as the advice reads them
    assert [r["application_id"] for r in index.list(limit=2)] == ["application_1_0004", "application_1_0003"]


@pytest.mark.parametrize("acls,expected", [("", ((), ())), ("*", (("*",), ())), ("bob ml", (("bob",), ("ml",)))])
def test_a_summary_holds_who_the_view_acls_let_see_the_job(tmp_path, acls, expected):
    index = HistoryIndex(history_with(tmp_path, [record(1, acls=acls)]))
    assert index.summary("application_1_0001")["view_acls"] == expected

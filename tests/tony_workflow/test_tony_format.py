"""TonY's own history files (:mod:`tony_workflow.tony_format`), written by a real job on the embedded
cluster and read back with TonY's own Avro schemas (``tony_avro/``: ``tony-core/src/main/avro/`` of
TonY, and of the 0.3.16 that Dr. Elephant reads with), never with this project's code; the file
name split as TonY's parser splits it, and ``tony-final.xml`` read as Hadoop's configuration."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import fastavro
import pytest

from tony_workflow.client import TonyClient, load_job
from tony_workflow.tony_format import METRICS, file_user, jhist_name

AVRO = Path(__file__).parent / "tony_avro"
#: TonY's schema files, in the order their named types need each other.
FILES = ("Metric", "EventType", "ApplicationInited", "ApplicationFinished", "TaskStarted", "TaskFinished", "Event")


def tony_schema(directory: Path) -> dict:
    named: dict = {}
    parsed = None
    for name in FILES:
        parsed = fastavro.parse_schema(json.loads((directory / f"{name}.avsc").read_text()), named_schemas=named)
    return parsed


def tony_parser_fields(name: str) -> list[str]:
    """The fields TonY's history parser takes from a finished file's name (cut at the first '.',
    split on '-'), after its checks: five, the user lower-case, the status upper-case."""
    fields = name[:name.index(".")].split("-")
    assert len(fields) == 5, fields
    assert fields[1].isdigit() and fields[2].isdigit() and fields[3] == fields[3].lower()
    assert fields[4] == fields[4].upper()
    return fields


@pytest.mark.parametrize(("user", "written"), [("alice", "alice"), ("First.Last-2", "first_last_2"),
                                               ("svc@EXAMPLE.COM", "svc_example_com"), ("", "unknown")])
def test_a_user_name_is_written_as_tonys_parser_reads_it(user, written):
    assert file_user(user) == written
    name = jhist_name({"application_id": "application_1_0001", "started_at": 1.5, "finished_at": 2.25,
                       "user": user, "state": "KILLED"})
    assert tony_parser_fields(name) == ["application_1_0001", "1500", "2250", written, "KILLED"]
    assert name.endswith(".jhist")


@pytest.mark.job
def test_a_job_leaves_tonys_jhist_and_final_xml_that_tonys_schemas_read_field_by_field(tony_home):
    spec = load_job({"name": "tony-files", "framework": "tensorflow", "command": "python -c 'import time; time.sleep(2)'",
                     "tasks": {"worker": {"instances": 2, "memory": "512m"}},
                     "conf": {"tony.am.memory": "512m", "tony.task.tensorboard.enabled": "false",
                              "tony.history.tony-format": "true", "tony.task.metrics-interval-ms": "300",
                              "tony.context.source": "airflow",
                              "tony.context.dag-id": "nightly", "tony.context.task-id": "train",
                              "tony.context.dag-run-id": "scheduled__2026-12-07T00:00:00+00:00",
                              "tony.context.try-number": "1"}})
    h = TonyClient("local").submit(spec)
    st = h.wait(timeout=300)
    assert st.state == "SUCCEEDED", st.diagnostics
    [folder] = [p for p in (tony_home / "history").rglob(h.app_id) if p.is_dir()]
    assert folder.parent.parent.parent.parent.name == "finished"  # finished/yyyy/MM/dd/<app>: TonY's layout
    [jhist] = folder.glob("*.jhist")
    fields = tony_parser_fields(jhist.name)
    assert fields[0] == h.app_id and fields[4] == "SUCCEEDED"
    started, completed = int(fields[1]), int(fields[2])
    assert started <= completed and abs(started / 1000 - st.started_at) < 1 and abs(completed / 1000 - st.finished_at) < 1
    for schema_dir in (AVRO, AVRO / "v0.3.16"):
        with jhist.open("rb") as f:
            reader = fastavro.reader(f, reader_schema=tony_schema(schema_dir))
            written = reader.writer_schema
            events = list(reader)
        # The union is TonY's, in its order, and so is the enum (what TonY's own reader resolves by).
        event_field = next(x for x in written["fields"] if x["name"] == "event")
        assert [b["name"] if isinstance(b, dict) else b for b in event_field["type"]] == [
            "com.linkedin.tony.events.ApplicationInited", "com.linkedin.tony.events.ApplicationFinished",
            "com.linkedin.tony.events.TaskStarted", "com.linkedin.tony.events.TaskFinished"]
        types = [e["type"] for e in events]
        assert types[0] == "APPLICATION_INITED" and types[-1] == "APPLICATION_FINISHED"
        assert sorted(types[1:-1]) == ["TASK_FINISHED"] * 2 + ["TASK_STARTED"] * 2
        assert all(started - 1000 <= e["timestamp"] <= completed + 1000 for e in events)
        inited = events[0]["event"]
        assert inited["applicationId"] == h.app_id and inited["numTasks"] == 2 and inited["host"] == "127.0.0.1"
        ts = [e["event"] for e in events if e["type"] == "TASK_STARTED"]
        assert sorted((t["taskType"], t["taskIndex"], t["host"]) for t in ts) == [("worker", 0, "127.0.0.1"),
                                                                                ("worker", 1, "127.0.0.1")]
        tf = [e["event"] for e in events if e["type"] == "TASK_FINISHED"]
        assert sorted((t["taskType"], t["taskIndex"], t["status"]) for t in tf) == [("worker", 0, "SUCCEEDED"),
                                                                                  ("worker", 1, "SUCCEEDED")]
        for t in tf:
            assert [m["name"] for m in t["metrics"]] == list(METRICS)  # TonY's names, in its order
            figures = {m["name"]: m["value"] for m in t["metrics"]}
            assert figures["MAX_MEMORY_BYTES"] >= figures["AVG_MEMORY_BYTES"] > 1e6  # a Python process's RSS
            assert figures["MAX_GPU_UTILIZATION"] == -1  # no GPU: TonY's "none"
        finished = events[-1]["event"]
        assert (finished["applicationId"], finished["finishedTasks"], finished["failedTasks"], finished["metrics"]) == (
            h.app_id, 2, 0, [])
        if schema_dir == AVRO:  # the fields 0.3.16 did not have yet
            assert inited["containerID"].startswith("container_") and all(t["containerID"] for t in ts)
            assert all(t["containerDiagnostic"] == "NA" for t in tf)
    conf = {p.findtext("name"): p.findtext("value") for p in ET.parse(folder / "tony-final.xml").getroot()}
    assert conf["tony.worker.instances"] == "2" and conf["tony.application.name"] == "tony-files"
    assert conf["airflow.ctx.dag.dag_id"] == "nightly" and conf["airflow.ctx.task.task_id"] == "train"
    assert conf["airflow.ctx.dag_run.execution_date"] == "scheduled__2026-12-07T00:00:00+00:00"
    assert conf["airflow.ctx.task_instance.execution_date"] and conf["airflow.ctx.try_number"] == "1"
    # This project's own record is still there, and still read beside them.
    record = TonyClient("local").history().get(h.app_id)
    assert record is not None and record["state"] == "SUCCEEDED" and record["user"]


def test_an_azkaban_runs_keys_are_the_ones_dr_elephants_azkaban_scheduler_reads():
    from tony_workflow.tony_format import final_xml
    text = final_xml({"tony.worker.instances": "2"}, {"source": "azkaban", "project": "ml", "flow_id": "daily",
                                                      "job_id": "train", "execution_id": "42", "attempt": "1",
                                                      "url": "https://azkaban.example.com:8443/executor?execid=42"},
                     "First.Last")
    conf = {p.findtext("name"): p.findtext("value") for p in ET.fromstring(text)}
    assert conf["azkaban.flow.execid"] == "42" and conf["azkaban.flow.flowid"] == "daily"
    assert conf["azkaban.flow.projectname"] == "ml" and conf["azkaban.job.id"] == "train"
    web = "https://azkaban.example.com:8443"
    assert conf["azkaban.link.execution.url"] == f"{web}/executor?execid=42"
    assert conf["azkaban.link.workflow.url"] == f"{web}/manager?project=ml&flow=daily"
    assert conf["azkaban.link.job.url"] == f"{web}/manager?project=ml&flow=daily&job=train"
    assert conf["azkaban.link.attempt.url"] == f"{web}/executor?execid=42&job=train&attempt=1"
    assert conf["tony.history.user"] == "First.Last" and conf["tony.worker.instances"] == "2"
    assert not any(k.startswith("airflow.") for k in conf)


def test_a_task_that_registered_before_its_launch_was_recorded_is_one_launch_started_and_finished():
    from tony_workflow.tony_format import events
    record = {"application_id": "application_1_0001", "started_at": 100.0, "finished_at": 110.0,
              "tasks": [{"task_id": "worker:0", "metrics": {}}, {"task_id": "worker:1", "metrics": {}}]}
    log = [{"event": "am_started", "ts": 100.0, "address": "am-host:1"},
           {"event": "task_state", "task": "worker:0", "state": "LAUNCHED", "container": "c0", "ts": 101.0},
           {"event": "task_state", "task": "worker:0", "state": "REGISTERED", "host": "h0", "ts": 102.0},
           # worker:1's executor registered before the AM saw its container granted
           {"event": "task_state", "task": "worker:1", "state": "REGISTERED", "host": "h1", "ts": 102.5},
           {"event": "task_state", "task": "worker:1", "state": "LAUNCHED", "container": "c1", "ts": 102.6},
           {"event": "task_state", "task": "worker:0", "state": "SUCCEEDED", "ts": 105.0},
           {"event": "task_state", "task": "worker:1", "state": "SUCCEEDED", "ts": 106.0}]
    out = events(record, log)
    assert [e["type"] for e in out] == ["APPLICATION_INITED", "TASK_STARTED", "TASK_STARTED", "TASK_FINISHED",
                                        "TASK_FINISHED", "APPLICATION_FINISHED"]
    started = [e["event"][1] for e in out if e["type"] == "TASK_STARTED"]
    assert [(s["taskIndex"], s["host"], s["containerID"]) for s in started] == [(0, "h0", "c0"), (1, "h1", "c1")]
    assert out[-1]["event"][1]["finishedTasks"] == 2


def test_a_task_whose_launch_is_recorded_only_after_it_ended_started_in_the_container_allocated_to_it():
    # On a loaded machine the AM may record a launch after the task has registered and ended.
    from tony_workflow.tony_format import events
    record = {"application_id": "application_1_0001", "started_at": 100.0, "finished_at": 110.0,
              "tasks": [{"task_id": "worker:0", "metrics": {}}]}
    log = [{"event": "am_started", "ts": 100.0, "address": "am-host:1"},
           {"event": "allocated", "ts": 100.5, "containers": {"am": {"id": "am#1"}, "worker:0": {"id": "worker:0#2"}}},
           {"event": "task_state", "task": "worker:0", "state": "REGISTERED", "host": "h0", "ts": 102.0},
           {"event": "task_state", "task": "worker:0", "state": "SUCCEEDED", "ts": 104.0},
           {"event": "task_state", "task": "worker:0", "state": "LAUNCHED", "container": "worker:0#2", "ts": 104.5}]
    out = events(record, log)
    assert [e["type"] for e in out] == ["APPLICATION_INITED", "TASK_STARTED", "TASK_FINISHED", "APPLICATION_FINISHED"]
    assert out[0]["event"][1]["containerID"] == "am#1"
    assert out[1]["event"][1]["containerID"] == "worker:0#2" and out[2]["event"][1]["status"] == "SUCCEEDED"


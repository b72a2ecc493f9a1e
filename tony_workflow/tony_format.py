"""TonY's own history files, beside this project's record: for the TonY Portal and Dr. Elephant.

With ``tony.history.tony-format=true`` a job's record folder (``finished/yyyy/MM/dd/<app>/``
under ``tony.history.location``, TonY's layout for jobs that ended) also gets what a TonY
ApplicationMaster leaves there:

- ``<app>-<started>-<completed>-<user>-<STATUS>.jhist``: an Avro object container file of TonY's
  ``com.linkedin.tony.events.Event`` records (``APPLICATION_INITED``, then ``TASK_STARTED`` and
  ``TASK_FINISHED`` for every task launch, then ``APPLICATION_FINISHED``), times in epoch
  milliseconds, the event union in TonY's order, each ``TASK_FINISHED`` carrying TonY's eight
  metrics (memory in bytes, GPU figures in percent, -1 where there is none). Its name is the one
  TonY's parser splits on ``-`` and cuts at the first ``.``: a user name is written lower-case with
  every character other than ``a-z``, ``0-9`` and ``_`` as ``_`` (``First.Last-2`` ->
  ``first_last_2``); the name as it was is in ``tony-final.xml`` (``tony.history.user``).
- ``tony-final.xml``: the job's configuration as Hadoop writes one, with the workflow run that
  submitted it as Dr. Elephant's schedulers read it: Airflow's ``airflow.ctx.dag.dag_id``,
  ``airflow.ctx.task.task_id``, ``airflow.ctx.dag_run.execution_date`` and
  ``airflow.ctx.task_instance.execution_date`` (an Airflow 3 run is named by its run id, given for
  both), with today's ``airflow.ctx.dag_id``, ``airflow.ctx.dag_run_id``, ``airflow.ctx.task_id``
  and ``airflow.ctx.try_number``; Azkaban's ``azkaban.flow.execid``, ``azkaban.flow.flowid``,
  ``azkaban.flow.projectname``, ``azkaban.job.id`` and the ``azkaban.link.*.url`` links.

The schema here is written from TonY's event format; tests read the files with TonY's own schema
files, not with this module.
"""
from __future__ import annotations

import io
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit
from xml.sax.saxutils import escape

__all__ = ["EVENT_SCHEMA", "METRICS", "file_user", "final_xml", "jhist", "jhist_name"]

_NS = "com.linkedin.tony.events"
_METRIC = {"type": "record", "name": "Metric", "namespace": _NS,
           "fields": [{"name": "name", "type": "string"}, {"name": "value", "type": "double"}]}
_OPTIONAL = {"type": ["null", "string"], "default": None}
#: TonY's Event record: its type, the event itself (a union, in TonY's order), when (ms).
EVENT_SCHEMA: dict[str, Any] = {
    "type": "record", "name": "Event", "namespace": _NS, "fields": [
        {"name": "type", "type": {"type": "enum", "name": "EventType", "namespace": _NS, "symbols": [
            "APPLICATION_INITED", "APPLICATION_FINISHED", "TASK_STARTED", "TASK_FINISHED"]}},
        {"name": "event", "type": [
            {"type": "record", "name": "ApplicationInited", "namespace": _NS, "fields": [
                {"name": "applicationId", "type": "string"}, {"name": "numTasks", "type": "int"},
                {"name": "host", "type": "string"}, {"name": "containerID", **_OPTIONAL}]},
            {"type": "record", "name": "ApplicationFinished", "namespace": _NS, "fields": [
                {"name": "applicationId", "type": "string"}, {"name": "finishedTasks", "type": "int"},
                {"name": "failedTasks", "type": "int"}, {"name": "metrics", "type": {"type": "array", "items": _METRIC}}]},
            {"type": "record", "name": "TaskStarted", "namespace": _NS, "fields": [
                {"name": "taskType", "type": "string"}, {"name": "taskIndex", "type": "int"},
                {"name": "host", "type": "string"}, {"name": "containerID", **_OPTIONAL}]},
            {"type": "record", "name": "TaskFinished", "namespace": _NS, "fields": [
                {"name": "taskType", "type": "string"}, {"name": "taskIndex", "type": "int"},
                {"name": "status", "type": "string"},
                {"name": "metrics", "type": {"type": "array", "items": f"{_NS}.Metric"}},
                {"name": "containerDiagnostic", **_OPTIONAL}]},
        ]},
        {"name": "timestamp", "type": "long"},
    ]}
#: TonY's task metrics, in its order.
METRICS = ("MAX_MEMORY_BYTES", "AVG_MEMORY_BYTES", "MAX_GPU_UTILIZATION", "AVG_GPU_UTILIZATION",
           "MAX_GPU_FB_MEMORY_USAGE", "AVG_GPU_FB_MEMORY_USAGE", "MAX_GPU_MAIN_MEMORY_USAGE",
           "AVG_GPU_MAIN_MEMORY_USAGE")
_ENDED = {"SUCCEEDED": "SUCCEEDED", "FAILED": "FAILED", "LOST": "FAILED"}  # TonY's task states; else FINISHED


def file_user(user: str) -> str:
    """``user`` as TonY's file-name parser takes it: lower-case, nothing but a-z, 0-9 and _."""
    return re.sub(r"[^a-z0-9_]", "_", (user or "").lower()) or "unknown"


def jhist_name(record: Mapping[str, Any]) -> str:
    """The ``.jhist`` file's name of a job that ended."""
    started, completed = _ms(record.get("started_at")), _ms(record.get("finished_at") or record.get("started_at"))
    return f"{record['application_id']}-{started}-{completed}-{file_user(str(record.get('user') or ''))}-" \
           f"{str(record.get('state') or 'FAILED').upper()}.jhist"


def _ms(t: Any) -> int:
    return round(float(t or 0) * 1000)


def _metrics(figures: Mapping[str, Any]) -> list[dict[str, Any]]:
    mib = 1024 * 1024
    have = {
        "MAX_MEMORY_BYTES": figures.get("max_rss_mb"), "AVG_MEMORY_BYTES": figures.get("avg_rss_mb"),
        "MAX_GPU_UTILIZATION": figures.get("max_gpu_util_percent", figures.get("gpu_util_percent")),
        "AVG_GPU_UTILIZATION": figures.get("avg_gpu_util_percent", figures.get("gpu_util_percent")),
        "MAX_GPU_FB_MEMORY_USAGE": figures.get("max_gpu_mem_percent", figures.get("gpu_mem_percent")),
        "AVG_GPU_FB_MEMORY_USAGE": figures.get("avg_gpu_mem_percent", figures.get("gpu_mem_percent")),
    }
    out = []
    for name in METRICS:
        value = have.get(name)
        value = -1.0 if value is None else float(value) * (mib if name.endswith("MEMORY_BYTES") else 1)
        out.append({"name": name, "value": value})
    return out


def events(record: Mapping[str, Any], log: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """TonY's events of the job: from its record and its event log (each task launch)."""
    app_id = str(record["application_id"])
    out: list[dict[str, Any]] = []
    am_host, am_container = "", None
    launches: dict[str, dict[str, Any]] = {}   # task id -> the launch under way
    allocated: dict[str, str | None] = {}      # task id -> the container last allocated to it
    finished = failed = 0
    figures = {t["task_id"]: t.get("metrics") or {} for t in record.get("tasks") or ()}

    def task_finished(task: str, launch: dict[str, Any], state: str, ts: float, why: str | None) -> None:
        nonlocal finished, failed
        kind, _, index = task.partition(":")
        status = _ENDED.get(state, "FINISHED")
        finished += 1
        failed += status == "FAILED"
        out.append({"type": "TASK_FINISHED", "timestamp": _ms(ts), "event": (f"{_NS}.TaskFinished", {
            "taskType": kind, "taskIndex": int(index or 0), "status": status,
            "metrics": _metrics(figures.get(task, {}) if launch.get("last") else {}),
            "containerDiagnostic": why if status == "FAILED" else "NA"})})

    entries = list(log)
    last_launch = {e.get("task"): i for i, e in enumerate(entries)
                   if e.get("event") == "task_state" and e.get("state") == "LAUNCHED"}
    for i, e in enumerate(entries):
        kind = e.get("event")
        if kind == "am_started":
            am_host = str(e.get("address", "")).rsplit(":", 1)[0]
            if not out:
                out.append({"type": "APPLICATION_INITED", "timestamp": _ms(e["ts"]), "event": (
                    f"{_NS}.ApplicationInited", {"applicationId": app_id, "numTasks": len(figures),
                                                  "host": am_host, "containerID": am_container})})
        elif kind == "allocated":
            granted = e.get("containers") or {}
            allocated.update({str(t): c.get("id") for t, c in granted.items() if isinstance(c, dict)})
            am_container = (granted.get("am") or {}).get("id")
            if out and out[0]["type"] == "APPLICATION_INITED":
                out[0]["event"][1]["containerID"] = am_container
        elif kind == "task_state" and e.get("task"):
            task, state = str(e["task"]), str(e.get("state"))
            if state == "LAUNCHED":
                early = launches.get(task)
                if early is not None and early.get("started") and not early.get("container"):
                    # The AM saw the grant after the executor had registered: the same launch.
                    early["container"] = early["event"]["containerID"] = e.get("container")
                    early["last"] = last_launch.get(task) == i
                else:
                    launches[task] = {"container": e.get("container"), "host": "", "last": last_launch.get(task) == i}
            elif state == "REGISTERED" and not launches.get(task, {}).get("started"):
                # A registration before its launch is recorded opens the launch (its container follows).
                launch = launches.setdefault(task, {"container": None, "host": "", "last": i > last_launch.get(task, -1)})
                # Its container, if its launch is not recorded yet (it may be only after the task
                # ended, on a loaded machine): the one allocated to it.
                launch.update(host=str(e.get("host") or ""), started=True,
                              container=launch.get("container") or allocated.get(task))
                kind_, _, index = task.partition(":")
                started = {"taskType": kind_, "taskIndex": int(index or 0), "host": launch["host"] or am_host,
                           "containerID": launch.get("container")}
                launch["event"] = started
                out.append({"type": "TASK_STARTED", "timestamp": _ms(e["ts"]), "event": (f"{_NS}.TaskStarted", started)})
            elif state in ("SUCCEEDED", "FAILED", "KILLED", "LOST") and task in launches:
                launch = launches.pop(task)
                if launch.get("started"):
                    task_finished(task, launch, state, e["ts"], e.get("diagnostics") or e.get("reason"))
    end = record.get("finished_at") or (entries[-1]["ts"] if entries else 0)
    for task, launch in launches.items():  # still running when the job ended: ended with it
        if launch.get("started"):
            task_finished(task, launch, "KILLED", end, None)
    if not out or out[0]["type"] != "APPLICATION_INITED":
        out.insert(0, {"type": "APPLICATION_INITED", "timestamp": _ms(record.get("started_at")), "event": (
            f"{_NS}.ApplicationInited", {"applicationId": app_id, "numTasks": len(figures), "host": am_host,
                                          "containerID": am_container})})
    out.append({"type": "APPLICATION_FINISHED", "timestamp": _ms(end), "event": (f"{_NS}.ApplicationFinished", {
        "applicationId": app_id, "finishedTasks": finished, "failedTasks": failed, "metrics": []})})
    return out


def jhist(record: Mapping[str, Any], log: Iterable[Mapping[str, Any]]) -> bytes:
    """The ``.jhist`` file's bytes."""
    import fastavro

    buffer = io.BytesIO()
    fastavro.writer(buffer, fastavro.parse_schema(EVENT_SCHEMA), events(record, log))
    return buffer.getvalue()


def _context_conf(context: Mapping[str, Any] | None) -> dict[str, str]:
    c = {k: str(v) for k, v in (context or {}).items() if v not in (None, "")}
    if c.get("source") == "airflow":
        run = c.get("dag_run_id", "")
        return {k: v for k, v in {
            "airflow.ctx.dag.dag_id": c.get("dag_id"), "airflow.ctx.task.task_id": c.get("task_id"),
            "airflow.ctx.dag_run.execution_date": run, "airflow.ctx.task_instance.execution_date": run,
            "airflow.ctx.dag_id": c.get("dag_id"), "airflow.ctx.dag_run_id": run,
            "airflow.ctx.task_id": c.get("task_id"), "airflow.ctx.try_number": c.get("try_number")}.items() if v}
    if c.get("source") == "azkaban":
        url = urlsplit(c.get("url", ""))
        web = f"{url.scheme}://{url.netloc}" if url.netloc else (f"http://{c['host']}" if c.get("host") else "")
        project, flow, job, execid = c.get("project"), c.get("flow_id"), c.get("job_id"), c.get("execution_id")
        out = {"azkaban.flow.execid": execid, "azkaban.flow.flowid": flow, "azkaban.flow.projectname": project,
               "azkaban.job.id": job, "azkaban.job.attempt": c.get("attempt"), "azkaban.webserverhost": c.get("host")}
        if web and project and flow and execid and job:
            out.update({
                "azkaban.link.workflow.url": f"{web}/manager?{urlencode({'project': project, 'flow': flow})}",
                "azkaban.link.job.url": f"{web}/manager?{urlencode({'project': project, 'flow': flow, 'job': job})}",
                "azkaban.link.execution.url": f"{web}/executor?{urlencode({'execid': execid})}",
                "azkaban.link.attempt.url": f"{web}/executor?"
                                            f"{urlencode({'execid': execid, 'job': job, 'attempt': c.get('attempt', '0')})}"})
        return {k: v for k, v in out.items() if v}
    return {}


def final_xml(conf: Mapping[str, Any], context: Mapping[str, Any] | None, user: str) -> str:
    """``tony-final.xml``: the job's configuration, its workflow run's keys and its user, as
    Hadoop's Configuration writes them."""
    props = {**{str(k): str(v) for k, v in conf.items()}, **_context_conf(context), "tony.history.user": user}
    lines = ['<?xml version="1.0" encoding="UTF-8" standalone="no"?>', "<configuration>"]
    for name in sorted(props):
        lines.append(f"<property><name>{escape(name)}</name><value>{escape(props[name])}</value>"
                     "<final>false</final><source>tony-workflow</source></property>")
    lines.append("</configuration>")
    return "\n".join(lines) + "\n"

"""Advice that sizes the next run, from what earlier runs used (in the spirit of Dr. Elephant's
heuristics for MapReduce and Spark, and TonY's own memory and GPU ones).

Each heuristic reads job history records (:mod:`tony_workflow.history`): one run, or every run of
the same workflow task, newest first, since the context keys tie the runs of a DAG task or an
Azkaban job together. It gives a severity, what it saw, and the exact keys to change with their
values, ready to paste as ``--conf`` lines. Only the newest run's request is judged; the use is
taken over every run given (the highest peak, the busiest CPU), so one quiet run does not shrink
a job that needs more on a busier day.

- **memory**: a container the cluster killed for its memory (exit -104), or a peak above nine
  tenths of the request, asks for more; a peak below half of it, for less (a quarter above the
  peak, rounded up to 128 MB).
- **vcores**: a task type whose processes kept under half of their vcores busy on average, over
  the run's figures, asks for fewer; one that kept them all busy, for more.
- **gpus**: GPUs whose utilisation stayed under 30 % on average: the input pipeline, not the
  accelerator, bounds the training; fewer GPUs per task would do as much.
- **gang wait**: a job that waited for its gang longer than it then ran: the queue or the size
  of the gang is the problem, not the training.
- **straggler**: a task that ran half again as long as its type's median, and 20 s longer at
  least: a slow node, or more data for it than for its peers.
- **checkpoints**: a relaunched session that resumed from a step far behind the one the session
  before it had reached (a tenth of the training, or a minute of it): checkpoints too rare.
- **hang after the chief**: TonY's known pattern: the chief succeeded and tasks of another type
  ran on (more than 10 s, and more than a quarter of the chief's own run) until they ended or the
  job was stopped; that type's end is not what the job waits for (tony.application.untracked.jobtypes).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .protocol import EXCEEDED_MEMORY_EXIT

__all__ = ["Advice", "advise", "as_conf_lines", "memory_value", "runs_of", "workflow_task"]

SEVERITIES = ("critical", "severe", "moderate", "low")
#: The context fields that name one workflow task across its runs: a DAG's task, an Azkaban job.
_TASK = {"airflow": ("source", "dag_id", "task_id"), "azkaban": ("source", "project", "flow_id", "job_id")}


def workflow_task(context: dict[str, str] | None) -> dict[str, str] | None:
    """The fields of ``context`` that every run of its workflow task shares; None for a job
    submitted by hand."""
    names = _TASK.get((context or {}).get("source", ""))
    if not names or not context or not all(context.get(n) for n in names):
        return None
    return {n: context[n] for n in names}


@dataclass(frozen=True)
class Advice:
    """One heuristic's finding: ``severity`` (Dr. Elephant's words: critical, severe, moderate,
    low), what it saw, and the keys to change with their values."""

    heuristic: str
    severity: str
    message: str
    changes: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"heuristic": self.heuristic, "severity": self.severity, "message": self.message,
                "changes": dict(self.changes)}


def memory_value(mb: float) -> str:
    """A memory key's value for ``mb``, rounded up to 128 MB: ``1536m``, ``3g``."""
    mb = max(128, math.ceil(mb / 128) * 128)
    return f"{mb // 1024}g" if mb % 1024 == 0 else f"{mb}m"


def runs_of(history: Any, record: dict[str, Any], limit: int = 10) -> list[dict[str, Any]]:
    """``record`` and, newest first, the other runs of its workflow task in ``history`` (a
    :class:`~tony_workflow.history.JobHistory`), ``limit`` in all; ``record`` alone for a job
    submitted by hand."""
    task = workflow_task(record.get("context"))
    if task is None:
        return [record]
    others = [r for r in history.list(context=task, limit=limit) if r["application_id"] != record["application_id"]]
    return [record, *others[:max(0, limit - 1)]]


def _gib(mb: float) -> str:
    return f"{mb / 1024:.1f} GiB" if mb >= 1024 else f"{mb:.0f} MiB"


def _of_type(record: dict[str, Any], task_type: str) -> list[dict[str, Any]]:
    return [t for t in record.get("tasks") or [] if t["task_id"].split(":")[0] == task_type]


def _series_mean(record: dict[str, Any], task_type: str, figure: str) -> float | None:
    """The mean of ``figure`` over the run's figures of every task of ``task_type``."""
    values = [v for task, figures in ((record.get("series") or {}).get("tasks") or {}).items()
              if task.split(":")[0] == task_type for v in figures.get(figure) or [] if v is not None]
    return sum(values) / len(values) if values else None


def _memory(runs: Sequence[dict[str, Any]], task_type: str, asked_mb: float) -> Advice | None:
    key = f"tony.{task_type}.memory"
    peaks = [t["metrics"]["max_rss_mb"] for r in runs for t in _of_type(r, task_type)
             if (t.get("metrics") or {}).get("max_rss_mb") is not None]
    killed = sum(1 for r in runs for t in _of_type(r, task_type) if t.get("exit_code") == EXCEEDED_MEMORY_EXIT)
    peak = max(peaks) if peaks else None
    seen = f" over {len(runs)} runs" if len(runs) > 1 else ""
    if killed:
        want = max(asked_mb * 1.5, (peak or 0) * 1.25)
        return Advice("memory", "critical", f"{task_type}: the cluster killed {killed} container(s) for using more "
                      f"than {_gib(asked_mb)}{seen}", {key: memory_value(want)})
    if peak is None:
        return None
    if peak > 0.9 * asked_mb:
        return Advice("memory", "severe", f"{task_type} used up to {_gib(peak)} of its {_gib(asked_mb)}{seen}: "
                      "close to the limit, where the cluster kills it", {key: memory_value(peak * 1.25)})
    if peak < asked_mb / 2 and asked_mb - peak >= 256:
        return Advice("memory", "moderate", f"{task_type} asked for {_gib(asked_mb)} and used at most {_gib(peak)}"
                      f"{seen}: the rest stays idle on the cluster", {key: memory_value(peak * 1.25)})
    return None


def _vcores(runs: Sequence[dict[str, Any]], task_type: str, vcores: int) -> Advice | None:
    means = [m for r in runs if (m := _series_mean(r, task_type, "cpu_percent")) is not None]
    if not means or vcores < 1:
        return None
    busiest = max(means)  # percent of one core, the run that needed most
    key = f"tony.{task_type}.vcores"
    if vcores >= 2 and busiest < 50 * vcores:
        want = max(1, math.ceil(busiest * 1.25 / 100))
        if want < vcores:
            return Advice("vcores", "moderate", f"{task_type} asked for {vcores} vcores and kept {busiest / 100:.1f} "
                          "of them busy on average", {key: str(want)})
    if busiest >= 90 * vcores:
        return Advice("vcores", "low", f"{task_type} kept all {vcores} of its vcores busy on average: it is "
                      "bound by its CPU", {key: str(vcores + max(1, vcores // 2))})
    return None


def _gpus(runs: Sequence[dict[str, Any]], task_type: str, gpus: int) -> Advice | None:
    means = [m for r in runs if (m := _series_mean(r, task_type, "gpu_util_percent")) is not None]
    if not gpus or not means or max(means) >= 30:
        return None
    return Advice("gpus", "severe" if max(means) < 10 else "moderate",
                  f"{task_type}'s {gpus} GPU(s) per task were {max(means):.0f} % busy on average: the input pipeline, "
                  "not the GPUs, bounds the training", {f"tony.{task_type}.gpus": str(max(1, gpus // 2))}
                  if gpus > 1 else {})


def _gang_wait(record: dict[str, Any]) -> Advice | None:
    waited = [float(item["what"].split("after waiting ")[1].split(" s")[0]) for item in record.get("timeline") or []
              if "containers granted after waiting" in item.get("what", "")]
    started, finished = record.get("started_at"), record.get("finished_at")
    if not waited or not started or not finished:
        return None
    ran = max(0.0, finished - started - sum(waited))
    if sum(waited) < 60 or sum(waited) <= ran:
        return None
    return Advice("gang wait", "moderate", f"the job waited {sum(waited):.0f} s for its gang and then ran {ran:.0f} s: "
                  "its queue had no room for the whole gang; a quieter queue (tony.yarn.queue) or a smaller gang "
                  "starts sooner", {})


def _ran(task: dict[str, Any]) -> float | None:
    started, finished = task.get("started_at"), task.get("finished_at")
    ok = started is not None and finished is not None and finished >= started
    return finished - started if ok else None


def _straggler(record: dict[str, Any]) -> Advice | None:
    worst: tuple[float, str, float] | None = None
    for task_type in record.get("requested") or {}:
        runs = sorted((d, t["task_id"]) for t in _of_type(record, task_type) if (d := _ran(t)) is not None)
        if len(runs) < 3:
            continue
        median = runs[len(runs) // 2][0]
        longest, task_id = runs[-1]
        if longest >= 1.5 * median and longest - median >= 20 and (worst is None or longest - median > worst[0] - worst[2]):
            worst = (longest, task_id, median)
    if worst is None:
        return None
    return Advice("straggler", "moderate", f"{worst[1]} ran {worst[0]:.0f} s, its peers {worst[2]:.0f} s at the median: "
                  "a slow node, or more data for it than for its peers", {})


def _checkpoints(record: dict[str, Any]) -> Advice | None:
    """The most work a relaunch lost: the step the session before reached against the step the
    next one's first report gave, from the record's figures over time."""
    series = record.get("series") or {}
    points = [(t, s) for t, s in zip(series.get("t") or [], series.get("step") or []) if s is not None]
    total = (record.get("progress") or {}).get("total")
    worst: tuple[int, int, int, float, int] | None = None  # lost, reached, resumed, seconds, session
    for session in (record.get("sessions") or [])[1:]:
        start, end = session.get("started_at"), session.get("finished_at") or float("inf")
        before = [(t, s) for t, s in points if start is not None and t < start]
        # The session's lowest step is where it resumed: its first figures may still show the
        # step the session before reached, until its own chief reports.
        after = [s for t, s in points if start is not None and start <= t <= end]
        if not before or not after:
            continue
        reached, resumed = max(s for _, s in before), min(after)
        rate = (before[-1][0] - before[0][0]) / max(1, before[-1][1] - before[0][1]) if len(before) > 1 else 0.0
        lost = reached - resumed
        if lost > 0 and (worst is None or lost > worst[0]):
            worst = (lost, reached, resumed, lost * rate, session.get("session", 0))
    if worst is None or not ((total and worst[0] >= total / 10) or worst[3] >= 60):
        return None
    lost, reached, resumed, seconds, session = worst
    return Advice("checkpoints", "moderate", f"session {session} resumed from about step {resumed} after the session "
                  f"before had reached step {reached}: about {lost} steps ({seconds:.0f} s of training) lost; "
                  "saving checkpoints more often keeps them", {})


def _chief(record: dict[str, Any]) -> dict[str, Any] | None:
    conf = record.get("conf") or {}
    name = conf.get("tony.chief.name") or ("chief" if "chief" in (record.get("requested") or {}) else "worker")
    wanted = f"{name}:{conf.get('tony.chief.index') or 0}"
    return next((t for t in record.get("tasks") or [] if t["task_id"] == wanted), None)


def _hang_after_chief(record: dict[str, Any]) -> Advice | None:
    chief = _chief(record)
    if chief is None or chief.get("state") != "SUCCEEDED" or _ran(chief) is None:
        return None
    done = chief["finished_at"]
    untracked = [t for t in str((record.get("conf") or {}).get("tony.application.untracked.jobtypes", "ps")).split(",")
                 if t.strip()]
    ended = record.get("finished_at") or done
    late = {}
    for t in record.get("tasks") or []:
        task_type = t["task_id"].split(":")[0]
        if t is chief or task_type in untracked or task_type == chief["task_id"].split(":")[0]:
            continue
        after = (t.get("finished_at") or ended) - done
        if after > 10 and after > (_ran(chief) or 0) / 4:
            late[task_type] = max(late.get(task_type, 0.0), after)
    if not late:
        return None
    types = ", ".join(sorted(late))
    return Advice("hang after the chief", "severe", f"the chief {chief['task_id']} succeeded and {types} ran on "
                  f"{max(late.values()):.0f} s more: the job waited for tasks whose work was done",
                  {"tony.application.untracked.jobtypes": ",".join([*untracked, *sorted(late)])})


def advise(runs: Sequence[dict[str, Any]]) -> list[Advice]:
    """The advice for the next run of the job whose records ``runs`` are, newest first: the
    newest run's request, judged against what every run used. Most severe first."""
    if not runs:
        return []
    newest = runs[0]
    out: list[Advice] = []
    for task_type, asked in (newest.get("requested") or {}).items():
        mine = [r for r in runs if task_type in (r.get("requested") or {})]
        for found in (_memory(mine, task_type, float(asked.get("memory_mb") or 0)) if asked.get("memory_mb") else None,
                      _vcores(mine, task_type, int(asked.get("vcores") or 0)),
                      _gpus(mine, task_type, int(asked.get("gpus") or 0))):
            if found is not None:
                out.append(found)
    out += [a for a in (_gang_wait(newest), _straggler(newest), _checkpoints(newest), _hang_after_chief(newest))
            if a is not None]
    return sorted(out, key=lambda a: SEVERITIES.index(a.severity))


def as_conf_lines(advice: Sequence[Advice]) -> list[str]:
    """The changes as ``--conf key=value`` lines, one per key (the most severe advice's value)."""
    seen: dict[str, str] = {}
    for a in advice:
        for key, value in a.changes.items():
            seen.setdefault(key, value)
    return [f"--conf {key}={value}" for key, value in seen.items()]

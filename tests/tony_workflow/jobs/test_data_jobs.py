"""Jobs that read their input through tony_workflow.data on the embedded cluster: each task its
share, a killed worker's session resumed with every id read exactly once, bad inputs refused with
nothing submitted, and nothing left running at the end. Elastic groups within one epoch: three,
two, three regrouping in place; and under torch's agent (restart) three, two, three and then a
relaunched session, all from rank 0's saved state, every id read exactly once."""
from __future__ import annotations

import collections
import json
import signal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import app_processes, user_process, wait_for
from tony_workflow.client import TonyClient, load_job
from tony_workflow.errors import SpecError

pytestmark = pytest.mark.job

TRAINER = Path(__file__).parent / "data_trainer"
SIZES = [1000, 333, 2500, 17]  # 3,850 rows in uneven files
N = sum(SIZES)


def write_input(directory: Path) -> Path:
    directory.mkdir(parents=True)
    start = 0
    for i, n in enumerate(SIZES):
        pq.write_table(pa.table({"id": np.arange(start, start + n), "x": np.ones(n)}),
                       directory / f"part-{i}.parquet", row_group_size=300)
        start += n
    return directory


def reader_job(data: Path, out: Path, params: str = "", workers: int = 3, **data_fields) -> dict:
    return {"name": "reader", "framework": "tensorflow", "executes": "train.py", "src_dir": str(TRAINER),
            "task_params": f"--out {out} {params}",
            "tasks": {"worker": {"instances": workers, "memory": "512m", "restart_policy": "session"}},
            "data": {"train": {"path": str(data), "columns": ["id"], "remainder": "partial", **data_fields}},
            "conf": {"tony.am.memory": "512m", "tony.task.tensorboard.enabled": "false", "tony.am.retry-count": "1"}}


def yarn_reader_job(uri: str, out: Path, workers: int = 2) -> dict:
    """The reading trainer on YARN: ``workers`` tasks, one epoch of the input at ``uri``."""
    return {"name": "reader", "framework": "tensorflow", "executes": "train.py", "src_dir": str(TRAINER),
            "task_params": f"--out {out} --epochs 1 --batch 64",
            "tasks": {"worker": {"instances": workers, "memory": "512m"}},
            "data": {"train": {"path": uri, "columns": ["id"], "remainder": "partial"}},
            "conf": {"tony.am.memory": "512m", "tony.task.tensorboard.enabled": "false"}}


def elastic_reader_job(data: Path, out: Path, params: str, conf: dict) -> dict:
    """The elastic reading trainer (data_trainer/elastic.py): three PyTorch workers, two enough."""
    job = reader_job(data, out, params)
    job["framework"] = "pytorch"
    job["executes"] = "elastic.py"
    job["tasks"]["worker"] = {"instances": 3, "min_instances": 2, "memory": "3g"}
    job["conf"].update(conf)
    return job


def ids_read(out: Path, workers: int) -> collections.Counter:
    """How many times each id was read, over every rank's record."""
    seen: collections.Counter = collections.Counter()
    for rank in range(workers):
        for line in (out / f"ids-r{rank}.jsonl").read_text().splitlines():
            seen.update(json.loads(line)["ids"])
    return seen


def final_reads(out: Path, workers: int) -> dict[int, collections.Counter]:
    """Each epoch's ids as the job's last lineage read them: a step read again by a later session
    (after a relaunch) replaces what the lost session read at that step."""
    per_step: dict[tuple[int, int], dict] = {}
    for rank in range(workers):
        for line in (out / f"ids-r{rank}.jsonl").read_text().splitlines():
            record = json.loads(line)
            per_step[(rank, record["step"])] = record
    epochs: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for record in per_step.values():
        epochs[record["epoch"]].update(record["ids"])
    return epochs


def test_a_killed_worker_mid_epoch_relaunches_and_every_id_is_read_exactly_once(tony_home, tmp_path):
    data, out = write_input(tmp_path / "data"), tmp_path / "out"
    out.mkdir()
    h = TonyClient("local").submit(load_job(reader_job(data, out, "--epochs 2 --save-every 5 --hang-at 12")))
    wait_for(lambda: (out / "hanging").exists(), timeout=240)
    victim = h.status().task("worker:1")
    user_process(victim.pid).send_signal(signal.SIGKILL)
    st = h.wait(poll_interval=0.5, timeout=300)
    assert st.state == "SUCCEEDED", st.diagnostics
    assert st.session_id == 1
    epochs = final_reads(out, 3)
    for epoch in (0, 1):
        assert sorted(epochs[epoch]) == list(range(N)) and max(epochs[epoch].values()) == 1, epoch
    # The relaunch took up at rank 0's last saved step (10), not at the epoch's start.
    starts = [json.loads(line) for line in (out / "ids-r0.jsonl").read_text().splitlines()]
    resumed = [r for r in starts if r["session"] == 1]
    assert resumed[0]["step"] == 10 and resumed[0]["epoch"] == 0
    # Every rank took the same number of steps in each epoch, and nothing of the job is left running.
    steps = {(rank, e) for rank in range(3) for e in (0, 1)}
    counts = collections.Counter()
    for rank in range(3):
        for line in (out / f"ids-r{rank}.jsonl").read_text().splitlines():
            r = json.loads(line)
            counts[(rank, r["epoch"])] = max(counts[(rank, r["epoch"])], r["step"])
    assert len({v for k, v in counts.items() if k[1] == 0}) == 1 and set(counts) == steps
    assert app_processes(h.app_id) == []


def test_bad_inputs_are_refused_each_named_and_nothing_is_submitted(tony_home, tmp_path):
    data = write_input(tmp_path / "data")
    pq.write_table(pa.table({"id": ["a"], "x": [1.0]}), data / "part-9.parquet")  # another type for id
    job = reader_job(data, tmp_path, columns=["id", "nope"])
    job["data"]["val"] = {"path": str(tmp_path / "missing"), "format": "parquett"}
    with pytest.raises(SpecError) as e:
        TonyClient("local").submit(load_job(job))
    text = str(e.value)  # every problem at once: the value's and the files'
    assert "tony.data.val.format" in text and "did you mean parquet" in text
    assert "part-9.parquet: its schema differs" in text and "has column id as string" in text
    assert TonyClient("local").list() == []


@pytest.mark.frameworks
def test_an_elastic_group_of_three_then_two_then_three_within_one_epoch_reads_every_id_once(tony_home, tmp_path):
    from tests.tony_workflow.jobs.test_elastic_jobs import kill_container, regrown, running_at
    data, out = write_input(tmp_path / "data"), tmp_path / "out"
    out.mkdir()
    job = elastic_reader_job(data, out, "--global-batch 30 --epochs 1 --step-sleep 0.4",
                             {"tony.elastic.regroup": "in-place", "tony.elastic.max-membership-changes": "4"})
    h = TonyClient("local").submit(load_job(job))
    st = running_at(h, 10)
    kill_container(st, "worker:1")
    back = regrown(h, st.elastic["round"])
    assert not back.is_final, back.diagnostics
    st = h.wait(poll_interval=0.5, timeout=600)
    assert st.state == "SUCCEEDED", st.diagnostics
    assert st.session_id == 0 and st.elastic["changes"] == 1
    records = [json.loads(line) for f in out.glob("ids-*.jsonl") for line in f.read_text().splitlines()]
    done = {(r["generation"], r["step"]) for r in records if r["phase"] == "done"}
    took = [r for r in records if r["phase"] == "took" and (r["generation"], r["step"]) in done]
    worlds = [r["world"] for r in sorted(took, key=lambda r: r["step"])]
    assert worlds[0] == 3 and 2 in worlds and worlds[-1] == 3, worlds  # 3, then 2, then 3 again
    seen = collections.Counter(i for r in took for i in r["ids"])
    assert sorted(seen) == list(range(N)) and max(seen.values()) == 1
    # Every rank of a generation took each of its done steps: as many batches a step as the group had ranks.
    per_step = collections.Counter((r["generation"], r["step"]) for r in took)
    assert all(per_step[(r["generation"], r["step"])] == r["world"] for r in took)
    assert app_processes(h.app_id) == []


def lineage(records: list[dict]) -> list[tuple[int, int, list[dict]]]:
    """The steps that count, group by group, under torch's agent: every group starts from the
    step rank 0 last saved (written down as its "start"), so a group's steps count up to where the
    next one started; the rest were trained after the last save and are read again by the next.
    (generation, world, the "took" records of its counted steps) for every group in turn."""
    starts: dict[int, set[int]] = collections.defaultdict(set)
    worlds: dict[int, set[int]] = collections.defaultdict(set)
    for r in records:
        if r["phase"] == "start":
            starts[r["generation"]].add(r["step"])
            worlds[r["generation"]].add(r["world"])
    assert all(len(s) == 1 for s in starts.values()), starts  # every rank of a group starts at its step
    order = sorted(starts)  # a session's rounds in turn, then the next session's
    begin = [next(iter(starts[g])) for g in order]
    assert begin == sorted(begin), begin  # no group starts before the last one's start: no saved step lost
    out = []
    for i, g in enumerate(order):
        end = begin[i + 1] if i + 1 < len(order) else None
        took = [r for r in records if r["generation"] == g and r["phase"] == "took"
                and r["step"] > begin[i] and (end is None or r["step"] <= end)]
        out.append((g, next(iter(worlds[g])), took))
    return out


def held_back(h, task_id: str, lost: int) -> list:
    """Stops the task's replacement (after ``lost`` restarts) as soon as its container starts,
    before its agent can join the group: a replacement slow to come, as on a busy node. Its
    executor is stopped first (a stopped executor starts nothing), then whatever it had started.
    Returns the stopped processes, to be let go with ``resume()``."""
    import psutil

    from tests.tony_workflow.jobs.test_elastic_jobs import container_tree

    def stop():
        s = h.status()
        if s.is_final:
            return s
        task = s.task(task_id)
        if task.restarts <= lost or not task.log_url:
            return None
        try:
            executor = container_tree(s, task_id)[0]
            executor.suspend()
        except (psutil.Error, OSError, ValueError, IndexError):  # its container is being started
            return None
        stopped = [executor]
        for child in executor.children(recursive=True):
            try:
                child.suspend()
                stopped.append(child)
            except psutil.NoSuchProcess:
                pass
        return stopped

    held = wait_for(stop, timeout=300, interval=0.05)
    assert isinstance(held, list), held.diagnostics
    return held


@pytest.mark.frameworks
def test_under_torchs_agent_a_regroup_and_a_relaunched_session_in_one_epoch_read_every_id_once(tony_home, tmp_path):
    from tests.tony_workflow.jobs.test_elastic_jobs import kill_container, regrown, running_at
    data, out = write_input(tmp_path / "data"), tmp_path / "out"
    out.mkdir()
    # Rank 0 saves the step and the reader's state after every step; every trainer starts from it.
    job = elastic_reader_job(data, out, "--global-batch 30 --epochs 1 --step-sleep 0.25 --save",
                             {"tony.elastic.regroup": "restart", "tony.elastic.fallback-timeout-ms": "1",
                              # the replacement held back below is not taken for lost while it is
                              "tony.task.heartbeat-timeout-ms": "600000", "tony.task.max-missed-heartbeats": "600"})
    h = TonyClient("local").submit(load_job(job))

    def step(s) -> int:
        return int((s.progress or {}).get("step", 0))

    # 3, then 2: the survivors' trainers start again at two and train a few steps while the
    # replacement is held back.
    st = running_at(h, 10)
    kill_container(st, "worker:1")
    replacement = held_back(h, "worker:1", 0)
    two = wait_for(lambda: (s := h.status()).is_final and s or (s.elastic or {}).get("size") == 2
                   and step(s) >= step(st) + 4 and s, timeout=300, interval=0.2)
    assert not two.is_final, two.diagnostics
    # Then 3 again, once the replacement comes.
    for proc in replacement:
        proc.resume()
    back = regrown(h, two.elastic["round"])
    assert not back.is_final, back.diagnostics
    # Then two of three lost at once, too few: the session is relaunched whole, from rank 0's save.
    three = wait_for(lambda: (s := h.status()).is_final and s or step(s) >= step(back) + 4 and s,
                     timeout=300, interval=0.2)
    assert not three.is_final, three.diagnostics
    for task_id in ("worker:1", "worker:2"):
        kill_container(three, task_id)
    st = h.wait(poll_interval=0.5, timeout=600)
    assert st.state == "SUCCEEDED", st.diagnostics
    assert st.session_id == 1
    records = [json.loads(line) for f in out.glob("ids-*.jsonl") for line in f.read_text().splitlines()]
    groups = lineage(records)
    worlds = [world for _, world, took in groups if took]
    assert worlds[:3] == [3, 2, 3] and {g // 1000 for g, _, took in groups if took} == {0, 1}, groups
    seen: collections.Counter = collections.Counter()
    for generation, world, took in groups:
        steps = collections.Counter(r["step"] for r in took)
        assert set(steps.values()) <= {world}, (generation, steps)  # every rank's batch of every step
        assert all(r["epoch"] == 0 for r in took)
        seen.update(i for r in took for i in r["ids"])
    assert sorted(seen) == list(range(N)) and max(seen.values()) == 1
    assert app_processes(h.app_id) == []

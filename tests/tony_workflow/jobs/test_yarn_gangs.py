"""Gangs on a YARN queue, on a real mini cluster: a gang asked for whole at once and never lost by
the ResourceManager, many jobs that never deadlock, waits that say why, never-fits refused at
submission, and a killed job's room handed to the one that waits.

The cluster is two NodeManagers of 4 GB that enforce containers' memory limits. What the jobs did is read from the ResourceManager (each
application's running containers, sampled all along) and from the machine's processes, not from
the runtime's own records. A gang being broken by preemption and formed again is tested with the
other preemption tests (test_yarn_reclaim.py)."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Self

import pytest
import requests

from tests.conftest import app_processes, minicluster_missing, own_minicluster, sleeper_job, wait_for
from tony_workflow.backends.yarn.rm import outstanding_asks
from tony_workflow.client import SubmissionRefused, TonyClient, load_job

pytestmark = [pytest.mark.yarn]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = minicluster_missing()
    if reason:
        pytest.skip(reason)
    # Its NodeManagers enforce memory limits, as YARN does by default (the shared cluster does not).
    with own_minicluster(tmp_path_factory.mktemp("gang-mc"), nodemanagers=2, nm_memory_mb=4096, nm_vcores=8,
                         memory_limits=True) as info:
        yield info


class RMSampler:
    """Samples every TonY application's state, running containers and the requests the
    ResourceManager holds of it, every ``interval`` seconds, while a test runs."""

    def __init__(self, info: dict, interval: float = 0.5):
        self.url = f"{info['rm_web']}/ws/v1/cluster/apps"
        self.interval = interval
        self.samples: list[dict[str, tuple[str, int]]] = []
        self.asks: list[dict[str, int]] = []  # per sample: the requests the ResourceManager holds of each
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                apps = (requests.get(self.url, params={"applicationTags": "tony"}, timeout=10).json()
                        .get("apps") or {}).get("app") or []
            except (requests.RequestException, ValueError):
                continue
            self.samples.append({a["id"]: (a["state"], int(a.get("runningContainers", -1))) for a in apps})
            self.asks.append({a["id"]: outstanding_asks(a.get("resourceRequests")) for a in apps})

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def containers(self, sample: dict, app_id: str) -> int:
        state, running = sample.get(app_id, ("", -1))
        return running if state == "RUNNING" else 0

    def wait_ended(self, handles, timeout: float = 120) -> None:
        """Until the ResourceManager shows every application of ``handles`` ended: a job's final
        status is written before its AM unregisters."""
        wait_for(lambda: self.samples and all(self.samples[-1].get(h.app_id, ("",))[0] in ENDED for h in handles),
                 timeout=timeout, interval=0.5)

    def asking(self, app_id: str, gang: int) -> list[tuple[int, int]]:
        """(held, asked) as the ResourceManager showed them: containers the application held besides
        skein's master, and requests it held for it, from the first sample where its master ran
        and it held or asked for anything more, until the first where it held the whole gang
        (``gang`` containers besides the master). Before its master runs, the only request is
        YARN's own for the master's container."""
        out = []
        for sample, asks in zip(self.samples, self.asks):
            if sample.get(app_id, ("",))[0] != "RUNNING":
                continue
            held = max(0, self.containers(sample, app_id) - 1)
            if held >= gang:
                break
            if out or held or asks.get(app_id, 0):
                out.append((held, asks.get(app_id, 0)))
        return out

    def forming(self, app_id: str, gang: int) -> list[bool]:
        """Per sample: whether the application held part of its gang (more than skein's master,
        less than all of it) before it first held all of it. Part of a gang held after that is a
        job letting go as its tasks end."""
        out, formed = [], False
        for s in self.samples:
            held = self.containers(s, app_id)
            formed = formed or held >= gang
            out.append(not formed and 1 < held < gang)
        return out


def job(name: str, workers: int, memory: str, seconds: int) -> dict:
    return sleeper_job(name, {"tony.am.memory": "512m", "tony.am.retry-count": "0"}, seconds=seconds,
                       workers=workers, memory=memory)


def submit_together(specs: list[dict]) -> list:
    """Submits every job at the same moment, each from a thread of its own."""
    yarn = TonyClient("yarn")
    start = threading.Barrier(len(specs))

    def one(spec):
        start.wait()
        return yarn.submit(load_job(spec))
    with ThreadPoolExecutor(len(specs)) as pool:
        return list(pool.map(one, specs))


ENDED = ("FINISHED", "FAILED", "KILLED")


def finish_order(handles, sampler: RMSampler) -> list[str]:
    """Applications in the order the ResourceManager first saw them finished."""
    ended: dict[str, int] = {}
    for i, sample in enumerate(sampler.samples):
        for h in handles:
            if h.app_id not in ended and sample.get(h.app_id, ("",))[0] in ENDED:
                ended[h.app_id] = i
    return sorted(ended, key=ended.__getitem__)


def timeline(h) -> list[str]:
    """What the job's history record says happened (its AM copies its events to HDFS)."""
    record = wait_for(lambda: TonyClient("yarn").record(h.app_id), timeout=60)
    return [t["what"] for t in record.get("timeline") or []]


def two_sleepers(name: str, conf: dict | None = None, command: str = "sleep 5") -> dict:
    """TonY's default ApplicationMaster (2 GB) and two 256 MB workers: the gang skein used to lose
    a request of, the AM's container being larger than the tasks'. Never given back part-held
    (the job would wait on a lost request forever), and failed, not hung, after two minutes."""
    spec = sleeper_job(name, {"tony.am.memory": "2g", "tony.gang.hold-timeout-ms": "0",
                              "tony.container.allocation.timeout": "120000", **(conf or {})}, workers=2,
                       memory="256m")
    spec["tasks"]["worker"]["command"] = command
    return spec


@pytest.mark.parametrize("way, conf", [
    ("as the application starts", {}),
    ("by the gate", {"tony.gang.line-dir": ""}),  # no line directory: the gate decides
])
def test_on_an_idle_queue_the_whole_gang_is_asked_for_at_once_and_the_resource_manager_holds_every_request(
        cluster, way, conf):
    yarn = TonyClient("yarn")
    with RMSampler(cluster, interval=0.1) as sampler:
        h = yarn.submit(load_job(two_sleepers("idle-queue", conf)))
        final = h.wait(poll_interval=1, timeout=300)
        sampler.wait_ended([h])
    assert final.state == "SUCCEEDED", final.diagnostics
    report = yarn.backend.rm.app(h.app_id)
    assert any(t.split("/")[0].endswith("!") for t in report.tags if t.startswith("tony-gang:")) == (not conf)
    # As the ResourceManager saw it: from the first container the job asked for until it held the
    # AM's and both workers', every one of the three was held or asked for (skein lost the
    # workers' requests when the AM asked for them itself, right after its own was granted; the
    # AM then held its container alone, nothing asked for, for a minute). YARN may grant the whole
    # gang between two samples: then nothing was ever missing.
    seen = sampler.asking(h.app_id, 3)
    assert all(held + asked >= 3 for held, asked in seen), seen
    assert any(sampler.containers(s, h.app_id) >= 4 for s in sampler.samples)  # master + AM + 2 workers
    assert not any("given back" in t for t in timeline(h)), timeline(h)
    wait_for(lambda: not app_processes(h.app_id), timeout=120)


def test_a_relaunch_right_after_the_gang_formed_asks_again_for_a_request_the_resource_manager_lost(cluster):
    # The first session fails at once: the AM asks for the second's containers itself, seconds
    # after skein's master was granted the first gang, when skein numbers requests from 1 again
    # while the withdrawal of the AM's own (larger) request is still to be sent.
    yarn = TonyClient("yarn")
    with RMSampler(cluster) as sampler:
        h = yarn.submit(load_job(two_sleepers("relaunch", {"tony.am.retry-count": "1"},
                                              command='test "$SESSION_ID" != 0 || exit 3; sleep 5')))
        final = h.wait(poll_interval=1, timeout=300)
        sampler.wait_ended([h])
    assert final.state == "SUCCEEDED" and final.session_id == 1, final.diagnostics
    # The ResourceManager saw the whole gang (master, AM, two workers) twice: once per session.
    whole = [sampler.containers(s, h.app_id) >= 4 for s in sampler.samples]
    assert sum(1 for a, b in zip([False, *whole], whole) if b and not a) == 2, whole
    assert not any("given back" in t for t in timeline(h)), timeline(h)
    wait_for(lambda: not app_processes(h.app_id), timeout=120)


def runner_and_waiter(a, b):
    """(the job that runs, the one that waits, its status), once one runs and the other waits. The
    runner is read after the waiter, running still, none of its tasks ended: one that had begun to
    give its containers back may have let the waiter's turn come, which is no sight of it waiting.
    The waiter's reason is its gate's own word: before the gate has written one (its skein master
    still starting, on a busy machine), the status can only say it waits for its turn."""
    sa, sb = a.status(), b.status()
    sa_after = a.status()
    for run, srun, swait in ((a, sa_after, sb), (b, sb, sa)):
        if (srun.state == "RUNNING" and not any(t.state in ("SUCCEEDED", "FAILED", "KILLED") for t in srun.tasks)
                and swait.state == "ALLOCATING" and swait.waiting_reason
                and not swait.waiting_reason.startswith(("its turn has come", "waiting for its turn in the queue",
                                                         "first in line", "next in line"))):
            return run, (b if run is a else a), swait
    return None


def test_two_jobs_that_each_fit_alone_submitted_together_both_succeed(cluster):
    # Skein's master, the AM (512 MB) and three 1.5 GB workers: 5.5 GB of the 8 GB. Asking for
    # everything at once, two such jobs each held part of their gang and waited for each other.
    with RMSampler(cluster) as sampler:
        a, b = submit_together([job("pair-a", 3, "1536m", 20), job("pair-b", 3, "1536m", 20)])
        # Submitted at the same moment, the job whose submission announced itself first in the
        # queue's line takes the room as it starts; which one that is, the race decides.
        first, second, seen = wait_for(lambda: runner_and_waiter(a, b), timeout=120, interval=0.5)
        ends = [h.wait(poll_interval=1, timeout=400) for h in (a, b)]
        sampler.wait_ended((a, b))
    assert [s.state for s in ends] == ["SUCCEEDED", "SUCCEEDED"], [s.diagnostics for s in ends]
    # The other said it waited, and why, without a task shown launched: behind the first, while
    # that one still lacked part of its gang; for the queue's headroom or the nodes' room (which of
    # the two the scheduler's report shows first) once the room was taken, the first listed ahead
    # still while the ResourceManager's report lacks some of its containers, no longer after.
    assert seen.state == "ALLOCATING", seen
    assert ((first.app_id in seen.waiting_reason and seen.jobs_ahead == [first.app_id]) or
            (("blocked by queue headroom" in seen.waiting_reason or "blocked by room on the nodes" in
              seen.waiting_reason) and seen.jobs_ahead in ([], [first.app_id]))), seen
    assert not any(t.state in ("LAUNCHED", "REGISTERED", "RUNNING") for t in seen.tasks), seen
    # The ResourceManager never saw both hold part of their gang (skein's master + AM + 3 workers = 5)
    # at once, and the waiting job held only its master while the other ran, and, first in line,
    # its AM's container (which waits there for the room).
    gang = 5
    both_partial = [s for s, x, y in zip(sampler.samples, sampler.forming(a.app_id, gang),
                                         sampler.forming(b.app_id, gang)) if x and y]
    assert not both_partial, both_partial[:3]
    held_while_waiting = {sampler.containers(s, second.app_id) for s in sampler.samples
                          if sampler.containers(s, first.app_id) == gang}
    assert held_while_waiting <= {0, 1, 2}, held_while_waiting
    assert finish_order((a, b), sampler) == [first.app_id, second.app_id]
    for h in (a, b):
        wait_for(lambda h=h: not app_processes(h.app_id), timeout=120)


def test_four_jobs_on_room_for_two_run_two_at_a_time_in_order(cluster):
    # Master + AM + two 1 GB workers = 3 GB: two jobs and the other two's masters fit in 8 GB.
    with RMSampler(cluster) as sampler:
        handles = submit_together([job(f"four-{i}", 2, "1g", 15) for i in range(4)])
        ends = [h.wait(poll_interval=1, timeout=600) for h in handles]
        sampler.wait_ended(handles)
    assert all(s.state == "SUCCEEDED" for s in ends), [s.diagnostics for s in ends]
    # Jobs with task containers (more than skein's master and the AM's): never more than two.
    gangs = [sum(1 for h in handles if sampler.containers(s, h.app_id) > 2) for s in sampler.samples]
    assert max(gangs) == 2, gangs
    submitted = sorted(h.app_id for h in handles)
    assert len(finish_order(handles, sampler)) == 4
    # No job waits for more than two younger jobs' whole runs (the room holds two): younger jobs that
    # asked as their applications started may go first, and two jobs running together end in any order.
    started = {h.app_id: next(i for i, smp in enumerate(sampler.samples) if sampler.containers(smp, h.app_id) > 2)
               for h in handles}
    ended_at = {a: next(i for i, smp in enumerate(sampler.samples) if smp.get(a, ("",))[0] in ENDED)
                for a in submitted}
    for app_id in submitted:
        younger_before = [b for b in submitted if b > app_id and ended_at[b] <= started[app_id]]
        assert len(younger_before) <= 2, (app_id, younger_before, started, ended_at)
    for h in handles:
        wait_for(lambda h=h: not app_processes(h.app_id), timeout=120)


@pytest.mark.parametrize("worker, key, words", [
    ({"memory": "6g"}, "tony.worker.memory", "the largest NodeManager has 4096 MB"),
    ({"node_label": "gpu"}, "tony.worker.node-label", "which no running node of the cluster carries"),
    ({"instances": 6, "memory": "1536m"}, "tony.worker.memory", "but the cluster has 8192 MB"),
    ({"instances": 5, "memory": "1536m"}, "tony.worker.memory",
     "queue default at its maximum capacity (skein's master container included) has 8192 MB"),
    ({"gpus": 3, "instances": 3}, "tony.worker.gpus", "has 8 GPUs"),
])
def test_a_job_that_can_never_fit_is_refused_at_submission_and_nothing_is_submitted(cluster, worker, key, words):
    apps = lambda: len((requests.get(f"{cluster['rm_web']}/ws/v1/cluster/apps", timeout=10)
                        .json().get("apps") or {}).get("app") or [])
    before = apps()
    spec = job("never", 1, "512m", 1)
    spec["tasks"]["worker"].update(worker)
    spec["framework"] = "tensorflow"  # several workers: a standalone job is one task
    with pytest.raises(SubmissionRefused) as e:
        TonyClient("yarn").submit(load_job(spec))
    assert str(e.value).startswith(key) and words in str(e.value), str(e.value)
    assert apps() == before


def test_a_killed_job_frees_its_containers_for_the_waiting_one(cluster):
    yarn = TonyClient("yarn")
    with RMSampler(cluster) as sampler:
        a = yarn.submit(load_job(job("kill-a", 3, "1536m", 600)))
        wait_for(lambda: a.status().state == "RUNNING", timeout=180, interval=1)
        b = yarn.submit(load_job(job("kill-b", 3, "1536m", 5)))
        waiting = wait_for(lambda: "blocked by" in ((s := b.status()).waiting_reason or "") and s, timeout=60,
                           interval=0.5)
        assert waiting.state == "ALLOCATING", waiting
        assert not any(t.state in ("LAUNCHED", "REGISTERED", "RUNNING") for t in waiting.tasks), waiting
        assert a.kill().state == "KILLED"
        # a's workers would sleep ten minutes: b runs well before, on a's containers.
        ran = wait_for(lambda: (s := b.status()).state == "RUNNING" and s, timeout=180, interval=0.5)
        assert not ran.waiting_reason
        assert b.wait(poll_interval=1, timeout=300).state == "SUCCEEDED"
    # While a held its containers, b held its master and, first in line, its AM's: no task's.
    assert not any(sampler.containers(s, a.app_id) > 0 and sampler.containers(s, b.app_id) > 2
                   for s in sampler.samples)
    for h in (a, b):
        wait_for(lambda h=h: not app_processes(h.app_id), timeout=120)


def test_a_job_whose_am_has_not_started_within_its_startup_timeout_fails_as_it_waits(cluster):
    # TonY's tony.am.startup-timeout: a job still waiting for its turn (its AM not started) past it
    # fails, saying why, and never asks for its gang. Behind c, the job first in line (whose AM
    # starts to wait for the room), b's own AM never starts.
    yarn = TonyClient("yarn")
    with RMSampler(cluster) as sampler:
        a = yarn.submit(load_job(job("startup-a", 3, "1536m", 600)))
        wait_for(lambda: a.status().state == "RUNNING", timeout=180, interval=1)
        c = yarn.submit(load_job(job("startup-c", 3, "1536m", 5)))
        first = wait_for(lambda: (s := c.status()).state == "ALLOCATING" and "blocked by" in (s.waiting_reason or "")
                         and s, timeout=120, interval=0.5)
        late = job("startup-b", 3, "1536m", 5)
        late["conf"]["tony.am.startup-timeout"] = "8000"
        b = yarn.submit(load_job(late))
        st = b.wait(poll_interval=1, timeout=120)
        assert st.state == "FAILED", st
        assert "did not start within 8000 ms (tony.am.startup-timeout)" in st.diagnostics, st.diagnostics
        assert "blocked by" in st.diagnostics, st.diagnostics
        report = requests.get(f"{cluster['rm_web']}/ws/v1/cluster/apps/{b.app_id}", timeout=10).json()["app"]
        assert report["finalStatus"] == "FAILED" and a.status().state == "RUNNING"
        assert a.kill().state == "KILLED"
        # c, whose AM waited first in line, runs on a's room once a is gone.
        assert c.wait(poll_interval=1, timeout=300).state == "SUCCEEDED"
    # b never held more than skein's master container; c held its master and its AM's while a ran.
    assert max(sampler.containers(s, b.app_id) for s in sampler.samples) <= 1
    assert first.jobs_ahead == [] and "blocked by" in first.waiting_reason, first
    assert 2 in {sampler.containers(s, c.app_id) for s in sampler.samples if sampler.containers(s, a.app_id) > 2}
    timeline = [t["what"] for t in (yarn.record(c.app_id) or {}).get("timeline") or []]
    assert any(w.startswith("its turn came") for w in timeline), timeline
    for h in (a, b, c):
        wait_for(lambda h=h: not app_processes(h.app_id), timeout=120)


def test_a_task_over_its_memory_is_killed_by_the_nodemanager_and_the_job_says_so(cluster):
    # YARN's own monitor kills the container (exit status -104); the job's status keeps that and
    # YARN's words, whatever the executor managed to report as it died.
    spec = job("over-memory", 1, "256m", 60)
    spec["tasks"]["worker"]["command"] = "python3 -c 'import time; x = b\"x\" * (600 << 20); time.sleep(60)'"
    h = TonyClient("yarn").submit(load_job(spec))
    st = h.wait(poll_interval=1, timeout=180)
    assert st.state == "FAILED", st
    assert st.task("worker:0").exit_code == -104, st.tasks
    assert "The cluster said:" in st.diagnostics and "physical memory" in st.diagnostics, st.diagnostics
    hints = (TonyClient("yarn").record(h.app_id) or {}).get("hints") or []
    assert any("the cluster killed it" in hint for hint in hints), hints
    wait_for(lambda: not app_processes(h.app_id), timeout=120)

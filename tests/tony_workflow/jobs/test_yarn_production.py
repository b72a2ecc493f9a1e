"""YARN as companies run it, on the Hadoop mini cluster: one skein driver per process and none to
follow a job, the application's lifetime and priority through the ResourceManager, and Docker
settings in every container's environment. The jobs are small Python commands, not TensorFlow."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest
import requests

from tests.conftest import REPO, app_processes, sleeper_job, wait_for
from tony_workflow.backends.yarn import yarn_lifetime_s
from tony_workflow.backends.yarn.containers import reclaim_cause
from tony_workflow.client import TonyClient, load_job

pytestmark = [pytest.mark.yarn]



@pytest.fixture(scope="module")
def cluster(yarn_cluster):
    return yarn_cluster


@pytest.fixture
def yarn_jobs(cluster):
    """Submits sleepers; whatever is still running at the end is killed, and nothing of it may stay."""
    client = TonyClient("yarn")
    handles = []

    def submit(conf: dict | None = None):
        spec = load_job(sleeper_job(conf=conf))
        handles.append(client.submit(spec))
        return handles[-1]

    yield submit
    for h in handles:
        if not h.status().is_final:
            h.kill()
        wait_for(lambda h=h: not app_processes(h.app_id), timeout=120)


def rm_app(cluster, app_id: str) -> dict:
    return requests.get(f"{cluster['rm_web']}/ws/v1/cluster/apps/{app_id}", timeout=30).json()["app"]


def run_python(code: str, timeout: float = 300) -> dict:
    """Runs ``code`` in a fresh interpreter (so no driver of this test process counts) and returns
    the JSON object it prints last."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


JVMS = """
import psutil
def jvms():
    return sorted(p.pid for p in psutil.Process().children(recursive=True) if "java" in p.name())
"""


def test_one_process_submits_through_one_driver_and_follows_with_none(cluster, yarn_jobs, tmp_path):
    # Five clients in one process (five Airflow hooks, say): one submits, all follow; one JVM in all.
    # The two processes have a skein configuration of their own (its certificate reaches the job's
    # skein AM), so no driver of another process is shared.
    skein_config = f"import os; os.environ['SKEIN_CONFIG'] = {str(tmp_path / 'skein')!r}\n"
    out = run_python(skein_config + JVMS + """
        import json
        from tony_workflow.client import TonyClient, load_job
        clients = [TonyClient("yarn") for _ in range(5)]
        spec = load_job({"name": "one-driver", "framework": "standalone",
                         "tasks": {"worker": {"instances": 1, "memory": "512m", "command": "sleep 600"}},
                         "conf": {"tony.am.memory": "512m", "tony.task.tensorboard.enabled": "false"}})
        h = clients[0].submit(spec)
        states = [c.attach(h.app_id).status().state for c in clients]
        print(json.dumps({"app_id": h.app_id, "states": states, "jvms": jvms()}))
    """.replace("\n        ", "\n"))
    app_id = out["app_id"]
    try:
        assert len(out["jvms"]) == 1, out
        assert set(out["states"]) <= {"ALLOCATING", "RUNNING"}, out
        # Another process follows the running job with three clients, and starts no JVM at all.
        followed = run_python(skein_config + JVMS + f"""
            import json, time
            from tony_workflow.client import TonyClient
            handles = [TonyClient("yarn").attach("{app_id}") for _ in range(3)]
            deadline = time.time() + 240
            while True:
                st = [h.status() for h in handles]
                if all(s.state == "RUNNING" and s.tasks for s in st) or time.time() > deadline:
                    break
                time.sleep(1)
            print(json.dumps({{"states": [s.state for s in st], "tracking": st[0].tracking_url,
                              "tasks": [t.task_id for t in st[0].tasks], "listed": "{app_id}" in
                              [s.application_id for s in TonyClient("yarn").list()], "jvms": jvms()}}))
        """.replace("\n            ", "\n"))
        assert followed["jvms"] == [], followed
        assert followed["states"] == ["RUNNING"] * 3 and followed["tasks"] == ["worker:0"], followed
        # The live status comes from the AM itself: its page behind the ResourceManager's proxy.
        assert f"/proxy/{app_id}/" in followed["tracking"] and followed["listed"], followed
    finally:
        TonyClient("yarn").attach(app_id).kill()
    assert rm_app(cluster, app_id)["finalStatus"] == "KILLED"
    wait_for(lambda: not app_processes(app_id), timeout=120)


def supervisor_of(app_id: str) -> psutil.Process | None:
    """The job's supervisor: it runs in the AM's container, whose directory names the application."""
    for p in psutil.process_iter(["cmdline"]):
        try:
            if "tony_workflow.am.supervisor" in " ".join(p.info["cmdline"] or []) and app_id in p.cwd():
                return p
        except (psutil.Error, OSError):
            continue
    return None


def test_the_application_timeout_is_the_yarn_lifetime_and_ends_a_hung_am(cluster, yarn_jobs):
    h = yarn_jobs({"tony.application.timeout": "60000"})
    # Stop the AM's container (the supervisor and the AM) as soon as it runs: nothing of the job
    # can end it now, so only YARN's lifetime can.
    supervisor = wait_for(lambda: supervisor_of(h.app_id), timeout=60)
    stopped = [supervisor, *supervisor.children(recursive=True)]
    for p in stopped:
        p.send_signal(signal.SIGSTOP)
    try:
        timeouts = requests.get(f"{cluster['rm_web']}/ws/v1/cluster/apps/{h.app_id}/timeouts", timeout=30).json()
        lifetime = [t for t in timeouts["timeouts"]["timeout"] if t["type"] == "LIFETIME"]
        assert lifetime and 0 < int(lifetime[0]["remainingTimeInSeconds"]) <= yarn_lifetime_s(60000), timeouts
        app = wait_for(lambda: (a := rm_app(cluster, h.app_id))["state"] == "KILLED" and a, timeout=180, interval=1)
        assert "lifetime" in app["diagnostics"].lower(), app["diagnostics"]
        # YARN's kill reaches stopped processes too: nothing of the job is left on the machine.
        wait_for(lambda: not app_processes(h.app_id) and not supervisor_of(h.app_id), timeout=120)
    finally:
        for p in stopped:
            try:
                p.send_signal(signal.SIGCONT)
            except psutil.Error:
                pass


def test_docker_settings_reach_the_environment_of_every_container(cluster, yarn_jobs):
    # The mini cluster's NodeManager runs containers as processes (no Docker runtime here), so the
    # variables YARN's Docker runtime would read are checked where they land: each container's env.
    h = yarn_jobs({"tony.docker.enabled": "true", "tony.docker.containers.image": "tony/tf:2.21",
                   "tony.docker.am.image": "tony/am:1", "tony.docker.mounts": "/etc/passwd:/etc/passwd:ro"})
    wait_for(lambda: h.status().state == "RUNNING", timeout=120)

    def container_env(marker: str) -> dict:
        for p in app_processes(h.app_id):
            if marker in " ".join(p.cmdline()):
                return p.environ()
        return {}

    am = wait_for(lambda: container_env("tony_workflow.am.supervisor"), timeout=60)
    worker = wait_for(lambda: container_env("tony_workflow.task.executor"), timeout=60)
    assert am["YARN_CONTAINER_RUNTIME_TYPE"] == "docker" and am["YARN_CONTAINER_RUNTIME_DOCKER_IMAGE"] == "tony/am:1"
    assert worker["YARN_CONTAINER_RUNTIME_TYPE"] == "docker"
    assert worker["YARN_CONTAINER_RUNTIME_DOCKER_IMAGE"] == "tony/tf:2.21"
    assert worker["YARN_CONTAINER_RUNTIME_DOCKER_MOUNTS"] == "/etc/passwd:/etc/passwd:ro"


@pytest.mark.parametrize("message,cause", [
    ("Container preempted by scheduler", "preempted by the scheduler"),
    ("Container released on a *lost* node", "lost with its node"),
    ("Container killed on a decommissioned node", "lost: its node was decommissioned"),
    ("Container failed during execution, see logs for more information.", None),
    ("Completed successfully.", None),
])
def test_yarn_diagnostics_say_when_the_cluster_took_a_container_back(message, cause):
    assert reclaim_cause(message) == cause

"""The YARN backend against a real Hadoop 3.5 mini cluster (YARN + HDFS): MultiWorkerMirroredStrategy
trained for real once, with its checkpoints in HDFS and TensorBoard behind the ResourceManager's
proxy; what the runtime does around a trainer (a lost worker, a lost AM, GPUs, a kill) with the
standard-library stand-in trainer (tests/stand_in), which keeps the same contract in seconds."""
from __future__ import annotations

import json
import os
import re
import signal
import time
from urllib.parse import urlsplit

import pytest
import requests

from tests.conftest import REPO, run_tony, user_process, wait_for
from tony_workflow.backends.yarn.rm import ResourceManager
from tony_workflow.client import SubmissionRefused, TonyClient, UnknownApplication, load_job
from tony_workflow.context import identity_tag

pytestmark = [pytest.mark.yarn, pytest.mark.tf]

MWMS = REPO / "examples" / "mnist_mwms" / "mnist_mwms.yaml"
STAND_IN = REPO / "tests" / "stand_in" / "stand_in.yaml"
SMALL = ["tony.am.memory=512m", "tony.worker.memory=1g"]


@pytest.fixture(scope="module")
def cluster(yarn_cluster):
    return yarn_cluster


@pytest.fixture(scope="module")
def yarn(cluster):
    return TonyClient("yarn")


def webhdfs_list(cluster, path: str) -> list[str]:
    """Every file below ``path``, through WebHDFS."""
    out = []
    r = requests.get(f"{cluster['webhdfs']}/webhdfs/v1{path}", params={"op": "LISTSTATUS", "user.name": "root"},
                     timeout=30)
    if r.status_code != 200:
        return out
    for st in r.json()["FileStatuses"]["FileStatus"]:
        child = f"{path}/{st['pathSuffix']}"
        out += webhdfs_list(cluster, child) if st["type"] == "DIRECTORY" else [child]
    return out


def app_hdfs_dir(app_id: str) -> str:
    user = os.environ.get("HADOOP_USER_NAME") or os.environ.get("USER") or "root"
    return f"/user/{user}/.tony/{app_id}"


def test_mwms_runs_on_yarn_with_checkpoints_in_hdfs_and_tensorboard_behind_the_proxy(cluster, yarn):
    spec = load_job(str(MWMS), conf=SMALL, task_params="--epochs 2 --steps-per-epoch 30 --step-sleep 0.25")
    h = yarn.submit(spec)
    st = wait_for(lambda: (s := h.status()).tensorboard_url and s, timeout=240)
    assert st.state == "RUNNING" and "/proxy/" in st.tensorboard_url
    page = requests.get(st.tensorboard_url, timeout=30)  # through the ResourceManager's web proxy
    assert page.status_code == 200 and "tensorboard" in page.text.lower()
    # that page lives under the YARN application's own tracking URL (the proxied skein web UI),
    # which opens on the job's page, TensorBoard linked from there
    app = requests.get(f"{cluster['rm_web']}/ws/v1/cluster/apps/{h.app_id}", timeout=30).json()["app"]
    assert app["trackingUrl"].rstrip("/").endswith(f"/proxy/{h.app_id}") and app["applicationType"] == "TONY"
    assert st.tensorboard_url.startswith(f"{cluster['rm_web']}/proxy/{h.app_id}/")
    home = requests.get(app["trackingUrl"], timeout=30)
    assert home.status_code == 200 and h.app_id in home.text and st.tensorboard_url in home.text
    # The chief's Keras progress reports move the ResourceManager's own progress bar.
    def rm_progress():
        app = requests.get(f"{cluster['rm_web']}/ws/v1/cluster/apps/{h.app_id}", timeout=30).json()["app"]
        return app["state"] == "RUNNING" and 0 < float(app["progress"]) < 100 and float(app["progress"])
    assert wait_for(rm_progress, timeout=120, interval=1)
    st = h.wait(poll_interval=1, timeout=300)
    assert st.state == "SUCCEEDED", st.diagnostics
    assert [t.task_id for t in st.tasks] == ["worker:0", "worker:1"]
    assert st.progress["step"] == st.progress["total"] == 60
    # Its record went to the job history in HDFS, where `tony history` finds it.
    listed = run_tony("--backend", "yarn", "history", "--json")
    assert listed.returncode == 0, listed.stderr
    job = [r for r in json.loads(listed.stdout) if r["application_id"] == h.app_id]
    assert job and job[0]["state"] == "SUCCEEDED" and len(job[0]["tasks"]) == 2
    assert any(f.endswith(".json") and h.app_id in f
               for f in webhdfs_list(cluster, app_hdfs_dir(h.app_id).rsplit("/", 1)[0] + "/history"))
    files = webhdfs_list(cluster, app_hdfs_dir(h.app_id) + "/checkpoints")
    assert any(f.endswith("/final/metrics.json") for f in files), files
    report = requests.get(f"{cluster['rm_web']}/ws/v1/cluster/apps/{h.app_id}", timeout=30).json()["app"]
    assert report["finalStatus"] == "SUCCEEDED" and "tony" in report.get("applicationTags", "")
    # Ended, with no history server configured: its tracking URL leads to YARN's own page of it.
    ended = requests.get(report["trackingUrl"], timeout=30, allow_redirects=False)
    assert ended.status_code == 302 and ended.headers["Location"] == f"{cluster['rm_web']}/cluster/app/{h.app_id}"


def test_killed_worker_relaunches_in_new_containers_and_resumes_from_hdfs(cluster, yarn):
    # The first session's tasks stop at step 30 (past the checkpoint of step 20) until the loss:
    # the session cannot end before it, however slow the machine.
    spec = load_job(str(STAND_IN), conf=[*SMALL, "tony.am.retry-count=1"],
                    task_params="--steps 40 --save-every 10 --step-sleep 0.25 --hang-at 30")
    h = yarn.submit(spec)
    ckpt = app_hdfs_dir(h.app_id) + "/checkpoints"
    wait_for(lambda: any(f.endswith("/checkpoint") for f in webhdfs_list(cluster, ckpt)), timeout=300, interval=1)
    before = wait_for(lambda: (s := h.status()).state == "RUNNING" and all(t.state == "RUNNING" for t in s.tasks)
                      and s, timeout=120)
    # Kill the whole container: its launch script leads the process group that holds the
    # executor and the training process.
    container_group = os.getpgid(user_process(before.task("worker:1").pid).pid)
    assert container_group != os.getpgid(0)
    os.killpg(container_group, signal.SIGKILL)
    st = h.wait(poll_interval=1, timeout=400)
    assert st.state == "SUCCEEDED", st.diagnostics
    assert st.session_id == 1 and st.attempts == 2
    assert {t.container_id for t in st.tasks}.isdisjoint({t.container_id for t in before.tasks})
    # The relaunched chief's TensorBoard took over the proxy route: the link stays the same.
    assert before.tensorboard_url is None or st.tensorboard_url == before.tensorboard_url
    # the relaunched chief began past step 0: it restored the checkpoint from HDFS
    text = run_tony("--backend", "yarn", "logs", h.app_id).stdout
    resumed = [int(m) for m in re.findall(r"session=1 task=worker:0 start_step=(\d+)", text)]
    assert resumed and resumed[0] > 0, text[-3000:]


def am_process(app_id: str):
    """The AM of a YARN application: the process its supervisor (in the AM's container, whose
    directory names the application) recorded in am.json."""
    import json
    from pathlib import Path

    import psutil

    for p in psutil.process_iter(["cmdline"]):
        try:
            if "tony_workflow.am.supervisor" in " ".join(p.info["cmdline"] or []) and app_id in p.cwd():
                pid = json.loads((Path(p.cwd()) / "am.json").read_text())["pid"]
                am = psutil.Process(pid)
                return am if am.ppid() == p.pid else None
        except (psutil.Error, OSError, ValueError, KeyError):
            continue
    return None


def test_a_killed_am_is_replaced_and_training_resumes_from_hdfs(cluster, yarn):
    # Long enough after the AM's loss for the new session's TensorBoard to start on a busy machine.
    spec = load_job(str(STAND_IN), conf=[*SMALL, "tony.am.liveness-timeout-ms=10000"],
                    task_params="--steps 200 --save-every 10 --step-sleep 0.25")
    h = yarn.submit(spec)
    ckpt = app_hdfs_dir(h.app_id) + "/checkpoints"
    wait_for(lambda: any(f.endswith("/checkpoint") for f in webhdfs_list(cluster, ckpt)), timeout=300, interval=1)
    before = wait_for(lambda: (s := h.status()).tensorboard_url and s, timeout=120)
    old_users = [user_process(t.pid) for t in before.tasks]
    am = am_process(h.app_id)
    assert am is not None
    am.kill()
    st = h.wait(poll_interval=1, timeout=400)
    assert st.state == "SUCCEEDED", st.diagnostics
    assert st.am_attempt == 2 and st.session_id == 1
    # The earlier attempt's tasks were stopped, not left training beside the new session's.
    assert all(not p.is_running() or p.status() == "zombie" for p in old_users if p is not None)
    text = run_tony("--backend", "yarn", "logs", h.app_id).stdout
    resumed = [int(m) for m in re.findall(r"session=1 task=worker:0 start_step=(\d+)", text)]
    assert resumed and resumed[0] > 0, text[-3000:]
    # The links outlive the attempt: the same ResourceManager proxy pages.
    assert st.tracking_url == before.tracking_url and "/proxy/" in st.tracking_url
    assert st.tensorboard_url == before.tensorboard_url


def used_gpus(cluster) -> int:
    nodes = requests.get(f"{cluster['rm_web']}/ws/v1/cluster/nodes", timeout=30).json()["nodes"]["node"]
    return sum(int(info.get("value", 0)) for n in nodes
               for info in (n.get("usedResource") or {}).get("resourceInformations", {}).get("resourceInformation", [])
               if info.get("name") == "yarn.io/gpu")


def test_gpus_are_scheduled_against_the_declared_capacity(cluster, yarn):
    spec = load_job(str(STAND_IN), conf=[*SMALL, "tony.worker.gpus=1"], task_params="--steps 40 --step-sleep 0.2")
    h = yarn.submit(spec)
    wait_for(lambda: h.status().state == "RUNNING" and len(h.status().tasks) == 2, timeout=240)
    # the ResourceManager has handed out one yarn.io/gpu to each worker container
    assert wait_for(lambda: used_gpus(cluster) == 2, timeout=120)
    st = h.wait(poll_interval=1, timeout=300)
    assert st.state == "SUCCEEDED", st.diagnostics
    assert wait_for(lambda: used_gpus(cluster) == 0, timeout=120)


def test_more_gpus_than_the_cluster_has_fails_at_once(cluster, yarn):
    spec = load_job(str(MWMS), conf=[*SMALL, "tony.worker.gpus=3"])  # 2 × 3 > 4 on the one NodeManager
    t0 = time.time()
    with pytest.raises(SubmissionRefused) as e:
        yarn.submit(spec)
    assert "tony.worker.gpus" in str(e.value) and "cluster has 4" in str(e.value)
    assert time.time() - t0 < 60


def test_tony_kill_kills_the_yarn_application(cluster, yarn):
    # Also: where the job came from tags it within YARN's ten, is in its status, and finds it.
    context = ["tony.context.dag-id=Nightly", "tony.context.dag-run-id=manual__7", "tony.context.task-id=train",
               "tony.context.try-number=1", "tony.context.map-index=-1"]
    forged = load_job(str(STAND_IN), conf=[*SMALL, *context, "tony.application.tags=a,b,c,d,e,f"],
                      task_params="--steps 3000 --step-sleep 0.2")
    spec = forged.with_identity(b"the-deployments-key-0123", "http://airflow-a:8080")
    h = yarn.submit(spec)
    tags = set(requests.get(f"{cluster['rm_web']}/ws/v1/cluster/apps/{h.app_id}",
                            timeout=30).json()["app"]["applicationTags"].split(","))
    assert len(tags) == 10 and {"tony", identity_tag(spec.identity), "a", "f", "airflow.dag_id:nightly"} <= tags
    assert yarn.find_running(spec) == h.app_id  # from the submission on, before the AM says anything
    # The same task run's keys set by hand name nothing; another deployment's run has another identity.
    assert forged.identity is None and yarn.find_running(forged) is None
    assert yarn.find_running(forged.with_identity(b"another-deployments-key", "http://airflow-a:8080")) is None
    # A tag copied into another user's application is not that user's job: the ResourceManager's
    # word on the application's user decides.
    report = requests.get(f"{cluster['rm_web']}/ws/v1/cluster/apps/{h.app_id}", timeout=30).json()["app"]
    assert report["user"] == yarn.backend.submitting_user(spec)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HADOOP_USER_NAME", report["user"] + "-other")
        assert yarn.backend.running_with(identity_tag(spec.identity), spec) == []
        assert not yarn.backend.submitted_as_me(h.app_id, spec)
    # The AM's own status (its tasks listed): before it, the ResourceManager's report stands in, whose
    # tags YARN keeps in lower case.
    st = wait_for(lambda: (s := h.status()).state == "RUNNING" and s.tasks and s, timeout=240)
    assert st.context == spec.context
    # Attaching asks the ResourceManager once, and reads nothing of the job (its AM, skein's store, HDFS).
    asked = []
    with pytest.MonkeyPatch.context() as mp:
        real = ResourceManager.app
        mp.setattr(ResourceManager, "app", lambda self, app_id: asked.append(app_id) or real(self, app_id))
        for reader in ("stored_status", "endpoint", "_app_client", "_saved_status"):
            mp.setattr(type(yarn.backend), reader, lambda *a, reader=reader: pytest.fail(f"attach called {reader}"))
        assert yarn.attach(h.app_id).app_id == h.app_id
        with pytest.raises(UnknownApplication):
            yarn.attach("application_1_9999")
    assert asked == [h.app_id, "application_1_9999"], asked
    # The checkpoints (the model, for lineage and assets) are named with the NameNode of fs.defaultFS.
    namenode = urlsplit(cluster["fs_default"]).netloc
    assert st.checkpoint_location == f"hdfs://{namenode}{app_hdfs_dir(h.app_id)}/checkpoints", st.checkpoint_location
    assert any("dag_run_id, task_id, try_number, map_index went untagged" in w for w in st.warnings), st.warnings
    listed = run_tony("--backend", "yarn", "list", "--dag", "nightly", "--tag", "airflow.dag_id:nightly")
    assert h.app_id in listed.stdout and "Airflow DAG Nightly, run manual__7" in listed.stdout, listed.stderr[-2000:]
    r = run_tony("--backend", "yarn", "kill", h.app_id)
    assert r.returncode == 0 and "KILLED" in r.stdout, r.stderr[-2000:]
    report = requests.get(f"{cluster['rm_web']}/ws/v1/cluster/apps/{h.app_id}", timeout=30).json()["app"]
    assert report["state"] in ("KILLED", "FINISHED") and report["finalStatus"] in ("KILLED",)
    assert yarn.find_running(spec) is None

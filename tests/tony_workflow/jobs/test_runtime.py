"""The runtime end to end on the embedded cluster, with real processes and plain shell commands.

TensorFlow itself is exercised in test_tf_examples.py; these tests pin down the AM, executor and
local-cluster behaviour quickly.
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
import requests
import yaml

from tests.conftest import app_processes, wait_for
from tony_workflow.client import SubmissionRefused, TonyClient, load_job
from tony_workflow.errors import UnknownApplication
from tony_workflow.events import read_events
from tony_workflow.rpc import TOKEN_HEADER
from tony_workflow.spec import SpecError

pytestmark = pytest.mark.job

SMALL = {"memory": "128m", "vcores": 1}


def spec_file(tmp_path: Path, command: str, tasks: dict, conf: dict | None = None, **top) -> Path:
    doc = {"name": "rt", "command": command, "am": {"memory": "128m"},
           "tasks": {t: {**SMALL, **v} for t, v in tasks.items()},
           "conf": {"tony.task.tensorboard.enabled": "false", **(conf or {})}, **top}
    p = tmp_path / f"job-{len(list(tmp_path.glob('job-*')))}.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def submit(tmp_path, command, tasks, conf=None, **top):
    return TonyClient("local").submit(load_job(str(spec_file(tmp_path, command, tasks, conf, **top))))


def events(handle):
    return list(read_events(handle.backend.app_dir(handle.app_id) / "events.jsonl"))




def stdout_of(handle, task_id):
    files = handle.logs(task_id)
    return "".join(p.read_text() for k, p in files.items() if k.split("#")[0].endswith("stdout"))


ENV_DUMP = ("python3 -c 'import os,json; print(\"ENV\", json.dumps({k: os.environ.get(k) for k in "
            "[\"TF_CONFIG\",\"CLUSTER_SPEC\",\"JOB_NAME\",\"TASK_INDEX\",\"TASK_NUM\",\"IS_CHIEF\",\"SESSION_ID\","
            "\"TONY_CHECKPOINT_DIR\",\"TONY_APPLICATION_ID\",\"CUDA_VISIBLE_DEVICES\",\"TONY_AM_TOKEN\",\"A\",\"B\","
            "\"OMP_NUM_THREADS\",\"MKL_NUM_THREADS\"]}))'")


def dumped_env(handle, task_id):
    line = [ln for ln in stdout_of(handle, task_id).splitlines() if ln.startswith("ENV ")][-1]
    return json.loads(line[4:])


def test_job_succeeds_with_tony_task_env(tony_home, tmp_path):
    # ps tracked here, so it is not stopped before it printed its environment
    h = submit(tmp_path, ENV_DUMP, {"worker": {"instances": 2}, "ps": {"instances": 1, "vcores": 2}},
               conf={"tony.containers.envs": "A=1", "tony.execution.envs": "B=2,MKL_NUM_THREADS=3",
                     "tony.application.untracked.jobtypes": ""})
    st = h.wait(poll_interval=0.2, timeout=60)
    assert st.state == "SUCCEEDED", st.diagnostics
    w0, w1, ps = (dumped_env(h, t) for t in ("worker:0", "worker:1", "ps:0"))
    tf = json.loads(w1["TF_CONFIG"])
    assert tf["task"] == {"type": "worker", "index": 1}
    assert set(tf["cluster"]) == {"worker", "ps"} and len(tf["cluster"]["worker"]) == 2
    assert json.loads(w0["CLUSTER_SPEC"]) == tf["cluster"]
    assert w0["IS_CHIEF"] == "true" and w1["IS_CHIEF"] is None and ps["IS_CHIEF"] is None
    assert (w1["JOB_NAME"], w1["TASK_INDEX"], w1["TASK_NUM"], w1["SESSION_ID"]) == ("worker", "1", "3", "0")
    assert w0["TONY_APPLICATION_ID"] == h.app_id and Path(w0["TONY_CHECKPOINT_DIR"]).is_dir()
    assert w0["CUDA_VISIBLE_DEVICES"] == ""  # no GPUs allocated: none visible
    assert w0["TONY_AM_TOKEN"] is None  # the AM secret never reaches user code
    assert (w0["A"], w0["B"]) == ("1", "2")
    # the math libraries' threads: the container's vcores, unless the job says otherwise
    assert (w0["OMP_NUM_THREADS"], ps["OMP_NUM_THREADS"], ps["MKL_NUM_THREADS"]) == ("1", "2", "3")
    # every container is its own process group with its own directory and log files
    dirs = {p.parent for p in h.logs().values() if p.parent.name.startswith("container_")}
    assert len(dirs) == 3 and all((d / "stdout").is_file() and (d / "stderr").is_file() for d in dirs)


def test_gpus_are_pinned_exactly(tony_home, tmp_path, local_site):
    # No GPU here: the site says the machine has five, with a gap in their numbering, and the test
    # checks the CUDA_VISIBLE_DEVICES each container gets (nothing touches a device).
    local_site({"tony.local.gpus": "0,1,2,3,5"})
    h = submit(tmp_path, ENV_DUMP, {"worker": {"instances": 2, "gpus": 2}, "ps": {"instances": 1}},
               conf={"tony.application.untracked.jobtypes": ""})
    assert h.wait(poll_interval=0.2, timeout=60).state == "SUCCEEDED"
    seen = [dumped_env(h, t)["CUDA_VISIBLE_DEVICES"] for t in ("worker:0", "worker:1", "ps:0")]
    assert seen[2] == ""
    gpus = [set(s.split(",")) for s in seen[:2]]
    assert all(len(g) == 2 for g in gpus) and not gpus[0] & gpus[1]
    assert gpus[0] | gpus[1] <= {"0", "1", "2", "3", "5"}


@pytest.mark.parametrize("task, conf, key", [
    ({"gpus": 1}, {"tony.local.gpus": "0"}, "tony.worker.gpus"),
    ({"memory": "64g"}, {"tony.local.memory": "8g"}, "tony.worker.memory"),
    ({"memory": "3g"}, {"tony.local.memory": "8g"}, "tony.worker.memory"),   # 3 × 3g > 8g only together
])
def test_a_job_that_can_never_fit_fails_at_once(tony_home, tmp_path, local_site, task, conf, key):
    local_site(conf)
    t0 = time.time()
    with pytest.raises(SubmissionRefused) as e:
        submit(tmp_path, "true", {"worker": {"instances": 3, **task}})
    assert key in str(e.value) and "this machine has" in str(e.value)
    assert next(iter(conf)) in str(e.value) and "tony-site.xml" in str(e.value)  # where the size comes from
    assert time.time() - t0 < 10
    assert not list((tony_home / "local" / "apps").glob("application_*"))  # nothing submitted


def test_two_whole_machine_jobs_run_one_after_the_other(tony_home, tmp_path, local_site):
    local_site({"tony.local.memory": "1g"})
    tasks = {"worker": {"instances": 2, "memory": "448m"}}  # 128m AM + 2 × 448m = the whole 1g
    a = submit(tmp_path, "sleep 1.5", tasks)
    b = submit(tmp_path, "sleep 0.2", tasks)
    assert a.wait(poll_interval=0.2, timeout=60).state == "SUCCEEDED"
    assert b.wait(poll_interval=0.2, timeout=60).state == "SUCCEEDED"
    span = {h: (next(e["ts"] for e in events(h) if e["event"] == "allocated"),
                next(e["ts"] for e in events(h) if e["event"] == "application_finished")) for h in (a, b)}
    # served in submission order, and b got its gang only once a gave its back
    assert span[b][0] >= span[a][1] - 0.05


def test_a_job_waiting_for_the_machine_says_why_and_launches_nothing(tony_home, tmp_path, local_site):
    local_site({"tony.local.memory": "1g"})
    tasks = {"worker": {"instances": 2, "memory": "448m"}}
    a = submit(tmp_path, "sleep 6", tasks)
    wait_for(lambda: a.status().state == "RUNNING", timeout=60)
    b = submit(tmp_path, "true", tasks)
    c = submit(tmp_path, "true", tasks)
    sb = wait_for(lambda: (s := b.status()).waiting_reason and s, timeout=30)
    sc = wait_for(lambda: (s := c.status()).waiting_reason and s, timeout=30)
    assert sb.state == "ALLOCATING" and (sb.containers_held, sb.containers_wanted) == (1, 3), sb
    assert sb.waiting_reason.startswith("worker: 0 of 2 containers (448 MB, 1 vcore each); blocked by memory: "
                                        "the gang needs 1024 MB at once and 0 MB of 1024 MB are free, held by "
                                        f"{a.app_id}"), sb.waiting_reason
    assert sc.jobs_ahead == [b.app_id] and f"1 job ahead on the embedded cluster ({b.app_id})" in sc.waiting_reason
    assert not sb.tasks and not sc.tasks                  # no task is shown launched without its container
    assert "waiting 1/3 containers" in sb.summary() and "blocked by memory" in sb.summary()
    for h in (a, b, c):
        assert h.wait(poll_interval=0.2, timeout=60).state == "SUCCEEDED"
    done = b.status()
    assert done.waiting_reason is None and done.containers_held == done.containers_wanted == 3
    formed = [e for e in events(b) if e["event"] == "gang_formed"]
    assert len(formed) == 1 and formed[0]["waited_s"] > 0


FAIL_ONCE = 'if [ "$SESSION_ID" = 0 ] && [ "$TASK_INDEX" = 1 ]; then echo boom >&2; exit 3; fi; sleep 0.3'


def test_failed_task_relaunches_the_session(tony_home, tmp_path):
    h = submit(tmp_path, FAIL_ONCE, {"worker": {"instances": 2}}, conf={"tony.am.retry-count": 1})
    st = h.wait(poll_interval=0.2, timeout=60)
    assert st.state == "SUCCEEDED", st.diagnostics
    assert (st.session_id, st.attempts) == (1, 2)
    ended = [e for e in events(h) if e["event"] == "session_finished"]
    assert [(e["session"], e["state"]) for e in ended] == [(0, "FAILED"), (1, "SUCCEEDED")]
    assert "worker:1" in ended[0]["diagnostics"] and "exit code 3" in ended[0]["diagnostics"]


def test_retries_used_up_fail_the_job_naming_task_and_exit_code(tony_home, tmp_path):
    cmd = '[ "$TASK_INDEX" = 0 ] && { echo chief-broke >&2; exit 7; }; sleep 0.2'
    h = submit(tmp_path, cmd, {"worker": {"instances": 2}}, conf={"tony.am.retry-count": 1})
    st = h.wait(poll_interval=0.2, timeout=60)
    assert st.state == "FAILED"
    assert st.attempts == 2
    assert "worker:0" in st.diagnostics and "exit code 7" in st.diagnostics
    assert "chief-broke" in st.diagnostics  # the tail of the task's stderr comes along


def test_worker_failure_is_tolerated_without_retries_as_in_tony(tony_home, tmp_path):
    h = submit(tmp_path, FAIL_ONCE, {"worker": {"instances": 3}})
    st = h.wait(poll_interval=0.2, timeout=60)
    assert st.state == "SUCCEEDED" and "failedCnt=1" in st.diagnostics
    h2 = submit(tmp_path, FAIL_ONCE, {"worker": {"instances": 3}},
                conf={"tony.application.fail-on-worker-failure-enabled": "true"})
    assert h2.wait(poll_interval=0.2, timeout=60).state == "FAILED"


def test_stop_on_failure_type_fails_the_job(tony_home, tmp_path):
    cmd = '[ "$JOB_NAME" = ps ] && exit 4; sleep 30'
    h = submit(tmp_path, cmd, {"worker": {"instances": 1}, "ps": {"instances": 1}})
    st = h.wait(poll_interval=0.2, timeout=60)
    assert st.state == "FAILED" and "ps:0" in st.diagnostics and "exit code 4" in st.diagnostics


def test_hung_task_is_detected_by_missed_heartbeats(tony_home, tmp_path):
    cmd = '[ "$SESSION_ID" = 0 ] && sleep 60; exit 0'
    h = submit(tmp_path, cmd, {"worker": {"instances": 2}},
               conf={"tony.am.retry-count": 1, "tony.task.heartbeat-interval-ms": 200,
                     "tony.task.max-missed-heartbeats": 5})
    st = wait_for(lambda: (s := h.status()).task("worker:1") and s.task("worker:1").state == "RUNNING"
                  and s.task("worker:1").log_url and s)
    container_pid = int((Path(st.task("worker:1").log_url).parent / "pid").read_text())
    os.killpg(container_pid, signal.SIGSTOP)  # the whole container hangs: executor and user process
    st = h.wait(poll_interval=0.2, timeout=60)
    assert st.state == "SUCCEEDED" and st.session_id == 1
    lost = [e for e in events(h) if e["event"] == "task_state" and e["state"] == "LOST"]
    assert lost and lost[0]["task"] == "worker:1" and "missed" in lost[0]["diagnostics"]
    assert not psutil.pid_exists(container_pid) or psutil.Process(container_pid).status() == psutil.STATUS_ZOMBIE


def test_heartbeat_timeout_declares_a_hung_task_lost_before_the_missed_heartbeat_count(tony_home, tmp_path):
    # 25 missed beats of 200 ms would take 5 s; the AM-side timeout of 1 s comes first.
    cmd = '[ "$SESSION_ID" = 0 ] && [ "$TASK_INDEX" = 0 ] && sleep 60; exit 0'
    h = submit(tmp_path, cmd, {"worker": {"instances": 1}},
               conf={"tony.am.retry-count": 1, "tony.task.heartbeat-interval-ms": 200,
                     "tony.task.max-missed-heartbeats": 25, "tony.task.heartbeat-timeout-ms": 1000})
    st = wait_for(lambda: (s := h.status()).task("worker:0") and s.task("worker:0").state == "RUNNING"
                  and s.task("worker:0").log_url and s)
    container_pid = int((Path(st.task("worker:0").log_url).parent / "pid").read_text())
    os.killpg(container_pid, signal.SIGSTOP)
    st = h.wait(poll_interval=0.2, timeout=60)
    assert st.state == "SUCCEEDED" and st.session_id == 1
    lost = [e for e in events(h) if e["event"] == "task_state" and e["state"] == "LOST"]
    assert lost and "tony.task.heartbeat-timeout-ms=1000" in lost[0]["diagnostics"], lost


def test_task_restart_policy_relaunches_only_that_task_at_the_same_address(tony_home, tmp_path):
    mark = tmp_path / "worker1-failed-once"
    cmd = (f'if [ "$JOB_NAME" = chief ]; then sleep 4; exit 0; fi; '
           f'if [ "$JOB_NAME$TASK_INDEX" = worker1 ] && [ ! -e {mark} ]; then touch {mark}; sleep 0.5; exit 5; fi; '
           f'sleep 60')
    h = submit(tmp_path, cmd, {"chief": {"instances": 1}, "worker": {"instances": 2, "restart_policy": "task"},
                               "ps": {"instances": 1}},
               conf={"tony.am.retry-count": 1, "tony.application.untracked.jobtypes": "ps,worker"})
    st = h.wait(poll_interval=0.2, timeout=60)
    assert st.state == "SUCCEEDED", st.diagnostics
    assert st.session_id == 0 and st.attempts == 1
    ev = events(h)
    restarted = [e for e in ev if e["event"] == "task_restarted"]
    assert [e["task"] for e in restarted] == ["worker:1"]
    regs = [e for e in ev if e["event"] == "task_state" and e["state"] == "REGISTERED"]
    w1_ports = {e["port"] for e in regs if e["task"] == "worker:1"}
    assert len([e for e in regs if e["task"] == "worker:1"]) == 2 and len(w1_ports) == 1
    for other in ("chief:0", "ps:0", "worker:0"):  # launched once, never relaunched
        assert len([e for e in ev if e["event"] == "task_state" and e["task"] == other
                    and e["state"] == "RUNNING"]) == 1
    assert st.task("worker:1").restarts == 1


def test_kill_stops_every_process(tony_home, tmp_path):
    h = submit(tmp_path, "sleep 120", {"worker": {"instances": 2}, "ps": {"instances": 1}})
    st = wait_for(lambda: (s := h.status()).tasks and all(t.state == "RUNNING" for t in s.tasks) and s)
    pids = [int((Path(t.log_url).parent / "pid").read_text()) for t in st.tasks]
    children = [c.pid for p in pids for c in psutil.Process(p).children(recursive=True)]
    st = h.kill()
    assert st.state == "KILLED"
    for pid in pids + children:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_am_api_refuses_requests_without_the_token(tony_home, tmp_path):
    h = submit(tmp_path, "sleep 60", {"worker": {"instances": 1}})
    wait_for(lambda: h.backend.endpoint(h.app_id))
    ep = h.backend.endpoint(h.app_id)
    base = f"http://{ep.address}"
    body = {"task_id": "worker:0", "session_id": 0, "host": "127.0.0.1", "port": 1}
    for headers in ({}, {TOKEN_HEADER: "wrong"}, {TOKEN_HEADER: ep.view_token}):
        assert requests.post(base + "/v1/register", json=body, headers=headers, timeout=5).status_code == 401
        assert requests.post(base + "/v1/kill", json={}, headers=headers, timeout=5).status_code == 401
        assert requests.get(base + "/v1/cluster-spec", headers=headers, timeout=5).status_code == 401
    for headers in ({}, {TOKEN_HEADER: "wrong"}):
        assert requests.get(base + "/v1/status", headers=headers, timeout=5).status_code == 401
    assert requests.get(base + "/ui/not-the-token", timeout=5).status_code == 401
    # the view token reads status only; the tracking page carries it
    assert requests.get(base + "/v1/status", headers={TOKEN_HEADER: ep.view_token}, timeout=5).status_code == 200
    page = requests.get(h.status().tracking_url, timeout=5)
    assert page.status_code == 200 and h.app_id in page.text
    assert h.kill().state == "KILLED"


def test_am_takes_only_web_addresses_as_tensorboard_urls(tony_home, tmp_path):
    h = submit(tmp_path, "sleep 60", {"worker": {"instances": 1}})
    wait_for(lambda: h.backend.endpoint(h.app_id))
    ep = h.backend.endpoint(h.app_id)
    url = f"http://{ep.address}/v1/tensorboard"
    for bad in ("javascript:alert(document.cookie)", "file:///etc/passwd", "http://", "tensorboard:6006", ""):
        r = requests.post(url, json={"url": bad}, headers={TOKEN_HEADER: ep.token}, timeout=5)
        assert r.status_code == 400 and "http(s)" in r.json()["error"], bad
    assert h.status().tensorboard_url is None
    good = requests.post(url, json={"url": "https://tb.example.com:6006/"}, headers={TOKEN_HEADER: ep.token}, timeout=5)
    assert good.status_code == 200 and h.status().tensorboard_url == "https://tb.example.com:6006/"
    assert h.kill().state == "KILLED"


def test_application_timeout(tony_home, tmp_path):
    h = submit(tmp_path, "sleep 60", {"worker": {"instances": 1}}, conf={"tony.application.timeout": 1500})
    st = h.wait(poll_interval=0.2, timeout=60)
    assert st.state == "FAILED" and "tony.application.timeout" in st.diagnostics


def test_execution_timeout_fails_the_task(tony_home, tmp_path):
    h = submit(tmp_path, "sleep 60", {"worker": {"instances": 1}},
               conf={"tony.task.executor.execution-timeout-ms": 1000})
    st = h.wait(poll_interval=0.2, timeout=60)
    assert st.state == "FAILED" and "exit code 1" in st.diagnostics
    assert "execution-timeout-ms" in st.diagnostics


def test_registration_timeout(tony_home, tmp_path, local_site):
    # An executor that hangs before it can register (as on a stuck filesystem): a sitecustomize
    # on its PYTHONPATH sleeps at interpreter start-up. Forked executors start no interpreter, so
    # this one is started the other way.
    hang = tmp_path / "hang"
    hang.mkdir()
    (hang / "sitecustomize.py").write_text("import time\ntime.sleep(60)\n")
    path = os.pathsep.join([str(hang), *filter(None, [os.environ.get("PYTHONPATH")])])
    local_site({"tony.local.fork-server": "false"})
    h = submit(tmp_path, "true", {"worker": {"instances": 1}},
               conf={"tony.containers.envs": f"PYTHONPATH={path}", "tony.container.registration.timeout": 1500})
    st = h.wait(poll_interval=0.2, timeout=60)
    assert st.state == "FAILED" and "tony.container.registration.timeout" in st.diagnostics


def test_attach_from_another_client_and_list(tony_home, tmp_path):
    h = submit(tmp_path, "sleep 0.2", {"worker": {"instances": 1}})
    other = TonyClient("local").attach(h.app_id)
    assert other.wait(poll_interval=0.2, timeout=60).state == "SUCCEEDED"
    assert h.app_id in [s.application_id for s in TonyClient("local").list()]
    with pytest.raises(UnknownApplication, match="unknown application application_1_9999"):
        TonyClient("local").attach("application_1_9999")


def test_bad_spec_is_refused_before_anything_runs(tony_home, tmp_path):
    with pytest.raises(SpecError) as e:
        submit(tmp_path, "true", {"worker": {"instances": -1}})
    assert "tony.worker.instances" in str(e.value) or "tasks.worker.instances" in str(e.value)
    assert not (tony_home / "local" / "apps").exists() or not list((tony_home / "local" / "apps").iterdir())


def _make_venv(path: Path) -> Path:
    import venv
    venv.EnvBuilder(with_pip=False, symlinks=True).create(path)
    return path


def _zip_dir(src: Path, dest: Path) -> Path:
    import zipfile
    with zipfile.ZipFile(dest, "w") as z:
        for p in src.rglob("*"):
            if p.is_file():
                z.write(p, p.relative_to(src).as_posix())
    return dest


@pytest.mark.parametrize("packed", [False, True], ids=["venv-dir", "venv-zip"])
def test_executes_runs_with_the_shipped_src_dir_and_python_venv(tony_home, tmp_path, packed):
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.py").write_text("import sys, os\nprint('PREFIX', sys.prefix, 'ARGS', *sys.argv[1:])\n"
                                 "print('HERE', sorted(os.listdir('.')))\n")
    venv_dir = _make_venv(tmp_path / "venv")
    venv = _zip_dir(venv_dir, tmp_path / "venv.zip") if packed else venv_dir
    doc = {"name": "venv", "executes": "main.py", "task_params": "--lr 0.1", "src_dir": "src",
           "python_venv": str(venv), "am": {"memory": "128m"}, "tasks": {"worker": {"instances": 1, **SMALL}},
           "conf": {"tony.task.tensorboard.enabled": "false"}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(doc))
    h = TonyClient("local").submit(load_job(str(tmp_path / "job.yaml")))
    assert h.wait(poll_interval=0.2, timeout=60).state == "SUCCEEDED"
    out = stdout_of(h, "worker:0")
    prefix = out.split("PREFIX ", 1)[1].split(" ARGS")[0]
    assert prefix.endswith("/venv") and Path(prefix).parent.name.startswith("container_")
    assert "ARGS --lr 0.1" in out and "'main.py'" in out


def test_command_precedence_type_over_containers_over_executes(tony_home, tmp_path):
    h = submit(tmp_path, "echo from-containers", {"worker": {"instances": 1}, "chief": {"instances": 1,
               "command": "echo from-chief-type"}}, executes="never.py")
    assert h.wait(poll_interval=0.2, timeout=60).state == "SUCCEEDED"
    assert "from-chief-type" in stdout_of(h, "chief:0") and "from-containers" in stdout_of(h, "worker:0")


@pytest.mark.tf
def test_tensorboard_sidecar_serves_the_job_and_stays_out_of_tf_config(tony_home, tmp_path):
    h = submit(tmp_path, ENV_DUMP + "; sleep 30", {"worker": {"instances": 1}, "tensorboard": {"instances": 1}},
               conf={"tony.task.tensorboard.enabled": "true"})
    st = wait_for(lambda: (s := h.status()).tensorboard_url and s, timeout=120)
    assert requests.get(st.tensorboard_url + "/data/logdir", timeout=10).status_code == 200
    assert st.task("tensorboard:0").state == "RUNNING"
    # the sidecar serves TensorBoard, so the chief does not run one of its own
    tb_dir = Path(st.task("tensorboard:0").log_url).parent
    chief_dir = Path(st.task("worker:0").log_url).parent
    assert (tb_dir / "tensorboard.log").exists() and not (chief_dir / "tensorboard.log").exists()
    w0 = dumped_env(h, "worker:0")
    assert "tensorboard" not in json.loads(w0["TF_CONFIG"])["cluster"]
    assert "tensorboard" in json.loads(w0["CLUSTER_SPEC"])
    assert h.kill().state == "KILLED"


@pytest.mark.tf
def test_a_tensorboard_log_dir_gets_tonys_tensorboard_task_which_serves_it_and_leaves_with_the_job(tony_home,
                                                                                                 tmp_path):
    # TonY's key: a TensorBoard task of its own serves the directory (not the chief), every task is
    # told where it is, and the job ends with its tracked tasks, taking TensorBoard with it.
    logs = tmp_path / "tb-logs"
    h = submit(tmp_path, 'echo "TB_LOG_DIR=$TB_LOG_DIR"; sleep 20', {"worker": {"instances": 1}},
               conf={"tony.application.tensorboard-log-dir": str(logs), "tony.tensorboard.memory": "256m",
                     "tony.tensorboard.vcores": "1"})
    st = wait_for(lambda: (s := h.status()).tensorboard_url and s, timeout=120)
    assert [t.task_id for t in st.tasks] == ["worker:0", "tensorboard:0"]
    assert requests.get(st.tensorboard_url + "/data/logdir", timeout=10).json()["logdir"] == str(logs)
    served = [p for p in psutil.process_iter(["cmdline"]) if "tensorboard.main" in " ".join(p.info["cmdline"] or [])
              and str(logs) in (p.info["cmdline"] or [])]
    assert len(served) == 1 and logs.is_dir()
    final = h.wait(poll_interval=0.2, timeout=120)
    assert final.state == "SUCCEEDED", final.diagnostics
    assert f"TB_LOG_DIR={logs}" in stdout_of(h, "worker:0")
    wait_for(lambda: not any(p.is_running() for p in served), timeout=30)


def test_a_type_running_past_its_groups_timeout_fails_the_job_or_with_ignored_stops_counting(tony_home, tmp_path):
    # TonY's group dependency timeout: the evaluator may run 2 s after every worker ended. Past it
    # the job fails, naming the type, its group and the key; with .ignored the evaluator no longer
    # counts for the job's end, which succeeds with the workers and stops it.
    tasks = {"worker": {"instances": 2}, "evaluator": {"instances": 1}}
    command = 'if [ "$JOB_NAME" = evaluator ]; then sleep 120; else sleep 1; fi'
    conf = {"tony.application.group.A": "worker", "tony.application.dependency.evaluator.timeout.after.A": "2"}
    first = submit(tmp_path, command, tasks, conf=conf)
    failed = first.wait(poll_interval=0.2, timeout=90)
    assert failed.state == "FAILED", failed.diagnostics
    assert ("Task type: evaluator runs exceeded timeout because it's dependent group: A (task set: [worker]) has "
            "been finished (tony.application.dependency.evaluator.timeout.after.A=2)") in failed.diagnostics
    assert failed.retries == 0  # not a failure another session would mend
    h = submit(tmp_path, command, tasks, conf={**conf, "tony.application.dependency.evaluator.timeout.after.A.ignored":
                                               "true"})
    ended = h.wait(poll_interval=0.2, timeout=90)
    assert ended.state == "SUCCEEDED", ended.diagnostics
    assert ended.task("evaluator:0").state == "KILLED"
    assert [e["type"] for e in events(h) if e["event"] == "type_untracked"] == ["evaluator"]
    for handle in (first, h):  # the evaluator stopped either way, found by scanning the machine
        wait_for(lambda handle=handle: not app_processes(handle.app_id), timeout=30)


def test_chief_checkpoints_reach_the_store_when_its_trainer_outlives_the_stop(tony_home, tmp_path):
    # The chief writes a checkpoint and then ignores SIGTERM, as a trainer busy in a collective may;
    # another task fails, so the AM stops the session and SIGKILLs the chief's container a few
    # seconds later. The checkpoint must be in the store anyway (it is copied at the stop).
    cmd = ('if [ "$TASK_INDEX" = 0 ]; then echo weights > "$TONY_CHECKPOINT_DIR/model.bin"; '
           'trap "" TERM; sleep 60; else sleep 1; exit 3; fi')
    h = submit(tmp_path, cmd, {"worker": {"instances": 2}},
               conf={"tony.application.fail-on-worker-failure-enabled": "true"})
    st = h.wait(poll_interval=0.2, timeout=60)
    assert st.state == "FAILED" and "worker:1" in st.diagnostics
    stored = h.backend.app_dir(h.app_id) / "checkpoints" / "model.bin"
    assert stored.read_text() == "weights\n"


def test_a_preprocessing_job_runs_in_the_am_first_and_hands_every_task_its_parameters(tmp_path, tony_home):
    # TonY's tony.application.enable-preprocess: the command runs in the AM before any task is asked
    # for; the tasks run their own command, with what it printed after 'Model parameters: '.
    h = submit(tmp_path, "test \"$MODEL_PARAMS\" = '--lr 0.1' && test ! -e prepared", {"worker": {"instances": 2}},
               {"tony.application.enable-preprocess": "true",
                "tony.am.command": "touch prepared; echo 'Model parameters: --lr 0.1'"})
    st = h.wait(timeout=120)
    assert st.succeeded, st.diagnostics
    started = [e for e in events(h) if e["event"] in ("preprocessing_job_ended", "allocating")]
    assert [e["event"] for e in started] == ["preprocessing_job_ended", "allocating"]
    assert started[0]["exit_code"] == 0
    failed = submit(tmp_path, "true", {"worker": {"instances": 1}},
                    {"tony.application.enable-preprocess": "true", "tony.am.command": "exit 5"}).wait(timeout=120)
    assert failed.state == "FAILED" and "Preprocessing job exited with 5" in failed.diagnostics
    assert failed.tasks == []  # no task was asked for


def test_a_task_over_its_memory_is_killed_and_reported_as_yarn_reports_it(tony_home, tmp_path):
    # worker:0 (the chief) writes 400 MB into a 256 MB container; worker:1 stays well under its own.
    hold = ("python3 -c 'import os, time; n = 400 if os.environ[\"TASK_INDEX\"] == \"0\" else 8; "
            "x = b\"x\" * (n << 20); time.sleep(60)'")
    h = submit(tmp_path, hold, {"worker": {"instances": 2, "memory": "256m"}})
    st = h.wait(poll_interval=0.2, timeout=120)
    assert st.state == "FAILED", st.diagnostics
    assert st.task("worker:0").exit_code == -104, st.tasks
    assert "worker:0" in st.diagnostics and "beyond its physical memory limit" in st.diagnostics, st.diagnostics
    assert "of 256 MB (tony.worker.memory) used" in st.diagnostics, st.diagnostics
    assert st.task("worker:1").exit_code != -104
    hints = (TonyClient("local").record(h.app_id) or {}).get("hints") or []
    assert any("exceeded its memory and the cluster killed it" in hint for hint in hints), hints
    wait_for(lambda: not app_processes(h.app_id), timeout=30)

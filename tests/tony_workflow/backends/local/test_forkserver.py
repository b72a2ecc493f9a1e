"""The local backend's fork server: containers forked from a pre-started interpreter."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml

from tests.conftest import wait_for
from tony_workflow.backends.base import Container
from tony_workflow.backends.local import LocalClusterManager
from tony_workflow.backends.local.forkserver import ForkServer, ForkServerGone
from tony_workflow.backends.local.ledger import Inventory
from tony_workflow.client import TonyClient, load_job
from tony_workflow.spec import SpecError


@pytest.fixture
def server():
    fs = ForkServer()
    yield fs
    fs.close()


INLINE = """
import json, os, signal, sys, threading
from tony_workflow.backends.local.forkserver import ForkServer
fs = ForkServer(inline=True)  # this process has one thread here, as the AM has when it starts it
d = sys.argv[1]
[ok] = fs.spawn_all([(["sh", "-c", "echo $X; exit 4"], {"X": "inline", "PATH": os.environ["PATH"]}, d, d + "/out",
                       d + "/err")])
[sleeper] = fs.spawn_all([(["sleep", "60"], {"PATH": os.environ["PATH"]}, d, d + "/out2", d + "/err2")])
assert ok is not None and sleeper is not None
group = os.getpgid(sleeper)
os.killpg(sleeper, signal.SIGTERM)
result = {"server_is_child": os.waitpid(fs.pid, os.WNOHANG) == (0, 0), "code": fs.wait(ok, 30),
          "killed": fs.wait(sleeper, 30), "group": group == sleeper}
try:
    ForkServer(inline=True)
except RuntimeError as e:  # a second one would be forked from a process that now runs threads
    result["refused"] = str(e)
fs.close()
print(json.dumps(result))
"""


def test_the_inline_server_is_forked_from_the_calling_process(tmp_path):
    r = subprocess.run([sys.executable, "-c", INLINE, str(tmp_path)], capture_output=True, text=True, timeout=120,
                       check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["server_is_child"] and result["group"]
    assert result["code"] == 4 and result["killed"] == -signal.SIGTERM
    assert "before any other thread" in result["refused"]
    assert (tmp_path / "out").read_text() == "inline\n"


def files(tmp_path: Path):
    return str(tmp_path / "out"), str(tmp_path / "err")


def spawn(fs: ForkServer, argv: list[str], env: dict[str, str], cwd: str, out: str, err: str) -> int:
    """One process through the server; fails the test unless the server started it."""
    pids = fs.spawn_all([(argv, env, cwd, out, err)])
    assert len(pids) == 1 and pids[0] is not None, pids
    return pids[0]


def test_a_forked_command_gets_its_directory_environment_files_and_session(server, tmp_path):
    out, err = files(tmp_path)
    pid = spawn(server, ["sh", "-c", 'echo "$GREETING from $(pwd)"; echo oops >&2; sleep 1; exit 3'],
                {"GREETING": "hello", "PATH": os.environ["PATH"]}, str(tmp_path), out, err)
    assert os.getpgid(pid) == pid  # leads its own group, so the whole group can be killed
    assert os.getsid(pid) != os.getsid(0)  # and has left the caller's session (and terminal)
    assert psutil.Process(pid).ppid() == server.pid and server.poll(pid) is None  # the server's own child
    assert server.wait(pid, 30) == 3
    assert Path(out).read_text() == f"hello from {tmp_path}\n"
    assert Path(err).read_text() == "oops\n"


def test_a_signalled_child_reports_a_negative_code_as_popen_does(server, tmp_path):
    pid = spawn(server, ["sleep", "60"], {"PATH": os.environ["PATH"]}, str(tmp_path), *files(tmp_path))
    os.kill(pid, signal.SIGKILL)
    assert server.wait(pid, 30) == -signal.SIGKILL


def test_a_command_that_cannot_start_fails_with_127_and_says_why(server, tmp_path):
    out, err = files(tmp_path)
    pid = spawn(server, ["/no/such/program"], {}, str(tmp_path), out, err)
    assert server.wait(pid, 30) == 127
    assert "cannot start container" in Path(err).read_text() and "/no/such/program" in Path(err).read_text()


def test_children_outlive_the_server_and_a_gone_server_is_reported(tmp_path):
    fs = ForkServer()
    pid = spawn(fs, ["sleep", "1.5"], {"PATH": os.environ["PATH"]}, str(tmp_path), *files(tmp_path))
    os.kill(fs.pid, signal.SIGKILL)  # the server dies, as in a crash; its child is not told
    wait_for(lambda: not fs.alive, timeout=10)
    with pytest.raises(ForkServerGone):
        fs.spawn_all([(["true"], {}, str(tmp_path), *files(tmp_path))])
    assert psutil.pid_exists(pid)
    # its exit code can no longer be known: once it is gone it counts as killed
    assert wait_for(lambda: fs.poll(pid) is not None, timeout=30) and fs.poll(pid) == -signal.SIGKILL
    fs.close()  # reaps the dead server


def test_the_cluster_manager_falls_back_to_plain_processes_without_the_server(tony_home, tmp_path):
    cm = LocalClusterManager("application_1_0001", tmp_path, Inventory(memory_mb=4096, vcores=8, gpus=[]),
                             fork_server=True)
    os.kill(cm._forks.pid, signal.SIGKILL)
    wait_for(lambda: not cm._forks.alive, timeout=10)
    c = Container(id="container_1_0001_01_000001", task_id="worker:0", memory_mb=128, vcores=1, gpu_indices=[])
    cm.launch(c, [sys.executable, "-c", "import os; print(os.getcwd())"], {})
    assert wait_for(lambda: cm.poll(c) is not None, timeout=30) and cm.poll(c) == 0
    assert c.id in cm._procs and Path(c.stdout).read_text().strip() == str(c.workdir)
    cm.release()


@pytest.mark.job
def test_job_containers_are_forked_by_the_server_and_can_be_turned_off(tony_home, tmp_path, local_site):
    def run(fork: str):
        local_site({"tony.local.fork-server": fork})
        doc = {"name": "fork", "command": "sleep 2; echo task ran", "am": {"memory": "128m"},
               "tasks": {"worker": {"instances": 2, "memory": "128m"}},
               "conf": {"tony.task.tensorboard.enabled": "false"}}
        path = tmp_path / f"job-{fork}.yaml"
        path.write_text(yaml.safe_dump(doc))
        h = TonyClient("local").submit(load_job(str(path)))
        st = wait_for(lambda: (s := h.status()).tasks and all(t.state == "RUNNING" for t in s.tasks) and s)
        am_pid = h.backend._am_info(h.app_id)["pid"]
        parents = []
        for t in st.tasks:
            container_pid = int((Path(t.log_url).parent / "pid").read_text())
            parent = psutil.Process(container_pid).parent()
            parents.append((parent.pid, parent.ppid()))
        final = h.wait(poll_interval=0.2, timeout=60)
        assert final.state == "SUCCEEDED", final.diagnostics
        return am_pid, parents

    am_pid, parents = run("true")
    # the fork server is the AM's child, forked from it
    assert all(pid != am_pid and grandparent == am_pid for pid, grandparent in parents), (am_pid, parents)
    am_pid, parents = run("false")
    assert all(pid == am_pid for pid, _ in parents), (am_pid, parents)


@pytest.mark.job
def test_a_bad_fork_server_value_is_refused(tony_home, tmp_path, local_site):
    # In the site configuration, where it belongs: named with the file, and nothing submitted.
    conf_dir = local_site({"tony.local.fork-server": "sometimes"})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "command": "true", "tasks": {"worker": {"instances": 1}},
                                    "conf": {"tony.task.heartbeat-timeout-ms": "5"}}))
    with pytest.raises(SpecError) as e:
        TonyClient("local").submit(load_job(str(path)))
    text = str(e.value)
    assert "tony.local.fork-server" in text and "sometimes" in text and str(conf_dir / "tony-site.xml") in text
    assert not list((tony_home / "local" / "apps").glob("application_*"))
    # In a job, any value is refused: the job does not choose how the machine starts containers.
    path.write_text(yaml.safe_dump({"name": "x", "command": "true", "tasks": {"worker": {"instances": 1}},
                                    "conf": {"tony.local.fork-server": "false",
                                             "tony.task.heartbeat-timeout-ms": "-5"}}))
    with pytest.raises(SpecError) as e:
        load_job(str(path)).validate()
    text = str(e.value)
    assert "tony.local.fork-server" in text and "tony-site.xml" in text
    assert "tony.task.heartbeat-timeout-ms" in text and "-5" in text

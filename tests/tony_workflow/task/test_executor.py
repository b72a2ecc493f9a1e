"""The TaskExecutor's pieces that need no AM and start no process (:mod:`tony_workflow.task.executor`):
its reading of the container's environment, the user process's environment (TF_CONFIG, the TonY
variables, the job's interpreter first on PATH, no AM token), its command, TensorBoard's place,
and the port it holds for the task."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from tony_workflow.spec import load_job
from tony_workflow.task.executor import PortReservation, TaskExecutor, ephemeral_ports, quiet_ports


def executor(tmp_path, task_id: str, doc: dict | None = None, **env: str) -> TaskExecutor:
    spec = load_job(doc or {"name": "unit", "command": "python train.py",
                            "tasks": {"chief": {"instances": 1}, "worker": {"instances": 2}, "ps": {"instances": 1}},
                            "conf": {"tony.execution.envs": "DATA=/data/digits"}})
    (tmp_path / "spec.json").write_text(json.dumps(spec.to_dict()))
    base = {"TONY_TASK_ID": task_id, "SESSION_ID": "3", "TONY_APPLICATION_ID": "application_1_0007",
            "TONY_SPEC_FILE": str(tmp_path / "spec.json"), "TONY_AM_ADDRESS": "127.0.0.1:9",
            "TONY_AM_TOKEN": "executors-secret", "TONY_CONTAINER_ID": "c-1", "PATH": "/usr/bin"}
    ex = TaskExecutor({**base, **env})
    ex.checkpoint_dir = tmp_path / "checkpoint"
    ex.workdir = tmp_path  # the container's directory
    return ex


CLUSTER = {"chief": ["h0:2000"], "worker": ["h1:2001", "h2:2002"], "ps": ["h3:2003"]}


def test_the_container_environment_is_read_once(tmp_path):
    ex = executor(tmp_path, "worker:1", NM_HOST="node7")
    assert (ex.task_type, ex.index, ex.session_id, ex.app_id) == ("worker", 1, 3, "application_1_0007")
    assert ex.host == "node7" and not ex.is_chief
    assert executor(tmp_path, "chief:0").is_chief


def test_the_user_process_gets_tf_config_and_the_tony_variables_but_not_the_am_token(tmp_path):
    ex = executor(tmp_path, "worker:1")
    env = ex._user_env(ex._context(CLUSTER), tb_port=None)
    tf_config = json.loads(env["TF_CONFIG"])
    assert tf_config["cluster"] == CLUSTER and tf_config["task"] == {"type": "worker", "index": 1}
    assert (env["JOB_NAME"], env["TASK_INDEX"], env["SESSION_ID"]) == ("worker", "1", "3")
    assert env["TONY_CHECKPOINT_DIR"] == str(tmp_path / "checkpoint") and env["DATA"] == "/data/digits"
    assert "TONY_AM_TOKEN" not in env and "TB_PORT" not in env
    # A bare `python` in the command is the executor's own interpreter, whatever the node's PATH holds.
    then = env["PATH"].split(os.pathsep)[1]
    ran = subprocess.run(["python", "-c", "import sys; print(sys.prefix)"], env={"PATH": env["PATH"]},
                         capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == sys.prefix  # the executor's virtualenv, not only its interpreter
    assert then == os.path.dirname(sys.executable)


def test_with_a_shipped_runtime_the_task_imports_its_environment_and_this_package_never_the_runtimes_own(tmp_path):
    # The container's own processes run from runtime/tony and runtime/lib (yarn_app's prelude); the
    # task's see the job's paths, then its packed environment, then runtime/tony alone.
    runtime = str(tmp_path / "runtime")
    ex = executor(tmp_path, "worker:1", TONY_RUNTIME=runtime, TONY_ENVIRONMENT=str(tmp_path / "environment"),
                  PYTHONPATH=f"{runtime}/tony:{runtime}/lib")
    env = ex._user_env(ex._context(CLUSTER), tb_port=None)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(tmp_path / "environment"), f"{runtime}/tony"]
    doc = {"name": "own", "command": "python train.py", "tasks": {"worker": {"instances": 2}},
           "conf": {"tony.execution.envs": "PYTHONPATH=/data/lib"}}
    ex = executor(tmp_path, "worker:0", doc, TONY_RUNTIME=runtime, PYTHONPATH=f"{runtime}/tony:{runtime}/lib")
    assert ex._user_env(ex._context(CLUSTER), tb_port=None)["PYTHONPATH"].split(os.pathsep) == [
        "/data/lib", f"{runtime}/tony"]
    # Without a shipped runtime (the embedded cluster, a node with the project installed) nothing changes.
    ex = executor(tmp_path, "worker:0", PYTHONPATH="/opt/x")
    assert ex._user_env(ex._context(CLUSTER), tb_port=None)["PYTHONPATH"] == "/opt/x"


def test_only_the_chief_serves_tensorboard_unless_the_job_has_a_tensorboard_type(tmp_path):
    assert executor(tmp_path, "chief:0")._wants_tensorboard()
    assert not executor(tmp_path, "worker:0")._wants_tensorboard()
    chief = executor(tmp_path, "chief:0")
    assert chief._user_env(chief._context(CLUSTER), tb_port=6006)["TB_PORT"] == "6006"
    doc = {"name": "tb", "tasks": {"worker": {"instances": 1, "command": "python train.py"},
                                   "tensorboard": {"instances": 1}}}
    assert executor(tmp_path, "tensorboard:0", doc)._wants_tensorboard()
    assert not executor(tmp_path, "worker:0", doc)._wants_tensorboard()
    assert executor(tmp_path, "tensorboard:0", doc).command() == ""  # a sidecar that only serves TensorBoard


def test_a_type_without_a_command_is_refused_naming_where_one_goes(tmp_path):
    doc = {"name": "cmd", "tasks": {"worker": {"instances": 1, "command": "python w.py"}, "ps": {"instances": 1}}}
    assert executor(tmp_path, "worker:0", doc).command() == "python w.py"
    with pytest.raises(ValueError, match="no command for task type 'ps': set tony.ps.command"):
        executor(tmp_path, "ps:0", doc).command()


def test_a_shared_reservation_keeps_the_port_from_everyone_but_a_reuseport_server(tmp_path):
    held = PortReservation("127.0.0.1", shared=True)
    try:
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", held.port))
        with socket.socket() as grpc_like:  # a server that sets SO_REUSEPORT, as gRPC does, shares it
            grpc_like.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            grpc_like.bind(("127.0.0.1", held.port))
        held.release_for_launch()  # shared: still held while the user process runs
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", held.port))
    finally:
        held.close()


def test_a_plain_reservation_is_released_for_the_user_process(tmp_path):
    held = PortReservation("127.0.0.1")
    held.release_for_launch()
    with socket.socket() as user:
        user.bind(("127.0.0.1", held.port))


def test_a_released_reservation_is_a_port_no_outgoing_connection_is_given():
    low, high = ephemeral_ports()
    held = [PortReservation("127.0.0.1") for _ in range(20)]
    try:
        ports = {h.port for h in held}
        assert len(ports) == 20 and all(p in quiet_ports() and not low <= p <= high for p in ports), ports
        # Held without SO_REUSEADDR: a reservation made the same way meanwhile gets another port.
        with socket.socket() as other, pytest.raises(OSError):
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            other.bind(("127.0.0.1", held[0].port))
    finally:
        for h in held:
            h.close()


def test_a_shared_or_fixed_reservation_keeps_the_port_it_is_given(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    fixed = PortReservation("127.0.0.1", free)
    shared = PortReservation("127.0.0.1", shared=True)
    try:
        assert fixed.port == free and shared.port > 0
    finally:
        fixed.close()
        shared.close()

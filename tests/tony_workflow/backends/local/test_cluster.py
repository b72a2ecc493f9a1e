"""The embedded cluster's containers (:mod:`tony_workflow.backends.local`), with no AM or executor:
the cluster manager launches plain commands as containers, and what it promises of each (its
directory and files, its GPUs, its end, nothing left behind) is checked on real processes."""
from __future__ import annotations

import os
import sys
import threading

import pytest

from tests.conftest import wait_for
from tony_workflow.backends.base import ContainerRequest
from tony_workflow.backends.local import LocalBackend, LocalClusterManager
from tony_workflow.backends.local.ledger import Inventory
from tony_workflow.errors import NotAnApplicationId, UnknownApplication
from tony_workflow.process import alive


@pytest.fixture
def cluster(tony_home, tmp_path):
    app_dir = tmp_path / "application_1_0001"
    (app_dir / "src").mkdir(parents=True)
    (app_dir / "src" / "train.py").write_text("print('hi')")
    (app_dir / "src" / "train.py").chmod(0o444)
    manager = LocalClusterManager("application_1_0001", app_dir, Inventory(4096, 8, [0, 1, 2]))
    yield manager
    manager.release()


def test_a_container_runs_in_its_own_directory_with_its_gpus_and_the_staged_source(cluster):
    [_, worker] = cluster.allocate([ContainerRequest("am", 256, 1, 0), ContainerRequest("worker:0", 256, 1, 2)],
                                    cancel=threading.Event())
    assert worker.id.startswith("container_1_0001_01_") and worker.gpu_indices == [0, 1]
    show = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['CONTAINER_ID'], open('train.py').read())"
    cluster.launch(worker, [sys.executable, "-c", show], {"TONY_TASK_ID": "worker:0"})
    wait_for(lambda: cluster.poll(worker) is not None, timeout=20)
    assert cluster.poll(worker) == 0
    assert worker.stdout.read_text().split() == ["0,1", worker.id, "print('hi')"]
    assert (worker.workdir / "task_id").read_text() == "worker:0" and int((worker.workdir / "pid").read_text())
    # The source is linked, not copied, and a task cannot change the staged file.
    assert os.stat(worker.workdir / "train.py").st_ino == os.stat(cluster.app_dir / "src" / "train.py").st_ino


def test_kill_ends_a_container_and_what_it_started(cluster):
    c = cluster.new_container(cluster._make("worker:0", 128, 1, []))
    cluster.launch(c, ["sh", "-c", "sleep 60 & echo $! > child; wait"], {})
    assert wait_for(lambda: (c.workdir / "child").exists() and (c.workdir / "child").read_text().strip(), timeout=10)
    child = int((c.workdir / "child").read_text())
    assert cluster.poll(c) is None and alive(child)
    cluster.kill(c, grace=1.0)
    assert cluster.poll(c) is not None and wait_for(lambda: not alive(child), timeout=10)


def test_the_client_side_refuses_ids_it_does_not_know(tony_home):
    backend = LocalBackend()
    with pytest.raises(NotAnApplicationId):
        backend.app_dir("../x")
    with pytest.raises(UnknownApplication):
        backend.stored_status("application_1_0009")
    assert backend.list_applications() == []
    # A directory still being staged at submission (no status yet) is not an application yet.
    backend.app_dir("application_1_0010").mkdir(parents=True)
    assert backend.list_applications() == []


def test_a_source_directory_that_holds_tony_home_is_staged_without_it(tmp_path, monkeypatch):
    # src_dir "." in a home directory whose ~/.tony holds the cluster: the job's own directory is
    # inside the source, and copying it would copy itself into itself.
    home = tmp_path / "home"
    (home / ".tony").mkdir(parents=True)
    (home / "train.py").write_text("")
    monkeypatch.setenv("TONY_HOME", str(home / ".tony"))
    from tony_workflow.backends.local.cluster import _left_out
    assert _left_out(str(home), ["train.py", ".tony", ".git"]) == {".tony", ".git"}
    assert _left_out(str(home / "sub"), [".tony"]) == set()  # another directory of that name is the job's

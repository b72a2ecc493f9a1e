"""A Horovod job's driver (:mod:`tony_workflow.horovod_driver`): its plan of slots, and its
announcement, a port file the executor waits for (:mod:`tony_workflow.task.horovod`)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from tony_workflow.horovod_driver import PORT_FILE_SUFFIX, plan_of
from tony_workflow.task.horovod import announced


def test_one_slot_per_worker_task_host_by_host():
    plan = plan_of("a:2,b:1")
    assert [(s["hostname"], s["rank"], s["localRank"], s["crossRank"], s["localSize"], s["crossSize"])
            for s in plan] == [("a", 0, 0, 0, 2, 2), ("a", 1, 1, 0, 2, 1), ("b", 2, 0, 1, 1, 2)]
    assert {s["size"] for s in plan} == {3}


def test_in_test_mode_the_driver_announces_a_port_and_serves_until_stopped(tmp_path):
    env = {**os.environ, "DRIVER_OUTPUT_PATH": str(tmp_path), "CLUSTER_WORKER_LIST": "a:2"}
    proc = subprocess.Popen([sys.executable, "-m", "tony_workflow.horovod_driver", "-t", "-p", "9999"], env=env)
    try:
        port, plan = announced(tmp_path, proc, timeout=60)
        assert port == 9999 and [s["rank"] for s in plan] == [0, 1]
        assert proc.poll() is None  # it serves on
    finally:
        proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0 and not list(tmp_path.glob(f"*{PORT_FILE_SUFFIX}"))


def test_a_driver_that_fails_or_announces_nothing_is_told_apart(tmp_path):
    env = {**os.environ, "DRIVER_OUTPUT_PATH": str(tmp_path), "CLUSTER_WORKER_LIST": "a:1"}
    failing = subprocess.Popen([sys.executable, "-m", "tony_workflow.horovod_driver", "-t", "-f"], env=env)
    assert announced(tmp_path, failing, timeout=60) == (
        f"the Horovod driver ended (exit 1) without announcing its rendezvous server (a file *{PORT_FILE_SUFFIX} "
        "in DRIVER_OUTPUT_PATH)")
    silent = subprocess.Popen(["sleep", "30"])
    try:
        assert announced(tmp_path, silent, timeout=0.3) == "the Horovod driver announced no rendezvous server within 0.3 s"
    finally:
        silent.kill()
        silent.wait()
    # Without Horovod (as here), the driver's real mode says what to do instead of failing obscurely.
    real = subprocess.run([sys.executable, "-m", "tony_workflow.horovod_driver"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert real.returncode == 1 and "tony.horovod.mode.test=true" in real.stderr

"""The embedded cluster's memory limit (:mod:`tony_workflow.backends.local.memory`), on real
processes: a container over its memory is killed whole and said to be, one under it is not."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

from tests.conftest import wait_for
from tony_workflow.backends.base import ContainerRequest
from tony_workflow.backends.local import LocalClusterManager
from tony_workflow.backends.local.ledger import Inventory
from tony_workflow.backends.local.memory import MB, MemoryWatch, Watched, limit_message, tree_usage
from tony_workflow.process import alive, start_time
from tony_workflow.protocol import EXCEEDED_MEMORY_EXIT

# A process that holds ``n`` MB it has written to (resident, not just reserved), in a child of a
# shell, so that the tree is what is measured, not its first process alone.
HOLD = "import sys, time; x = b'\\x01' * (int(sys.argv[1]) << 20); print('held', flush=True); time.sleep(120)"


def holder(mb: int) -> subprocess.Popen:
    return subprocess.Popen(["sh", "-c", f'"{sys.executable}" -c "{HOLD}" {mb}; sleep 120'],
                            stdout=subprocess.PIPE, start_new_session=True)


def test_the_tree_is_the_first_process_its_descendants_and_its_group():
    table = {10: (1, 10, 5 * MB, "sh"), 11: (10, 10, 7 * MB, "python"), 12: (11, 10, 1 * MB, "child"),
             # reparented to init but still in the container's process group
             13: (1, 10, 2 * MB, "orphan"), 14: (13, 14, 3 * MB, "orphans-child"),
             20: (1, 20, 50 * MB, "neighbour")}
    usage = tree_usage(10, table)
    assert sorted(pid for pid, _, _ in usage) == [10, 11, 12, 13, 14]
    assert sum(rss for _, rss, _ in usage) == 18 * MB
    assert tree_usage(99, table) == []  # gone


def test_the_message_names_the_limit_the_usage_the_key_and_the_largest_processes():
    w = Watched("container_1_0001_01_000002", 10, None, 512, "tony.worker.memory")
    usage = [(10, 30 * MB, "sh"), (11, 700 * MB, "python"), *[(100 + i, MB, "x") for i in range(6)]]
    message = limit_message(w, usage)
    assert message.startswith("Container container_1_0001_01_000002 (pid 10) is running 224 MB beyond its "
                              "physical memory limit: 736 MB of 512 MB (tony.worker.memory) used. Killing container.")
    assert "python (pid 11) 700 MB" in message and "and 3 more" in message


def test_a_tree_over_its_limit_is_killed_whole_and_one_under_it_is_left_alone():
    big, small = holder(300), holder(20)
    try:
        for p in (big, small):
            assert p.stdout.readline() == b"held\n"
        watch = MemoryWatch(interval_s=3600)  # passes are run by hand below
        watch.watch(Watched("big", big.pid, start_time(big.pid), 200, "tony.worker.memory"))
        watch.watch(Watched("small", small.pid, start_time(small.pid), 200, "tony.worker.memory"))
        assert watch.check() == ["big"]
        assert big.wait(timeout=10) is not None and alive(small.pid)
        said = watch.exceeded("big")
        assert said and "of 200 MB (tony.worker.memory) used" in said and "python" in said
        assert watch.exceeded("small") is None
        assert watch.check() == []  # the killed one is no longer watched; the other is still under
        watch.close()
    finally:
        for p in (big, small):
            p.kill()
            p.wait()


def test_the_cluster_manager_reports_a_container_over_its_memory_as_yarn_does(tony_home, tmp_path):
    app_dir = tmp_path / "application_1_0001"
    app_dir.mkdir()
    manager = LocalClusterManager("application_1_0001", app_dir, Inventory(4096, 8, []), memory_check_s=0.2)
    try:
        [over, under] = manager.allocate([ContainerRequest("worker:0", 128, 1, 0),
                                          ContainerRequest("worker:1", 128, 1, 0)], cancel=threading.Event())
        manager.launch(over, [sys.executable, "-c", HOLD, "300"], {})
        manager.launch(under, [sys.executable, "-c", HOLD, "10"], {})
        assert wait_for(lambda: manager.poll(over), timeout=30) == EXCEEDED_MEMORY_EXIT
        assert wait_for(lambda: not alive(over.pid), timeout=10)
        said = manager.exit_diagnostics(over)
        assert said and "beyond its physical memory limit" in said and "(tony.worker.memory)" in said
        assert manager.poll(under) is None and manager.exit_diagnostics(under) is None
    finally:
        manager.release()
    assert not alive(under.pid)


def test_with_the_check_off_a_container_keeps_what_it_holds(tony_home, tmp_path):
    app_dir = tmp_path / "application_1_0002"
    app_dir.mkdir()
    manager = LocalClusterManager("application_1_0002", app_dir, Inventory(4096, 8, []), memory_check_s=None)
    try:
        [over] = manager.allocate([ContainerRequest("worker:0", 128, 1, 0)], cancel=threading.Event())
        manager.launch(over, [sys.executable, "-c", HOLD, "300"], {})
        wait_for(lambda: "held" in over.stdout.read_text(), timeout=30)
        time.sleep(0.5)  # time enough for a watch to act, were there one (the manager above polls at 0.2 s)
        assert manager.poll(over) is None and manager.exit_diagnostics(over) is None
    finally:
        manager.release()

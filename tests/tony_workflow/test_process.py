"""Processes the runtime starts and stops (:mod:`tony_workflow.process`): identity by start time, so a
recycled pid is never taken for the process it replaced, and whole-tree kills that also reach what
a dead leader's group left behind. Real processes, a fraction of a second each."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import wait_for
from tony_workflow.process import alive, group_members, kill_tree, start_time, user_name

# A leader that starts a grandchild in its own group and prints its pid, then sleeps or exits.
TREE = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        " print(c.pid, flush=True); time.sleep(60 if sys.argv[1] == 'stay' else 0)")


def leader(mode: str) -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen([sys.executable, "-c", TREE, mode], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    return p, int(p.stdout.readline())


def test_a_process_is_known_by_its_start_time():
    me = start_time(os.getpid())
    assert me is not None and start_time(os.getpid()) == me
    assert alive(os.getpid(), me)
    assert not alive(os.getpid(), me + 10)  # the same number, another start: not this process
    assert not alive(None) and not alive(0) and start_time(2 ** 22 + 12345) is None


def test_kill_tree_stops_the_leader_and_everything_below_it():
    p, grandchild = leader("stay")
    kill_tree(p.pid, grace=2.0, started=start_time(p.pid))
    p.wait(timeout=5)
    assert wait_for(lambda: not alive(grandchild), timeout=5)


def test_a_group_outlives_its_leader_and_is_killed_all_the_same():
    p, grandchild = leader("exit")
    p.wait(timeout=10)
    assert alive(grandchild) and [m.pid for m in group_members(p.pid)] == [grandchild]
    kill_tree(p.pid, grace=2.0)
    assert wait_for(lambda: not alive(grandchild), timeout=5)
    assert group_members(p.pid) == []


def test_a_recycled_pid_is_left_alone():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        kill_tree(p.pid, grace=1.0, started=start_time(p.pid) + 100, group=False)  # "another" process
        time.sleep(0.2)
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()


def test_the_hadoop_user_is_hadoop_user_name_else_the_login(monkeypatch):
    monkeypatch.setenv("HADOOP_USER_NAME", "etl")
    assert user_name() == "etl"
    monkeypatch.delenv("HADOOP_USER_NAME")
    assert user_name() and user_name() != "etl"


def test_a_zombie_main_thread_with_threads_still_running_is_not_ended():
    # The main thread leaves (pthread_exit) while another still runs, holding a port: the process
    # shows as a zombie, yet has let go of nothing. Only once that thread is done has it ended.
    import socket
    import textwrap

    from tony_workflow.process import _ended_zombie

    code = textwrap.dedent("""
        import ctypes, socket, sys, threading, time
        s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
        print(s.getsockname()[1], flush=True)
        threading.Thread(target=time.sleep, args=(1.5,)).start()
        ctypes.CDLL(None).pthread_exit(None)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        port = int(p.stdout.readline())
        assert wait_for(lambda: Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z",
                        timeout=5)
        assert not _ended_zombie(p.pid)   # a zombie by its state, with a thread and the port still held
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) == 0
        p.wait(timeout=10)
        assert _ended_zombie(p.pid)   # gone altogether (reaped) counts as ended too
    finally:
        p.kill()
        p.wait()

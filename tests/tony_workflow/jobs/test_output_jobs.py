"""A job's own output followed while it runs, for real: ``tony logs --follow`` as a subprocess beside
a job whose tasks print known lines over time (on the embedded cluster), and two followers of one
job through the library, the second started again from the first's cursor."""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import REPO, app_processes, wait_for
from tony_workflow.client import TonyClient, load_job
from tony_workflow.client.output import Cursor

pytestmark = pytest.mark.job


def printing_job(tmp_path, name: str, lines: int, gate: str, fail: bool = False) -> dict:
    """Two workers; each prints ``lines`` numbered lines (half of them, then waits for ``gate``,
    then the rest) and a line on stderr; with ``fail``, it ends on a traceback."""
    half = lines // 2
    script = (
        "import os, sys, time\n"
        "me = os.environ['TONY_TASK_ID']\n"
        f"for i in range({half}):\n"
        "    print(f'{me} line {i}', flush=True)\n"
        f"while not os.path.exists({gate!r}):\n"
        "    time.sleep(0.1)\n"
        f"for i in range({half}, {lines}):\n"
        "    print(f'{me} line {i}', flush=True)\n"
        "print(f'{me} says so on stderr', file=sys.stderr, flush=True)\n"
        + ("raise RuntimeError('the loss went to nan at step 7')\n" if fail else "")
    )
    (tmp_path / "prints.py").write_text(script)
    return {"name": name, "framework": "tensorflow", "command": f"{sys.executable} {tmp_path / 'prints.py'}",
            "tasks": {"worker": {"instances": 2, "memory": "512m"}},
            "conf": {"tony.am.memory": "512m", "tony.task.tensorboard.enabled": "false", "tony.am.retry-count": "0"}}


def follow_cli(app_id: str, *extra: str, backend: str = "local") -> subprocess.Popen:
    # A follower that hangs says where: SIGABRT (see followed) makes it print every thread's stack.
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
    return subprocess.Popen([sys.executable, "-m", "tony_workflow.client.cli", "--backend", backend, "logs", app_id,
                             "--follow", "--poll-interval", "0.2", *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)


@pytest.fixture(params=["local", pytest.param("yarn", marks=pytest.mark.yarn)])
def backend(request):
    """The embedded cluster (a TONY_HOME of the test's own) or the shared mini cluster, where the
    lines come from the NodeManager while the job runs."""
    request.getfixturevalue("tony_home" if request.param == "local" else "yarn_cluster")
    return request.param


def test_tony_logs_follow_prints_the_chiefs_lines_while_the_job_runs_in_order_once_each(backend, tmp_path):
    gate = tmp_path / "gate"
    h = TonyClient(backend).submit(load_job(printing_job(tmp_path, "follow", 40, str(gate))))
    follower = follow_cli(h.app_id, backend=backend)
    try:
        followed(h, follower, gate)
    finally:
        if follower.poll() is None:  # nothing a test starts outlives it
            follower.kill()
            follower.wait()
    assert h.wait(timeout=120).state == "SUCCEEDED"
    wait_for(lambda: not app_processes(h.app_id), timeout=120)


def followed(h, follower: subprocess.Popen, gate) -> None:
    assert follower.stdout is not None
    # Read aside, so that a silent follower fails the test with what it said of itself, in time.
    got: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=lambda: [got.put(ln) for ln in follower.stdout] + [got.put(None)], daemon=True).start()

    def lines_until(done, timeout: float) -> list[str]:
        seen: list[str] = []
        deadline = time.time() + timeout
        while not done(seen) and time.time() < deadline:
            try:
                line = got.get(timeout=max(0.1, deadline - time.time()))
            except queue.Empty:
                break
            if line is None:
                break
            seen.append(line.rstrip("\n"))
        if not done(seen):
            follower.send_signal(signal.SIGABRT)  # its stacks on stderr (PYTHONFAULTHANDLER)
            seen.append(f"(follower stopped; its stderr: {follower.communicate()[1][-3000:]})")
        return seen

    # The first half arrives while the job still runs: the task waits for the gate to go on.
    seen = lines_until(lambda s: sum(" line " in ln for ln in s) >= 20, 180)
    assert [ln for ln in seen if " line " in ln] == [f"[worker:0] worker:0 line {i}" for i in range(20)], seen
    assert h.status().state == "RUNNING"
    gate.touch()
    rest: list[str] = []
    follower.wait(timeout=180)
    while (line := got.get(timeout=30)) is not None:
        rest.append(line.rstrip("\n"))
    assert follower.returncode == 0, follower.stderr.read() if follower.stderr else ""
    lines = seen + rest
    # Every line of worker:0 (the chief of a job without one), once each and in order; its stderr
    # too; none of worker:1's.
    assert [ln for ln in lines if " line " in ln] == [f"[worker:0] worker:0 line {i}" for i in range(40)]
    assert lines.count("[worker:0 stderr] worker:0 says so on stderr") == 1, lines[-5:]
    assert not any("worker:1" in ln for ln in lines)


def test_a_failed_jobs_followed_output_ends_on_its_traceback_and_the_command_says_it_failed(tony_home, tmp_path):
    gate = tmp_path / "gate"
    gate.touch()
    h = TonyClient("local").submit(load_job(printing_job(tmp_path, "follow-fail", 4, str(gate), fail=True)))
    follower = follow_cli(h.app_id, "--task", "worker:0")
    out, err = follower.communicate(timeout=240)
    assert follower.returncode == 1, (out, err)
    assert "[worker:0 stderr] RuntimeError: the loss went to nan at step 7" in out.splitlines(), out
    assert "Traceback (most recent call last):" in out and "FAILED" in err


def test_two_followers_and_one_started_again_from_a_cursor_see_every_line_once(tony_home, tmp_path):
    gate = tmp_path / "gate"
    h = TonyClient("local").submit(load_job(printing_job(tmp_path, "follow-two", 60, str(gate))))
    wait_for(lambda: h.status().state == "RUNNING", timeout=120)
    a, b = h.output(), h.output(["worker:1"])
    got_a: list[str] = []
    got_b: list[str] = []
    got_a += [ln.text for ln in wait_for(lambda: a.poll(h.status()) or None, timeout=120, interval=0.2)
              if ln.stream == "stdout"]
    kept = a.cursor.to_json()  # the first follower goes away here
    gate.touch()
    final = h.wait(timeout=120)
    assert final.state == "SUCCEEDED", final.diagnostics
    again = h.output(cursor=Cursor.from_json(kept))
    got_a += [ln.text for ln in again.poll(final) if ln.stream == "stdout"]
    got_b += [ln.text for ln in b.poll(final) if ln.stream == "stdout"]
    assert got_a == [f"worker:0 line {i}" for i in range(60)]
    assert got_b == [f"worker:1 line {i}" for i in range(60)]


def test_a_task_writing_50_mb_is_unharmed_and_its_follower_stays_small_and_says_what_it_left_out(tony_home, tmp_path):
    import tracemalloc

    from tony_workflow.client.output import BURST, RATE
    size = 50 << 20
    script = ("import sys\n"
              "line = ('x' * 99 + '\\n').encode()\n"
              f"for i in range({size} // 100):\n"
              "    sys.stdout.buffer.write(line)\n"
              "sys.stdout.buffer.write(b'the end\\n')\n")
    (tmp_path / "floods.py").write_text(script)
    h = TonyClient("local").submit(load_job({
        "name": "flood", "command": f"{sys.executable} {tmp_path / 'floods.py'}",
        "tasks": {"worker": {"instances": 1, "memory": "512m"}},
        "conf": {"tony.am.memory": "512m", "tony.task.tensorboard.enabled": "false"}}))
    follower = h.output()
    tracemalloc.start()
    started = time.monotonic()
    try:
        lines = list(follower.follow(h.status, interval=0.2))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    took = time.monotonic() - started
    final = h.status()
    assert final.state == "SUCCEEDED", final.diagnostics
    [task] = final.tasks
    written = (tony_home / "local" / "apps" / h.app_id / "containers" / task.container_id / "stdout").stat().st_size
    assert written == size // 100 * 100 + len(b"the end\n")  # the task wrote it all, nothing held it up
    # The follower read from near the end when the file ran ahead, passed at most its rate of
    # lines, said what it left out, and ended on the task's last line; its memory stayed small.
    theirs = [ln for ln in lines if ln.task]
    assert theirs[-1].text == "the end"
    assert len(theirs) <= BURST + RATE * took + 1, (len(theirs), took)
    assert any("bytes left out]" in ln.text or "left out: more than" in ln.text for ln in lines if not ln.task)
    assert peak < 24 << 20, peak

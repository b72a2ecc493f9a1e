"""The supervisor's pieces that need no ApplicationMaster (:mod:`tony_workflow.am.supervisor`): it
adopts orphans, watches a child as Popen would, and leaves the first AM container alone. Attempts
replaced after a death or a hang are tests/tony_workflow/jobs/test_deaths.py."""
from __future__ import annotations

import json
import signal
import subprocess
import sys

from tony_workflow.am.supervisor import _Child, carried_over
from tony_workflow.events import read_events
from tony_workflow.process import alive


def test_a_child_is_watched_as_popen_would_and_its_signal_is_its_exit_code():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    child = _Child(proc.pid)
    assert child.poll() is None and child.wait(0.1) is None
    child.send_signal(signal.SIGTERM)
    assert child.wait(10) == -signal.SIGTERM
    child.send_signal(signal.SIGKILL)  # already ended: nothing is sent
    done = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    assert _Child(done.pid).wait(10) == 3


def test_a_child_reaped_elsewhere_ends_as_killed():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped here, so the supervisor's waitpid finds nothing
    assert _Child(proc.pid).poll() == -signal.SIGKILL


def test_a_process_can_adopt_its_orphans():
    # In a process of its own: a test runner that adopted orphans would keep them as zombies.
    code = "from tony_workflow.am.supervisor import become_subreaper; print(become_subreaper())"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "True"


def test_the_first_am_container_has_nothing_carried_over(tmp_path, monkeypatch):
    monkeypatch.delenv("SKEIN_CONTAINER_ID", raising=False)
    assert carried_over(tmp_path) is None
    monkeypatch.setenv("SKEIN_CONTAINER_ID", "tony-am_0")
    assert carried_over(tmp_path) is None


#: A supervisor whose AM is a process that never answers (one hung as it starts), run in a process
#: of its own: a supervisor kills every child of the process it runs in as it clears up, and this
#: test process may hold others (a mini cluster shared by its tests).
NEVER_ANSWERS = """
import subprocess, sys
from pathlib import Path
from tony_workflow.am.supervisor import Supervisor, _Child

class NeverAnswers(Supervisor):
    def _start(self, attempt, counted):
        return _Child(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]).pid)

sup = NeverAnswers("local", Path(sys.argv[1]), max_attempts=3, liveness_s=60, startup_s=0.3)
code = sup.run()
print(sup.am.pid)
sys.exit(code)
"""


def test_an_am_that_has_not_started_within_tony_am_startup_timeout_fails_the_job(tony_home, tmp_path):
    app_dir = tmp_path / "application_1_0001"
    app_dir.mkdir()
    run = subprocess.run([sys.executable, "-c", NEVER_ANSWERS, str(app_dir)], capture_output=True, text=True,
                         timeout=60, check=False)
    assert run.returncode == 1, run.stderr
    status = json.loads((app_dir / "status.json").read_text())
    assert status["state"] == "FAILED", status
    assert status["diagnostics"] == "the ApplicationMaster did not start within 300 ms (tony.am.startup-timeout)"
    assert not alive(int(run.stdout.split()[-1]))
    # Failed at once: no second attempt was started for it.
    assert [e["attempt"] for e in read_events(app_dir / "events.jsonl") if e["event"] == "am_attempt_failed"] == [1]

"""Disk: a job's source staged once, and finished jobs' directories removed after their retention."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_tony, wait_for
from tony_workflow.client import TonyClient, load_job

pytestmark = pytest.mark.job

JOB = {"name": "disk", "am": {"memory": "128m"}, "tasks": {"worker": {"instances": 2, "memory": "128m"}},
       "conf": {"tony.task.tensorboard.enabled": "false"}}


def _submit(tmp_path: Path, command: str = "true", **fields):
    path = tmp_path / f"job-{len(list(tmp_path.glob('job-*')))}.yaml"
    path.write_text(yaml.safe_dump({**JOB, "command": command, **fields}))
    return TonyClient("local").submit(load_job(str(path)))


def _age(app_dir: Path, days: float) -> None:
    """Makes a finished job look as if it had ended ``days`` ago."""
    status = json.loads((app_dir / "status.json").read_text())
    status["finished_at"] = time.time() - days * 86400
    (app_dir / "status.json").write_text(json.dumps(status))


def test_the_source_is_staged_once_and_shared_read_only(tony_home, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('training')\n" * 1000)
    # Each task tries to change its copy in place, then checks that the file is unchanged (root is
    # not held back by mode bits, so there the test only checks the bits).
    command = ("test ! -w train.py && (echo changed > train.py) 2>/dev/null; grep -q training train.py"
               if os.geteuid() != 0 else "grep -q training train.py")
    h = _submit(tmp_path, command, src_dir=str(src))
    st = h.wait(poll_interval=0.2, timeout=60)
    assert st.state == "SUCCEEDED", st.diagnostics
    app_dir = tony_home / "local" / "apps" / h.app_id
    staged = (app_dir / "src" / "train.py").stat()
    copies = [p.stat() for p in app_dir.glob("containers/*/train.py")]
    assert len(copies) == 2
    assert all(c.st_ino == staged.st_ino for c in copies)  # one file on disk, whatever the number of tasks
    assert not staged.st_mode & 0o222  # read-only
    assert (src / "train.py").read_text().startswith("print")  # the user's own file is untouched


def test_tony_clean_removes_finished_jobs_and_never_a_running_one(tony_home, tmp_path):
    old, recent = _submit(tmp_path), _submit(tmp_path)
    for h in (old, recent):
        assert h.wait(poll_interval=0.2, timeout=60).state == "SUCCEEDED"
    apps = tony_home / "local" / "apps"
    _age(apps / old.app_id, 8)
    running = _submit(tmp_path, "sleep 30")
    wait_for(lambda: running.status().state == "RUNNING", timeout=60)

    r = run_tony("clean", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert f"would remove {old.app_id}" in r.stdout and recent.app_id not in r.stdout
    assert (apps / old.app_id).is_dir()

    r = run_tony("clean")
    assert r.returncode == 0 and f"removed {old.app_id}" in r.stdout, r.stderr
    assert not (apps / old.app_id).exists() and (apps / recent.app_id).is_dir()

    r = run_tony("clean", running.app_id)
    assert r.returncode == 2 and f"{running.app_id} was not removed" in r.stderr and "not final" in r.stderr
    assert (apps / running.app_id).is_dir()

    r = run_tony("clean", "--older-than", "0s")
    assert r.returncode == 0 and f"removed {recent.app_id}" in r.stdout
    assert (apps / running.app_id).is_dir()  # still running: kept whatever its age
    running.kill()

    r = run_tony("clean", "--older-than", "a week")
    assert r.returncode == 2 and "not a duration" in r.stderr and "Traceback" not in r.stderr
    r = run_tony("clean", "application_1_../../x")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_expired_jobs_are_removed_when_the_next_one_is_submitted(tony_home, tmp_path, local_site):
    local_site({"tony.local.retention-sec": "3600"})
    first = _submit(tmp_path)
    assert first.wait(poll_interval=0.2, timeout=60).state == "SUCCEEDED"
    apps = tony_home / "local" / "apps"
    _age(apps / first.app_id, 1 / 24 + 0.01)  # just over an hour ago
    os.utime(tony_home / "local" / "last-clean", (0, 0))  # the last look was long ago
    second = _submit(tmp_path)
    assert not (apps / first.app_id).exists()
    assert second.wait(poll_interval=0.2, timeout=60).state == "SUCCEEDED"

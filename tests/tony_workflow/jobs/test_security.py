"""What a local job leaves at rest: nothing of it readable by another user of the machine."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from tony_workflow.client import TonyClient, load_job

pytestmark = pytest.mark.job

JOB = {"name": "private", "am": {"memory": "128m"}, "command": "echo done > out.txt",
       "tasks": {"worker": {"instances": 1, "memory": "256m"}},
       "env": {"API_KEY": "not-for-other-users"}, "conf": {"tony.task.tensorboard.enabled": "false"}}


def _other_user() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        return None


def _readable_by(user: pwd.struct_passwd, path) -> bool:
    """Whether ``user`` can open ``path``, asked of a process really running as that user."""
    # A system binary: this interpreter may live where that user cannot reach it.
    probe = subprocess.run([shutil.which("head") or "/usr/bin/head", "-c", "1", str(path)], user=user.pw_uid,
                           group=user.pw_gid, extra_groups=[], capture_output=True, cwd="/", check=False)
    return probe.returncode == 0


@pytest.fixture
def open_home(monkeypatch):
    """A TONY_HOME whose own directories anybody may pass through (pytest's tmp_path is private), so
    that only the modes the runtime gives a job's files stand between them and another user."""
    home = Path(tempfile.mkdtemp(prefix="tony-home-"))
    home.chmod(0o755)
    monkeypatch.setenv("TONY_HOME", str(home))
    yield home
    shutil.rmtree(home, ignore_errors=True)


def test_a_jobs_files_are_its_owners_alone(open_home):
    tony_home = open_home
    handle = TonyClient("local").submit(load_job(JOB))
    status = handle.wait(poll_interval=0.2, timeout=120)
    assert status.state == "SUCCEEDED"
    app_dir = tony_home / "local" / "apps" / handle.app_id
    container = next((app_dir / "containers").iterdir())
    secret_files = [app_dir / name for name in ("spec.json", "status.json", "am.secret", "am.json", "events.jsonl",
                                                "am.stdout", "am.stderr")]
    assert "not-for-other-users" in (app_dir / "spec.json").read_text()  # the job's env is in its spec
    assert stat.S_IMODE(app_dir.stat().st_mode) == 0o700
    for path in [*secret_files, container / "stdout", container / "out.txt"]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path.name} is {oct(mode)}"
    for path in (container, app_dir / "containers"):
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path

    other = _other_user()
    if other is None:
        pytest.skip("the modes are checked; reading as another user needs root and a 'nobody' account")
    # Even with the directories above opened up, the files themselves stay closed to others.
    for path in (tony_home / "local", tony_home / "local" / "apps", app_dir):
        path.chmod(0o755)
    try:
        for path in secret_files:
            assert not _readable_by(other, path), f"{other.pw_name} can read {path.name}"
        # The probe itself works: a file made for everyone is readable by the same user.
        public = app_dir / "public.txt"
        public.write_text("x")
        public.chmod(0o644)
        assert _readable_by(other, public)
    finally:
        app_dir.chmod(0o700)
    assert json.loads((app_dir / "am.json").read_text())["stopped"]


def _task_env(home: Path, job: dict) -> dict[str, str]:
    handle = TonyClient("local").submit(load_job(job))
    assert handle.wait(poll_interval=0.2, timeout=120).state == "SUCCEEDED"
    container = next((home / "local" / "apps" / handle.app_id / "containers").iterdir())
    lines = (container / "env.txt").read_text().split("\0")
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_a_task_sees_only_the_whitelist_and_what_the_job_declares(open_home, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", "postgres://etl:hunter2@db/warehouse")
    monkeypatch.setenv("TONY_SITE_FLAVOUR", "vanilla")
    env = _task_env(open_home, {**JOB, "command": "env -0 > env.txt", "shell_env": {"EPOCHS": "3"}})
    assert "AIRFLOW_CONN_WAREHOUSE" not in env
    assert "hunter2" not in "".join(env.values())
    assert env["API_KEY"] == "not-for-other-users" and env["EPOCHS"] == "3"  # what the job declares
    assert env["TONY_SITE_FLAVOUR"] == "vanilla" and env["PATH"] and env["HOME"]  # the whitelist
    assert env["TF_CONFIG"] and env["TASK_INDEX"] == "0"  # and what the runtime sets


def test_the_whitelist_is_the_sites_to_configure(open_home, monkeypatch, tmp_path):
    (tmp_path / "tony-site.xml").write_text(
        "<configuration><property><name>tony.local.env-whitelist</name><value>PATH,MY_TEAM_*</value></property>"
        "</configuration>")
    monkeypatch.setenv("TONY_CONF_DIR", str(tmp_path))
    monkeypatch.setenv("MY_TEAM_BUCKET", "gs://team")
    monkeypatch.setenv("OTHER_THING", "x")
    env = _task_env(open_home, {**JOB, "command": "env -0 > env.txt"})
    assert env["MY_TEAM_BUCKET"] == "gs://team"
    assert "OTHER_THING" not in env and "HOME" not in env


def test_a_recorded_pid_is_signalled_only_while_its_start_time_matches(tony_home):
    from tony_workflow import process

    handle = TonyClient("local").submit(load_job({**JOB, "command": "true"}))
    assert handle.wait(poll_interval=0.2, timeout=120).state == "SUCCEEDED"
    app_dir = tony_home / "local" / "apps" / handle.app_id
    # Another process now holds the pid the records name: as if the pids had been handed out again.
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        am = json.loads((app_dir / "am.json").read_text())
        am.update(pid=stranger.pid, stopped=False)  # its recorded start time stays the AM's
        (app_dir / "am.json").write_text(json.dumps(am))
        container = next((app_dir / "containers").iterdir())
        (container / "pid").write_text(str(stranger.pid))
        assert float((container / "started").read_text()) != process.start_time(stranger.pid)
        assert handle.backend.endpoint(handle.app_id) is None  # not the AM: its start time differs
        handle.backend.force_kill(handle.app_id)
        assert stranger.poll() is None, "a process that merely reused a job's pid was signalled"
        # With its own start time recorded, the same process is the job's, and is killed.
        (container / "started").write_text(repr(process.start_time(stranger.pid)))
        handle.backend.force_kill(handle.app_id)
        assert stranger.wait(timeout=10) is not None
    finally:
        if stranger.poll() is None:
            stranger.kill()

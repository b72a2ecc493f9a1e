"""The plugin folder install-plugin writes, and the command it gives Azkaban."""
from __future__ import annotations

import subprocess
import sys
import venv

import pytest

from azkaban_jobtype.plugin import JOBTYPE_CLASS, install_plugin, runner_command
from azkaban_jobtype.props import load_properties
from tony_workflow.spec import SpecError

from .conftest import partition_command_line, run_cli


def test_both_job_types_are_written(tmp_path):
    written = install_plugin(tmp_path / "jobtypes", env={"TONY_HOME": "/var/lib/tony", "TONY_BACKEND": "local"})
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == [
        "jobtypes/TensorFlowJob/plugin.properties", "jobtypes/TensorFlowJob/private.properties",
        "jobtypes/TensorFlowJob/reattach.key",
        "jobtypes/TonyJob/plugin.properties", "jobtypes/TonyJob/private.properties", "jobtypes/TonyJob/reattach.key"]
    keys = set()
    for job_type in ("TensorFlowJob", "TonyJob"):
        folder = tmp_path / "jobtypes" / job_type
        assert load_properties(folder / "private.properties").flatten() == {"jobtype.class": JOBTYPE_CLASS}
        assert load_properties(folder / "plugin.properties").flatten() == {
            "command": f"{sys.executable} -m azkaban_jobtype", "env.TONY_REATTACH_KEY_FILE": str(folder / "reattach.key"),
            "env.TONY_HOME": "/var/lib/tony", "env.TONY_BACKEND": "local"}
        assert (folder / "plugin.properties").read_bytes().isascii()
        # The executor's key, its user's alone: one for both types (a job's attempts may differ in type).
        assert (folder / "reattach.key").stat().st_mode & 0o777 == 0o600
        keys.add((folder / "reattach.key").read_text())
    assert len(keys) == 1 and len(keys.pop().strip()) == 64
    assert JOBTYPE_CLASS == "azkaban.jobExecutor.ProcessJob"


def test_the_command_starts_the_runner_once_split_as_azkaban_splits_it(tmp_path):
    install_plugin(tmp_path)
    command = load_properties(tmp_path / "TonyJob" / "plugin.properties")["command"]
    argv = partition_command_line(command)
    assert argv == [sys.executable, "-m", "azkaban_jobtype"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path,
                       env={"PATH": "/usr/bin:/bin"}, check=False)
    # started outside Azkaban, the runner explains what it needs rather than failing obscurely
    assert r.returncode == 2 and "JOB_PROP_FILE is not set" in r.stdout


def test_an_executor_that_proxies_says_so_to_its_jobs(tmp_path):
    install_plugin(tmp_path, proxy=True)
    assert load_properties(tmp_path / "TonyJob" / "plugin.properties")["azkaban.should.proxy"] == "true"
    install_plugin(tmp_path)
    assert "azkaban.should.proxy" not in load_properties(tmp_path / "TonyJob" / "plugin.properties")


def test_an_interpreter_path_with_spaces_is_quoted():
    command = runner_command("/opt/my tools/bin/python3")
    assert command == '"/opt/my tools/bin/python3" -m azkaban_jobtype'
    assert partition_command_line(command) == ["/opt/my tools/bin/python3", "-m", "azkaban_jobtype"]
    with pytest.raises(SpecError, match="must not contain quote characters"):
        runner_command("/opt/it's/python")


def test_reinstalling_updates_the_files_and_keeps_the_rest(tmp_path):
    install_plugin(tmp_path, env={"TONY_HOME": "/old"})
    (tmp_path / "TonyJob" / "extra.jar").write_bytes(b"PK")
    key = (tmp_path / "TonyJob" / "reattach.key").read_text()
    install_plugin(tmp_path)
    assert "env.TONY_HOME" not in load_properties(tmp_path / "TonyJob" / "plugin.properties")
    assert (tmp_path / "TonyJob" / "extra.jar").read_bytes() == b"PK"
    # The key stays: jobs named by it before are still found by their next attempts.
    assert (tmp_path / "TonyJob" / "reattach.key").read_text() == key


def test_an_interpreter_that_cannot_run_the_runner_is_refused(tmp_path):
    with pytest.raises(SpecError, match="must be an executable Python interpreter"):
        install_plugin(tmp_path / "p", python=str(tmp_path / "nope"))
    bare = tmp_path / "bare-venv"
    venv.create(bare, with_pip=False)
    with pytest.raises(SpecError, match="cannot import azkaban_jobtype"):
        install_plugin(tmp_path / "p", python=str(bare / "bin" / "python"))
    assert not (tmp_path / "p").exists()
    with pytest.raises(SpecError, match="must be an environment variable name"):
        install_plugin(tmp_path / "p", env={"NOT-A-NAME": "x"})


def test_the_command_line(tmp_path):
    r = run_cli("install-plugin", str(tmp_path / "jobtypes"), "--env", "TONY_HOME=/srv/tony")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].endswith("/private.properties")
    assert load_properties(tmp_path / "jobtypes" / "TensorFlowJob" / "plugin.properties")["env.TONY_HOME"] == \
        "/srv/tony"
    r = run_cli("install-plugin", str(tmp_path / "x"), "--env", "NOEQUALS")
    assert r.returncode == 2 and r.stderr.strip() == "error: --env: must be NAME=VALUE (got 'NOEQUALS')"
    r = run_cli("install-plugin", str(tmp_path / "x"), "--python", str(tmp_path / "missing"))
    assert r.returncode == 2 and "--python: must be an executable Python interpreter" in r.stderr
    assert "Traceback" not in r.stderr

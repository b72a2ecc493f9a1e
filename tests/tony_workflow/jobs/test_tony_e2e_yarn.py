"""A few of TonY's end-to-end cases (see test_tony_e2e.py) on the Hadoop mini cluster, where YARN
localizes the resources and the source: TonY's resource forms with an HDFS directory among them
(``libPath`` in TonY's test), its ``python_venv`` zip, and an untracked PS that fails the job."""
from __future__ import annotations

import pytest

from tests.tony_workflow.jobs.test_tony_e2e import RESOURCES, SCRIPTS, VENV, src, tony
from tony_workflow.status import TaskState
from tony_workflow.storage import open_storage

pytestmark = pytest.mark.yarn

SMALL = ["--conf", "tony.am.memory=512m", "--conf", "tony.worker.memory=512m", "--conf", "tony.ps.memory=512m"]


@pytest.fixture(scope="module")
def lib_path(yarn_cluster):
    """TonY's libPath: an HDFS directory of files (and one nested directory, which is not given)."""
    from tony_workflow.client import TonyClient
    store = open_storage("hdfs:///", **TonyClient("yarn").backend.store_options())
    for name in ("one.jar", "two.jar", "nested/three.jar"):
        store.put(RESOURCES / "common.zip", f"tony-e2e/yarn/lib/{name}")
    return "hdfs:///tony-e2e/yarn/lib"


def test_testTonyResourcesFlag_with_an_hdfs_directory(lib_path):
    resources = (f"{RESOURCES / 'test.zip'}::test20.zip,{RESOURCES / 'test2.zip'}#archive,"
                 f",{RESOURCES / 'common.zip'},{lib_path}")
    # TonY's script, then what TonY's test leaves unchecked: the directory's own files, not its nested one.
    check = "python check_archive_file_localization.py && test -f one.jar && test -f two.jar && test ! -e three.jar"
    out = tony("--executes", "python check_archive_file_localization.py", "--src_dir", str(SCRIPTS),
               "--conf", "tony.worker.instances=1", "--conf", f"tony.worker.resources={resources}",
               "--conf", f"tony.worker.command={check}", "--conf", "tony.ps.instances=0", *SMALL, backend="yarn")
    assert out.code == 0, out.status.diagnostics if out.status else out.refused


def test_testSingleNodeTrainingShouldPass(yarn_cluster):
    # In the AM's container, which YARN gave the job's source, common.zip and the venv as a task's.
    check = "python exit_0_check_env.py && test -f common.zip && test -f venv/123.xml"
    out = tony(*src("--executes", "exit_0_check_env.py", "--python_binary_path", "python", "--shell_env",
                    "ENV_CHECK=ENV_CHECK", "--python_venv", VENV, "--conf", f"tony.am.command={check}"),
               *SMALL, backend="yarn")
    assert out.code == 0, out.status.diagnostics if out.status else out.refused
    assert out.status.tasks == []


def test_testPSWorkerTrainingShouldPass(yarn_cluster):
    out = tony(*src("--executes", "python check_env_and_venv.py", "--shell_env", "ENV_CHECK=ENV_CHECK",
                    "--python_venv", VENV, "--conf", "tony.worker.instances=1"), *SMALL, backend="yarn")
    assert out.code == 0, out.status.diagnostics if out.status else out.refused


def test_testTonyPSCrashShouldFailAndStopAM(yarn_cluster):
    out = tony(*src("--shell_env", "ENV_CHECK=ENV_CHECK", "--python_venv", VENV, "--conf", "tony.ps.instances=1",
                    "--conf", "tony.worker.instances=1", "--conf", "tony.ps.command=python exit_1.py",
                    "--conf", "tony.worker.command=python sleep_30.py",
                    "--conf", "tony.application.untracked.jobtypes=ps"), *SMALL, backend="yarn")
    assert out.code == -1, out.status.diagnostics if out.status else out.refused
    assert out.task_states() == {"worker": TaskState.KILLED, "ps": TaskState.FAILED}


def test_a_python_venv_missing_from_hdfs_is_refused_before_anything_is_submitted(yarn_cluster):
    out = tony(*src("--executes", "python exit_0.py", "--python_venv", "hdfs:///tony-e2e/gone/venv.zip",
                    "--conf", "tony.worker.instances=1"), *SMALL, backend="yarn")
    assert out.code == -1 and out.status is None
    assert ("python_venv: is not a file of the cluster's file system (got 'hdfs:///tony-e2e/gone/venv.zip')"
            in out.refused)


def test_a_file_yarn_cannot_localize_is_named_in_the_jobs_diagnostics(lib_path):
    # The file is there when the job is submitted and gone when the worker's container is made: the
    # container never runs, and the task's diagnostics say what YARN said, not only an exit code.
    from tony_workflow.client import TonyClient
    store = open_storage("hdfs:///", **TonyClient("yarn").backend.store_options())
    store.put(RESOURCES / "common.zip", "tony-e2e/vanishing/data.zip")

    def vanish(handle):
        store.delete("tony-e2e/vanishing/data.zip")

    out = tony(*src("--executes", "python exit_0.py", "--conf", "tony.worker.instances=1",
                    "--conf", "tony.worker.resources=hdfs:///tony-e2e/vanishing/data.zip"), *SMALL,
               during=vanish, backend="yarn")
    assert out.code == -1 and out.task_states()["worker"] == TaskState.FAILED
    assert "The cluster said:" in out.status.diagnostics and "data.zip" in out.status.diagnostics, \
        out.status.diagnostics


def test_testTonyFinalConfWithNonExistentHDFSClasspath_on_hdfs(lib_path, capsys):
    # TonY's case with HDFS itself: the directory that is not there is left out, with a warning.
    from tony_workflow.client.cli import build_parser, submitted_spec
    args = build_parser().parse_args(["submit", "--executes", "ls", "--hdfs_classpath", "hdfs:///tony-e2e/no/such",
                                      "--hdfs_classpath", lib_path])
    assert submitted_spec(args).conf["tony.containers.resources"] == lib_path
    assert "--hdfs_classpath hdfs:///tony-e2e/no/such is not there: left out of the job" in capsys.readouterr().err

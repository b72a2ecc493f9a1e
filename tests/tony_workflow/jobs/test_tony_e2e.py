"""TonY's own end-to-end suite (``TestTonyE2E.java`` of tony-framework/TonY), case by case, on the
embedded cluster.

Each case gives ``tony submit`` TonY's flags as the Java test gives its client (``--src_dir``,
``--executes``, ``--python_venv``, ``--shell_env``, ``--container_env``, ``--conf``...), runs
TonY's own scripts and resources (``tests/tony_e2e``, BSD-2-Clause, LICENSE there), and ends as
TonY's test asserts: TonY's exit code 0 is a job that SUCCEEDED; its -1 a job that FAILED, or one
refused before anything ran (TonY's client returns -1 for both; ours says which). Where TonY's
test asserts the tasks' states, so does the case, in this project's names (TonY's FINISHED, a
task the AM stopped, is KILLED here).

As in TonY's test, every case also gives every container ``common.zip`` (tony.containers.resources).

What TonY's test drives through hooks built into its runtime (TEST_AM_CRASH,
TEST_TASK_EXECUTOR_SKEW, TEST_WORKER_TERMINATED...) is done here from outside, to the real
processes: the AM or a worker's container killed, a slow worker made slow by its command. Cases
that cannot exist here are listed in ``NOT_HERE`` with why.
"""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tests.conftest import app_processes, sleeper_job, wait_for
from tony_workflow.client import TonyClient, load_job
from tony_workflow.client.cli import build_parser, submitted_spec
from tony_workflow.errors import TonyError
from tony_workflow.status import TaskState

pytestmark = pytest.mark.job

E2E = Path(__file__).resolve().parents[2] / "tony_e2e"
SCRIPTS, RESOURCES = E2E / "scripts", E2E / "resources"
VENV = str(RESOURCES / "test.zip")  # TonY's python_venv: a zip holding 123.xml, not a virtualenv
# TonY's doBeforeMethod: every container of every case gets common.zip.
COMMON = ["--conf", f"tony.containers.resources={RESOURCES / 'common.zip'}"]

#: TonY's cases that test something that cannot exist here, and why.
NOT_HERE = {
    "testNullAMRpcClient": "a field of TonY's Java client (its RPC client set to null after the job)",
    "testAMThrowExceptionCrashTonYShouldFail": "an exception thrown inside TonY's Java AM by a test hook; an AM "
                                               "that dies is testAMCrashTonyShouldFail, done here by killing it",
    "testPSWorkerTrainingShouldFailMissedHeartbeat": "a hook that makes TonY's executor skip beats; an executor "
                                                     "that stops beating is tested by stopping it (test_deaths)",
    "testLostConnectionWithAMJobShouldFail": "disabled in TonY's own suite (enabled = false)",
}


class Outcome:
    """How a case ended: TonY's exit code (0 or -1), and the final status when the job ran."""

    def __init__(self, code: int, status=None, refused: str = ""):
        self.code, self.status, self.refused = code, status, refused

    def task_states(self) -> dict[str, str]:
        return {t.type: t.state for t in self.status.tasks} if self.status else {}


def tony(*argv: str, during=None, timeout: float = 180, backend: str = "local") -> Outcome:
    """Submits as ``tony submit`` would with TonY's ``argv`` (and common.zip), waits for the end,
    and says how it ended. ``during(handle)`` acts on the running job."""
    args = build_parser().parse_args(["submit", *argv, *COMMON])
    try:
        handle = TonyClient(backend).submit(submitted_spec(args))
    except TonyError as e:
        return Outcome(-1, refused=str(e))
    if during is not None:
        during(handle)
    status = handle.wait(timeout=timeout, poll_interval=0.2)
    # Nothing of the job outlives it (a NodeManager takes a moment to reap a container's processes).
    wait_for(lambda: not app_processes(handle.app_id), timeout=60, describe=lambda: app_processes(handle.app_id))
    return Outcome(0 if status.succeeded else -1, status)


def src(*argv: str) -> list[str]:
    return ["--src_dir", str(SCRIPTS), *argv]


def running_task(handle, task_id: str) -> int:
    """The pid of the executor of ``task_id`` once its user process runs."""
    def started():
        st = handle.status()
        task = next((t for t in st.tasks if t.task_id == task_id and t.state == TaskState.RUNNING), None)
        return task.pid if task and task.pid else None
    return wait_for(started, timeout=60, interval=0.1)


# -- what TonY's test asserts, case by case --------------------------------------------------------

def test_testSingleNodeTrainingShouldPass(tony_home):
    out = tony(*src("--executes", "exit_0_check_env.py", "--python_binary_path", "python", "--shell_env",
                    "ENV_CHECK=ENV_CHECK"))
    assert out.code == 0, out.status.diagnostics if out.status else out.refused
    # TonY's single node: the command ran in the ApplicationMaster's container, no task, no second container.
    assert out.status.tasks == []


def test_testSingleNodeTrainingShouldFail(tony_home):
    out = tony(*src("--executes", "exit_1.py", "--python_binary_path", "python"))
    assert out.code == -1 and "Single node job exited with 1" in out.status.diagnostics, out.status


def test_testTonyAMSchedulerShouldPass(tony_home):
    out = tony(*src("--executes", "exit_0.py", "--python_binary_path", "python",
                    "--conf", "tony.worker.instances=1", "--conf", "tony.ps.instances=1",
                    "--conf", "tony.db.instances=1", "--conf", "tony.dbloader.instances=1",
                    "--conf", "tony.application.prepare-stage=dbloader,db",
                    "--conf", "tony.application.training-stage=ps,worker"))
    assert out.code == 0, out.status.diagnostics if out.status else out.refused
    # What TonY's test leaves unsaid: the training stage's commands started once the prepare stage's ended.
    events = [json.loads(line) for line in
              (tony_home / "local" / "apps" / out.status.application_id / "events.jsonl").read_text().splitlines()]
    states = [(e["ts"], e["task"], e["state"]) for e in events if e["event"] == "task_state"]
    prepared = max(ts for ts, task, state in states if task.split(":")[0] in ("db", "dbloader") and state == "SUCCEEDED")
    trained = min(ts for ts, task, state in states if task.split(":")[0] in ("ps", "worker") and state == "RUNNING")
    assert prepared < trained


def test_testTonyHorovodShouldPass(tony_home):
    # Test mode: the driver task announces a port without a server (Horovod cannot be built here).
    out = tony(*src("--python_venv", VENV, "--executes", "python check_horovod_env.py",
                    "--conf", "tony.worker.instances=2", "--conf", "tony.horovod.mode.test=true",
                    "--conf", "tony.application.framework=horovod"))
    assert out.code == 0, out.status.diagnostics if out.status else out.refused
    assert out.task_states() == {"worker": TaskState.SUCCEEDED, "driver": TaskState.KILLED}


def test_testTonyHorovodWithDebugModeShouldPass(tony_home):
    # The job's own driver (TonY's horovod_debug_driver.py) writes the port file the workers wait for.
    out = tony(*src("--python_venv", VENV, "--executes", "python check_horovod_env.py", "--conf",
                    "tony.application.framework=horovod", "--conf", "tony.horovod.mode.test=true", "--conf",
                    "tony.horovod.driver.mode.debug=true", "--conf", "tony.worker.instances=2", "--conf",
                    "tony.driver.instances=1", "--conf", "tony.driver.vcores=1", "--conf",
                    "tony.application.untracked.jobtypes=driver", "--conf",
                    "tony.driver.command=python horovod_debug_driver.py -t -p 9999"))
    assert out.code == 0, out.status.diagnostics if out.status else out.refused


def test_testTonyHorovodDriverCrashShouldFailAndStopAM(tony_home):
    out = tony(*src("--python_venv", VENV, "--conf", "tony.worker.instances=1", "--conf",
                    "tony.worker.command=python sleep_30.py", "--conf", "tony.horovod.mode.test.fast.fail=true",
                    "--conf", "tony.application.framework=horovod"))
    assert out.code == -1 and out.task_states()["driver"] == TaskState.FAILED, out.status


def test_testPSSkewedWorkerTrainingShouldPass(tony_home):
    # TonY's hook holds worker 0 back 30 s; here its command does (5 s), the others go on.
    skewed = '[ "$JOB_NAME:$TASK_INDEX" = worker:0 ] && sleep 5; python exit_0_check_env.py'
    out = tony(*src("--executes", "exit_0_check_env.py", "--python_binary_path", "python", "--shell_env",
                    "ENV_CHECK=ENV_CHECK", "--conf", "tony.ps.instances=1", "--conf", "tony.worker.instances=2",
                    "--conf", f"tony.worker.command={skewed}"))
    assert out.code == 0, out.status.diagnostics if out.status else out.refused


def test_testPSWorkerTrainingShouldPass(tony_home):
    out = tony(*src("--executes", "python check_env_and_venv.py", "--shell_env", "ENV_CHECK=ENV_CHECK",
                    "--python_venv", VENV, "--conf", "tony.worker.instances=1"))
    assert out.code == 0, out.status.diagnostics if out.status else out.refused


def test_testWorkerTrainingPyTorchShouldPass(tony_home):
    out = tony(*src("--executes", "exit_0_check_pytorchenv.py", "--python_binary_path", "python", "--shell_env",
                    "ENV_CHECK=ENV_CHECK", "--conf", "tony.application.framework=pytorch",
                    "--conf", "tony.ps.instances=0", "--conf", "tony.worker.instances=2"))
    assert out.code == 0, out.status.diagnostics if out.status else out.refused


@pytest.mark.parametrize("case", ["testPSWorkerTrainingShouldFail", "testNonChiefWorkerFail"])
def test_a_failing_worker_fails_the_job(tony_home, case):
    out = tony(*src("--executes", "exit_1.py", "--python_binary_path", "python",
                    "--conf", "tony.ps.instances=1", "--conf", "tony.worker.instances=1"))
    # Both types run exit_1.py: whichever ends first fails the job (TonY asserts the exit code only).
    assert out.code == -1 and TaskState.FAILED in out.task_states().values(), out.status


def test_testAMCrashTonyShouldFail(tony_home):
    # TonY's hook crashes its AM, which YARN starts once for TonY; here the AM's process is killed,
    # with one attempt allowed.
    def crash(handle):
        running_task(handle, "worker:0")
        am = json.loads((tony_home / "local" / "apps" / handle.app_id / "am.json").read_text())["pid"]
        os.kill(am, signal.SIGKILL)

    out = tony(*src("--executes", "sleep_30.py", "--python_binary_path", "python",
                    "--conf", "tony.worker.instances=1", "--conf", "tony.am.max-attempts=1"), during=crash)
    assert out.code == -1, out.status.diagnostics if out.status else out.refused


def test_testAMStopsJobAfterWorker0Killed(tony_home):
    # TonY's hook stands for a worker killed by the kernel for its memory; here worker 0's container
    # (executor and script) is killed. TonY's exit_0.py ends within a second, so the case runs sleep_30.py.
    def kill_worker(handle):
        pid = running_task(handle, "worker:0")
        os.killpg(os.getpgid(pid), signal.SIGKILL)

    out = tony(*src("--executes", "sleep_30.py", "--python_binary_path", "python", "--conf",
                    "tony.worker.instances=1"), during=kill_worker)
    assert out.code == -1 and out.task_states()["worker"] == TaskState.FAILED, out.status


def test_testTonyResourcesFlag(tony_home):
    # TonY's list as written, the empty entry too; its HDFS directory is the mini cluster case's.
    resources = (f"{RESOURCES / 'test.zip'}::test20.zip,{RESOURCES / 'test2.zip'}#archive,"
                 f",{RESOURCES / 'common.zip'},")
    out = tony("--executes", "python check_archive_file_localization.py", "--src_dir", str(SCRIPTS),
               "--conf", "tony.worker.instances=1", "--conf", f"tony.worker.resources={resources}",
               "--conf", "tony.ps.instances=0")
    assert out.code == 0, out.status.diagnostics if out.status else out.refused


def test_testTensorBoardPortSetOnlyOnChiefWorker(tony_home):
    out = tony(*src("--executes", "python check_tb_port_set_in_chief_only.py", "--conf", "tony.chief.instances=1",
                    "--conf", "tony.ps.instances=1", "--conf", "tony.worker.instances=1"))
    assert out.code == 0, out.status.diagnostics if out.status else out.refused


def test_testStandaloneRuntimeModeShouldPass(tony_home):
    out = tony(*src("--executes", "exit_0.py", "--python_binary_path", "python", "--conf",
                    "tony.application.framework=standalone", "--conf", "tony.worker.instances=1"))
    assert out.code == 0, out.status.diagnostics if out.status else out.refused


def test_testStandaloneRuntimeWithMultiInstancesShouldFail(tony_home):
    out = tony(*src("--executes", "exit_0.py", "--python_binary_path", "python", "--conf",
                    "tony.application.framework=standalone", "--conf", "tony.worker.instances=1",
                    "--conf", "tony.slave.instances=1"))
    assert out.code == -1 and "standalone" in out.refused, out.refused


def test_testTaskCompletionNotificationDelayed(tony_home):
    # TonY's hook delays the ResourceManager's word that the container ended; the job must still
    # pass with beats every 100 ms and 5 missed allowed. Here no word is delayed: the keys are.
    out = tony(*src("--executes", "exit_0.py", "--python_binary_path", "python", "--conf", "tony.ps.instances=0",
                    "--conf", "tony.worker.instances=1", "--conf", "tony.task.heartbeat-interval-ms=100",
                    "--conf", "tony.task.max-missed-heartbeats=5"))
    assert out.code == 0, out.status.diagnostics if out.status else out.refused


def test_testTonyClientCallbackHandler(tony_home):
    out = tony(*src("--shell_env", "ENV_CHECK=ENV_CHECK", "--python_venv", VENV, "--conf", "tony.ps.instances=1",
                    "--conf", "tony.worker.instances=1", "--conf", "tony.ps.command=python sleep_30.py",
                    "--conf", "tony.worker.command=python check_env_and_venv.py"))
    assert out.code == 0, out.status.diagnostics if out.status else out.refused
    # The worker succeeded; the PS, untracked, was stopped by the AM when the worker ended.
    assert out.task_states() == {"worker": TaskState.SUCCEEDED, "ps": TaskState.KILLED}


def test_testTonyPSCrashShouldFailAndStopAM(tony_home):
    out = tony(*src("--shell_env", "ENV_CHECK=ENV_CHECK", "--python_venv", VENV, "--conf", "tony.ps.instances=1",
                    "--conf", "tony.worker.instances=1", "--conf", "tony.ps.command=python exit_1.py",
                    "--conf", "tony.worker.command=python sleep_30.py",
                    "--conf", "tony.application.untracked.jobtypes=ps"))
    assert out.code == -1, out.status.diagnostics if out.status else out.refused
    assert out.task_states() == {"worker": TaskState.KILLED, "ps": TaskState.FAILED}


def test_testTonySidecarExecutorCrashShouldPass(tony_home):
    out = tony(*src("--shell_env", "ENV_CHECK=ENV_CHECK", "--python_venv", VENV,
                    "--conf", "tony.sidecarexecutor.instances=1", "--conf", "tony.worker.instances=1",
                    "--conf", "tony.sidecarexecutor.command=python exit_1.py",
                    "--conf", "tony.worker.command=python sleep_30.py",
                    "--conf", "tony.application.sidecar.jobtypes=sidecarexecutor"))
    assert out.code == 0, out.status.diagnostics if out.status else out.refused
    assert out.task_states() == {"worker": TaskState.SUCCEEDED, "sidecarexecutor": TaskState.FAILED}


def test_testTonyAllocationTimeoutShouldFail(tony_home):
    # Ten thousand workers of 2 GB: TonY waits a second for them and fails; here the cluster's size
    # says at once that they can never fit, and nothing is submitted.
    out = tony(*src("--executes", "python check_env_and_venv.py", "--shell_env", "ENV_CHECK=ENV_CHECK",
                    "--python_venv", VENV, "--conf", "tony.worker.instances=10000", "--conf", "tony.worker.memory=2g",
                    "--conf", "tony.container.allocation.timeout=1000"))
    assert out.code == -1 and out.refused, out.status


def test_testAttachedTensorboardShouldPass(tony_home, tmp_path):
    out = tony(*src("--python_venv", VENV, "--executes", "python check_tb_port_no_set_in_chief.py",
                    "--conf", "tony.chief.instances=1", "--conf", "tony.ps.instances=1",
                    "--conf", "tony.worker.instances=2", "--sidecar_tensorboard_log_dir", str(tmp_path),
                    "--conf", "tony.application.framework=tensorflow"))
    assert out.code == 0, out.status.diagnostics if out.status else out.refused


@pytest.mark.parametrize("case, conf, code", [
    ("testGroupDependencyTimeoutShouldPass", [], -1),
    ("testTaskWithDependencyTimeoutButIgnoredShouldPass",
     ["tony.application.dependency.worker.timeout.after.A.ignored=true"], 0),
    ("testTaskWithDependencyTimeoutButIgnoredAndWithPSShouldPass",
     ["tony.application.dependency.worker.timeout.after.A.ignored=true", "tony.ps.instances=1",
      "tony.ps.command=python forever_not_exit.py"], 0),
])
def test_group_dependency_timeouts(tony_home, case, conf, code):
    extra = [a for c in conf for a in ("--conf", c)]
    out = tony(*src("--python_venv", VENV, "--executes", "python exit_0.py", "--conf", "tony.chief.instances=1",
                    "--conf", "tony.worker.instances=2", "--conf", "tony.worker.command=python forever_not_exit.py",
                    "--conf", "tony.application.framework=tensorflow", "--conf", "tony.application.group.A=chief",
                    "--conf", "tony.application.dependency.worker.timeout.after.A=10", *extra))
    assert out.code == code, out.status


def test_testTaskWithDependencyTimeAndIgnoredButFailedShouldPass(tony_home):
    out = tony(*src("--python_venv", VENV, "--executes", "python exit_0.py", "--conf", "tony.chief.instances=1",
                    "--conf", "tony.worker.instances=2", "--conf", "tony.worker.command=python sleep_10_and_exit_1.py",
                    "--conf", "tony.evaluator.instances=1", "--conf", "tony.evaluator.command=python sleep_30.py",
                    "--conf", "tony.application.framework=tensorflow", "--conf", "tony.application.group.A=chief",
                    "--conf", "tony.application.dependency.worker.timeout.after.A=5",
                    "--conf", "tony.application.dependency.worker.timeout.after.A.ignored=true",
                    "--conf", "tony.application.stop-on-failure-jobtypes=worker"))
    assert out.code == -1, out.status.diagnostics if out.status else out.refused


def test_testTonyFinalConf(tony_home):
    # TonY writes the job's final configuration to a file and reads it back; here the job's spec is it.
    args = build_parser().parse_args(["submit", "--executes", "ls", "--shell_env", "TEST1=test", "--container_env",
                                      "TEST2=test", "--conf", "tony.worker.command=cat", "--conf",
                                      f"tony.containers.resources={RESOURCES / 'test.zip'}", *COMMON])
    spec = submitted_spec(args)
    assert spec.executes == "ls" and spec.shell_env == {"TEST1": "test"}
    assert spec.conf["tony.containers.envs"] == "TEST2=test" and spec.conf["tony.worker.command"] == "cat"
    # A list-valued key is appended to by the command line, not replaced.
    assert "test.zip" in spec.conf["tony.containers.resources"] and "common.zip" in spec.conf["tony.containers.resources"]


def test_testTonyFinalConfWithNonExistentHDFSClasspath(tony_home, tmp_path, capsys):
    # TonY's client leaves out a --hdfs_classpath entry that is not there, with a warning, and keeps
    # the rest (with no cluster file system beside it, a path is the machine's).
    there = tmp_path / "libs"
    there.mkdir()
    (there / "lib.py").write_text("")
    missing = tmp_path / "no" / "such"
    args = build_parser().parse_args(["submit", "--executes", "ls", "--hdfs_classpath", str(missing),
                                      "--hdfs_classpath", str(there), *COMMON])
    spec = submitted_spec(args)
    resources = spec.conf["tony.containers.resources"].split(",")
    assert str(there) in resources and str(missing) not in resources and any("common.zip" in r for r in resources)
    assert f"--hdfs_classpath {missing} is not there: left out of the job" in capsys.readouterr().err


def test_testTonyAMStartupTimeoutShouldFail(tony_home, local_site):
    # TonY keeps its AM from starting with a hook of its client. Here a full cluster does: the AM's
    # container comes with the job's first gang, and a 3 GB job holds 3.5 GB of the 4 GB the
    # cluster has. Past tony.am.startup-timeout the job fails, as TonY's client kills it.
    local_site({"tony.local.memory": "4g"})
    blocker = TonyClient("local").submit(load_job(sleeper_job("blocker", memory="3g", seconds=120)))
    try:
        wait_for(lambda: blocker.status().state == "RUNNING", timeout=60)
        out = tony(*src("--executes", "python check_env_and_venv.py", "--shell_env", "ENV_CHECK=ENV_CHECK",
                        "--python_venv", VENV, "--conf", "tony.worker.instances=1", "--conf", "tony.am.memory=2g",
                        "--conf", "tony.am.startup-timeout=10000"))
    finally:
        blocker.kill()
    assert out.code == -1, out.refused
    assert "did not start within 10000 ms (tony.am.startup-timeout)" in out.status.diagnostics, out.status.diagnostics


def test_every_case_of_tonys_suite_is_accounted_for():
    """Every @Test of TonY's TestTonyE2E is a case above, or said not to exist here, by name."""
    cases = {
        "testSingleNodeTrainingShouldPass", "testPSWorkerTrainingShouldFailMissedHeartbeat",
        "testPSSkewedWorkerTrainingShouldPass", "testPSWorkerTrainingShouldPass", "testWorkerTrainingPyTorchShouldPass",
        "testPSWorkerTrainingShouldFail", "testSingleNodeTrainingShouldFail", "testAMCrashTonyShouldFail",
        "testAMThrowExceptionCrashTonYShouldFail", "testTonyAMSchedulerShouldPass", "testAMStopsJobAfterWorker0Killed",
        "testNullAMRpcClient", "testNonChiefWorkerFail", "testTonyResourcesFlag",
        "testTensorBoardPortSetOnlyOnChiefWorker", "testStandaloneRuntimeModeShouldPass",
        "testStandaloneRuntimeWithMultiInstancesShouldFail", "testTaskCompletionNotificationDelayed",
        "testTonyClientCallbackHandler", "testTonyPSCrashShouldFailAndStopAM", "testTonySidecarExecutorCrashShouldPass",
        "testTonyHorovodDriverCrashShouldFailAndStopAM", "testTonyHorovodShouldPass",
        "testTonyHorovodWithDebugModeShouldPass", "testTonyAllocationTimeoutShouldFail",
        "testTonyAMStartupTimeoutShouldFail", "testAttachedTensorboardShouldPass",
        "testGroupDependencyTimeoutShouldPass", "testTaskWithDependencyTimeoutButIgnoredShouldPass",
        "testTaskWithDependencyTimeoutButIgnoredAndWithPSShouldPass",
        "testTaskWithDependencyTimeAndIgnoredButFailedShouldPass", "testLostConnectionWithAMJobShouldFail",
        "testTonyFinalConf", "testTonyFinalConfWithNonExistentHDFSClasspath"}
    # The cases above this test: a function of its own, or an entry of a parametrized one.
    source = Path(__file__).read_text().split("def test_every_case_of_tonys_suite_is_accounted_for")[0]
    translated = {c for c in cases if f"def test_{c}(" in source or any(f"{a}{c}{b}" in source
                                                                         for a, b in (('("', '"'), ('["', '"'), ('"', '"]')))}
    assert cases == translated | set(NOT_HERE) and not translated & set(NOT_HERE)
    assert len(translated) == 30

"""Shared test fixtures: an isolated TONY_HOME per test, and cleanup of anything left running."""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]

# The tony commands the tests run keep no skein driver for a next command: a detached driver
# would outlive the test's cluster by its idle time. The detached driver's own test sets its own.
os.environ.setdefault("TONY_DRIVER_IDLE_S", "0")
# skein's certificate and the drivers' records: one directory for the run. The runtime's default,
# $TONY_HOME/skein, would be whichever test's home was set when a worker first loaded skein.
os.environ.setdefault("SKEIN_CONFIG", str(Path(tempfile.gettempdir()) / f"tony-tests-skein-{os.getuid()}"))


def shared_dir() -> Path:
    return Path(os.environ.get("TONY_SHARED_DIR") or REPO.parent / "shared")


# A test module is handed to one worker whole (`--dist loadfile`), in the order collected, so the
# longest go first and the short ones fill in the gaps at the end, rather than a long module
# starting last. How long: what the modules of 40 s or more took in a fresh-clone run of the suite
# on a 2-core machine (the junit report's seconds, setup included); any other module, roughly
# what one test of each kind costs. Only the order depends on these figures.
_MEASURED = {
    "tests/tony_workflow/jobs/test_yarn_nodes.py": 501,
    "tests/tony_workflow/jobs/test_yarn_reclaim.py": 475,
    "tests/tony_workflow/jobs/test_elastic_jobs.py": 308,
    "tests/tony_workflow/jobs/test_yarn_gangs.py": 306,
    "tests/tony_workflow/jobs/test_framework_jobs.py": 304,
    "tests/tony_workflow/jobs/test_elastic_checkpoints.py": 300,
    "tests/tony_workflow/jobs/test_yarn_kerberos.py": 294,
    "tests/tony_workflow/jobs/test_tf_examples.py": 219,
    "tests/tony_workflow/jobs/test_yarn_backend.py": 211,
    "tests/tony_workflow/jobs/test_data_jobs.py": 187,
    "tests/tony_workflow/jobs/test_tony_e2e.py": 180,
    "tests/airflow_provider/test_operators.py": 178,
    "tests/tony_workflow/test_advice.py": 161,
    "tests/tony_workflow/minicluster/test_cluster.py": 146,
    "tests/tony_workflow/jobs/test_yarn_production.py": 124,
    "tests/azkaban_jobtype/test_runner.py": 124,
    "tests/airflow_provider/test_task_lifecycle.py": 118,
    "tests/tony_workflow/jobs/test_runtime.py": 102,
    "tests/tony_workflow/jobs/test_deaths.py": 102,
    "tests/tony_workflow/data/test_hdfs.py": 101,
    "tests/bench/test_bench_smoke.py": 91,
    "tests/tony_workflow/test_keras.py": 75,
    "tests/airflow_provider/test_assets.py": 72,
    "tests/tony_workflow/jobs/test_tony_e2e_yarn.py": 70,
    "tests/tony_workflow/minicluster/test_secure.py": 63,
    "tests/airflow_provider/test_lineage.py": 63,
    "tests/tony_workflow/task/test_torch_elastic.py": 54,
    "tests/tony_workflow/backends/yarn/test_driver.py": 48,
    "tests/airflow_provider/test_plugin.py": 48,
    "tests/azkaban_jobtype/test_azkaban_classes.py": 47,
    "tests/airflow_provider/test_ui.py": 47,
    "tests/tony_workflow/backends/yarn/test_am.py": 43,
}
_COST = {"yarn": 30.0, "frameworks": 25.0, "tf": 12.0, "azkaban": 8.0, "job": 3.0}


def _cost(item: pytest.Item) -> float:
    return max((_COST[m.name] for m in item.iter_markers() if m.name in _COST), default=0.05)


def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):  # only where xdist's workers collect
        return
    modules: dict[Path, float] = {}
    for item in items:
        modules[item.path] = modules.get(item.path, 0.0) + _cost(item)
    for path, estimate in modules.items():
        with contextlib.suppress(ValueError):  # a module outside the repository keeps its estimate
            modules[path] = _MEASURED.get(path.relative_to(REPO).as_posix(), estimate)
    items.sort(key=lambda item: -modules[item.path])  # stable: a module keeps its order


@pytest.fixture
def tony_home(tmp_path, monkeypatch):
    home = tmp_path / "tony-home"
    monkeypatch.setenv("TONY_HOME", str(home))
    monkeypatch.delenv("TONY_CONF_DIR", raising=False)
    yield home
    # Nothing a test started may outlive it: kill AMs and containers still around. Only the very
    # processes recorded: a pid alone may by now name another process (pids wrap around at 32768
    # here), such as another test process's mini cluster.
    from tony_workflow.process import kill_tree
    for am_json in [*home.glob("local/apps/*/supervisor.json"), *home.glob("local/apps/*/am.json")]:
        try:
            info = json.loads(am_json.read_text())
            kill_tree(int(info["pid"]), 0.0, started=info.get("started"), group=False)
        except (ValueError, KeyError, OSError):
            pass
    for pid_file in home.glob("local/apps/*/containers/*/pid"):
        try:
            started = float(pid_file.with_name("started").read_text())
            kill_tree(int(pid_file.read_text()), 0.0, started=started, group=False)
        except (ValueError, OSError):
            pass


@pytest.fixture
def local_site(tmp_path, monkeypatch):
    """Writes the local cluster's site configuration: ``local_site({"tony.local.memory": "1g"})``
    puts those keys in a ``tony-site.xml`` of a fresh ``TONY_CONF_DIR``, where the machine's size
    and its other settings come from (a job may not set them). Returns the conf directory."""
    from tony_workflow.hadoop import site_xml

    def write(props: dict) -> Path:
        conf_dir = tmp_path / "tony-conf"
        conf_dir.mkdir(exist_ok=True)
        (conf_dir / "tony-site.xml").write_text(site_xml(props))
        monkeypatch.setenv("TONY_CONF_DIR", str(conf_dir))
        return conf_dir
    return write


def run_tony(*args: str, timeout: float = 600, env: dict | None = None, cwd: Path | None = None):
    """Runs the real ``tony`` command line in a subprocess."""
    return subprocess.run([sys.executable, "-m", "tony_workflow.client.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd or REPO, check=False)


def wait_for(pred, timeout: float = 120.0, interval: float = 0.2, describe=None):
    """Polls ``pred`` until it returns something truthy, and returns that; fails after ``timeout``,
    saying what ``describe()`` says of the state it was left in, when given."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s" + (f": {describe()}" if describe else ""))


def minicluster_missing() -> str | None:
    """Why the Hadoop mini cluster cannot run here (no JDK 17, or no Maven and no cached jars), or None."""
    from tony_workflow import minicluster
    try:
        minicluster.find_java()
    except minicluster.MiniClusterError as e:
        return str(e)
    if not (minicluster.hadoop_lib_dir() / ".tony-pom-sha256").exists() and not shutil.which("mvn"):
        return "no Maven to fetch the Hadoop jars, and no jars cached"
    return None


# How long the tests give a mini cluster's daemons to come up: far more than they need on an idle
# machine (about 40 s), for a machine the rest of the suite keeps busy.
START_TIMEOUT = 420.0


@contextlib.contextmanager
def own_minicluster(directory: Path, **options) -> Iterator[dict]:
    """A mini cluster of a test module's own (``options`` as :func:`tony_workflow.minicluster.start`
    takes them) with its client environment set; stopped, with the environment restored, after."""
    from tony_workflow import minicluster
    from tony_workflow.backends.yarn.driver import close_drivers

    info = minicluster.start(directory, **{"timeout": START_TIMEOUT, "gpus_per_nm": 4, **options})
    saved = dict(os.environ)
    os.environ.update(minicluster.client_env(info))
    try:
        yield info
    finally:
        close_drivers(info["rm_address"])  # the session's shared cluster keeps its own
        os.environ.clear()
        os.environ.update(saved)
        minicluster.stop(directory)


#: The session's shared mini cluster: four stand-in GPUs (the machine has none; the GPU scheduling
#: tests ask for them), and room for the jobs of every test process at once.
SESSION_CLUSTER = {"gpus_per_nm": 4, "nm_memory_mb": 32768, "nm_vcores": 32}


@pytest.fixture(scope="session")
def hadoop_cluster(request, tmp_path_factory):
    """One real Hadoop 3.5 mini cluster (YARN + HDFS) shared by every test that needs one: under
    xdist, by every test process. The first to need it starts it, the others find it running (a
    lock between them), and the controlling process stops it once every test process is done
    (:func:`pytest_sessionfinish`): a JVM of daemons for each of them would cost the others its CPU."""
    from tony_workflow import minicluster
    reason = minicluster_missing()
    if reason:
        pytest.skip(reason)
    if not hasattr(request.config, "workerinput"):
        d = tmp_path_factory.mktemp("minicluster")
        info = minicluster.start(d, timeout=START_TIMEOUT, **SESSION_CLUSTER)
        yield info
        minicluster.stop(d)
        return
    d = _shared_cluster_dir(tmp_path_factory.getbasetemp().parent)
    with _locked(d.with_suffix(".lock")):
        info = minicluster.status(d) or minicluster.start(d, timeout=START_TIMEOUT, **SESSION_CLUSTER)
    yield info


def _shared_cluster_dir(root: Path) -> Path:
    """Where the test processes of one run keep their shared mini cluster: in the controlling
    process's temporary folder, whose subfolders are theirs."""
    return root / "shared-minicluster"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def pytest_sessionfinish(session):
    """In xdist's controlling process, once every test process has ended: the shared mini cluster
    goes too."""
    if hasattr(session.config, "workerinput") or not session.config.pluginmanager.hasplugin("dsession"):
        return
    from tony_workflow import minicluster
    d = _shared_cluster_dir(session.config._tmp_path_factory.getbasetemp())
    if d.exists():
        minicluster.stop(d)


@pytest.fixture(scope="module")
def yarn_cluster(hadoop_cluster):
    """The mini cluster with its client environment set for one test module."""
    from tony_workflow import minicluster
    saved = dict(os.environ)
    os.environ.update(minicluster.client_env(hadoop_cluster))
    try:
        yield hadoop_cluster
    finally:
        os.environ.clear()
        os.environ.update(saved)


def sleeper_job(name: str = "sleeper", conf: dict | None = None, *, seconds: int = 600, workers: int = 1,
                memory: str = "512m", until: Path | None = None) -> dict:
    """A small job for the YARN tests: ``workers`` tasks that sleep, an AM of 512 MB, no TensorBoard.
    With ``until``, the tasks sleep until that file exists instead (the test says when they end,
    however slow the machine is), for ``seconds`` at most."""
    command = f"sleep {seconds}"
    if until is not None:
        command = f"for _ in $(seq {seconds * 2}); do [ -e {shlex.quote(str(until))} ] && exit 0; sleep 0.5; done; exit 9"
    # A standalone job is one task (TonY's rule); several run under the default framework.
    return {"name": name, "framework": "standalone" if workers == 1 else "tensorflow",
            "tasks": {"worker": {"instances": workers, "memory": memory, "vcores": 1, "command": command}},
            "conf": {"tony.am.memory": "512m", "tony.task.tensorboard.enabled": "false", **(conf or {})}}


def user_process(pid: int, script: str = "train.py") -> psutil.Process:
    """The process running ``script`` in the tree under ``pid`` (the task's user process)."""
    root = psutil.Process(pid)
    for p in [root, *root.children(recursive=True)]:
        if any(script in part for part in p.cmdline()):
            return p
    raise AssertionError(f"no {script} process under pid {pid}")


def app_processes(app_id: str) -> list[psutil.Process]:
    """Live processes whose command line, environment or working directory names the application:
    what a finished job must not leave behind, found by scanning the machine rather than asking the
    runtime."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            if (app_id in " ".join(p.cmdline()) or any(app_id in v for v in p.environ().values())
                    or app_id in p.cwd()):  # a YARN container's directory names its application
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


#: A trainer's TensorBoard events without TensorFlow: a scalar "loss" (1/step) at steps 1 to 5,
#: written with TensorBoard's own writer into $TONY_LOG_DIR, or the folder its argument names there.
TENSORBOARD_EVENTS = """
import os, sys, time, types
sys.modules["tensorboard.compat.notf"] = types.ModuleType("notf")  # TensorBoard's own writer, no TensorFlow
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
writer = EventFileWriter(os.path.join(os.environ["TONY_LOG_DIR"], *sys.argv[1:]))
for step in range(1, 6):
    value = summary_pb2.Summary.Value(tag="loss", simple_value=1.0 / step)
    writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=[value])))
writer.close()
"""


def stopped(proc: subprocess.Popen, timeout: float = 30) -> int:
    """Stops a long-running command as a service manager does (SIGTERM: a test worker's children
    inherit its ignored SIGINT) and returns its exit status; killed if it has not ended in time."""
    proc.terminate()
    try:
        return proc.wait(timeout)
    finally:
        proc.kill()


@pytest.fixture
def browser():
    """Headless Chromium (Debian's chromium and chromium-driver, which `make test` installs) through
    Selenium, quit after the test."""
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "Debian's chromium and chromium-driver are installed by `make test`"
    opts = Options()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                "--no-first-run", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--window-size=1500,1100"):
        opts.add_argument(arg)
    chrome = webdriver.Chrome(service=Service(driver), options=opts)
    try:
        yield chrome
    finally:
        chrome.quit()

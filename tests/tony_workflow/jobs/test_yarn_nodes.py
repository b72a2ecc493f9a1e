"""Jobs on nodes that have nothing installed (``tony minicluster start --isolated``): a real mini
cluster whose containers cannot see this project, its virtualenv or the base Python's packages
(a mount namespace lays an empty filesystem over each), only the base interpreter itself, as on
a cluster whose nodes a Hadoop team keeps with a system Python and nothing more.

Each job brings its runtime (built once and cached in the user's HDFS directory) and its
environment (TonY's python_venv, a zip or an hdfs:// URI; or the client's own, packed); the
checks are made from inside the tasks (what they can import and see) and from outside (the
processes' environment, the files in HDFS), never from the runtime's records alone."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO, app_processes, minicluster_missing, own_minicluster, sleeper_job, wait_for
from tony_workflow.client import TonyClient, load_job

pytestmark = [pytest.mark.yarn]

PROBE = '''
import importlib.util, json, os, sys
seen = {
    "tony_workflow": importlib.util.find_spec("tony_workflow") is not None,
    "tensorflow": importlib.util.find_spec("tensorflow") is not None,
    "requests": importlib.util.find_spec("requests") is not None,
    "hello_tony": importlib.util.find_spec("hello_tony") is not None,
    "client_tree": sorted(os.listdir(os.environ["CLIENT_TREE"])),
    "prefix": sys.prefix,
}
print("PROBE " + json.dumps(seen), flush=True)
want = json.loads(WANT)
import time; time.sleep(HOLD)  # while the test looks at the executor from outside
sys.exit(0 if all(seen[k] == v for k, v in want.items()) else 3)
'''


def isolation_missing() -> str | None:
    """Why a mount namespace cannot be made here, or None."""
    try:
        done = subprocess.run(["unshare", "--mount", "--", "true"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return f"unshare cannot run: {e}"
    return None if done.returncode == 0 else f"unshare --mount is refused here: {done.stderr.decode()[-200:]}"


@pytest.fixture(scope="module")
def bare_nodes(tmp_path_factory):
    reason = minicluster_missing() or isolation_missing()
    if reason:
        pytest.skip(reason)
    directory = tmp_path_factory.mktemp("bare-mc")
    cache = tmp_path_factory.mktemp("bare-cache")
    with own_minicluster(directory, isolated=True, nm_memory_mb=12288, nm_vcores=16) as info:
        # What the jobs ship is built in a cache of this module's own (the cluster, started, has
        # its jars): tony clean here empties it, and no other process's archives are touched.
        saved = os.environ.get("XDG_CACHE_HOME")
        os.environ["XDG_CACHE_HOME"] = str(cache)
        try:
            yield info
        finally:
            if saved is None:
                os.environ.pop("XDG_CACHE_HOME", None)
            else:
                os.environ["XDG_CACHE_HOME"] = saved
    # TensorFlow's environment, packed here and stored in the cluster's HDFS, is 5 GB of disk the
    # tests after these need more than the logs (which stay).
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(directory / "data", ignore_errors=True)


def probe_job(tmp_path: Path, name: str, want: dict, conf: dict | None = None, hold: float = 0, **fields) -> dict:
    src = tmp_path / f"{name}-src"
    src.mkdir()
    (src / "probe.py").write_text(f"WANT = {json.dumps(json.dumps(want))}\nHOLD = {hold}\n{PROBE}")
    return {"name": name, "framework": "standalone", "executes": "probe.py", "src_dir": str(src),
            "tasks": {"worker": {"instances": 1, "memory": "512m", "vcores": 1}},
            "conf": {"tony.am.memory": "512m", "tony.task.tensorboard.enabled": "false",
                     "tony.execution.envs": f"CLIENT_TREE={REPO}", **(conf or {})}, **fields}


def cache_files(yarn) -> dict[str, float]:
    """The user's cache in HDFS: path -> modification time."""
    from tony_workflow.storage import open_storage
    store = open_storage("hdfs:///", **yarn.backend.store_options())
    user = os.environ.get("HADOOP_USER_NAME") or __import__("getpass").getuser()
    return {k: e.mtime for k, e in store.list(f"user/{user}/.tony/cache").items()}


def command_line(p: psutil.Process) -> str:
    """``p``'s command line; empty for a process gone since it was listed."""
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


@pytest.mark.parametrize("way", ["at start", "by the gate"])
def test_a_job_runs_from_the_runtime_it_brings_and_sees_nothing_the_client_has(bare_nodes, tmp_path, way):
    yarn = TonyClient("yarn")
    assert yarn.backend.python is None  # the cluster says nothing of its nodes: the runtime goes along
    want = {"tony_workflow": True, "tensorflow": False, "requests": False, "client_tree": []}
    # By the gate: skein's master runs the gate from the runtime too.
    conf = {"tony.gang.line-dir": ""} if way == "by the gate" else {}
    h = yarn.submit(load_job(probe_job(tmp_path, "bare", want, conf, hold=15)))
    # From outside: the executor runs the nodes' python3.x from the shipped runtime.
    executor = wait_for(lambda: next((p for p in app_processes(h.app_id)
                                      if "tony_workflow.task.executor" in command_line(p)), None), timeout=180)
    env = executor.environ()
    assert Path(executor.cmdline()[0]).name == f"python{sys.version_info.major}.{sys.version_info.minor}"
    paths = env["PYTHONPATH"].split(":")
    assert paths[0].endswith("/runtime/tony") and paths[1].endswith("/runtime/lib"), paths
    assert "/.venv/" not in executor.cmdline()[0] and env["TONY_RUNTIME"].endswith("/runtime")
    st = h.wait(poll_interval=1, timeout=300)
    assert st.state == "SUCCEEDED", st.diagnostics
    runtimes = [k for k in cache_files(yarn) if k.endswith(".zip") and "/runtime-" in k]
    assert len(runtimes) == 1, runtimes
    wait_for(lambda: not app_processes(h.app_id), timeout=120)


def test_two_clients_shipping_the_same_runtime_at_once_both_succeed_and_one_copy_stays(bare_nodes, tmp_path):
    import threading

    from tony_workflow.backends.yarn.runtime import runtime
    from tony_workflow.backends.yarn.ship import Cache
    from tony_workflow.storage import open_storage
    yarn = TonyClient("yarn")
    pack = runtime()
    store = open_storage("hdfs:///", **yarn.backend.store_options())
    user = os.environ.get("HADOOP_USER_NAME") or __import__("getpass").getuser()
    caches = [Cache(store, bare_nodes["fs_default"], user=user) for _ in range(4)]
    name = f"race-{tmp_path.name}"
    start, got = threading.Barrier(len(caches)), []

    def ship(cache):
        start.wait()
        got.append(cache.ship(pack.path, "runtime.zip", digest=name))
    threads = [threading.Thread(target=ship, args=(c,)) for c in caches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == len(caches) and len(set(got)) == 1, got
    listed = {k: e for k, e in store.list(f"user/{user}/.tony/cache/{name}").items()}
    assert list(listed) == ["runtime.zip"] and listed["runtime.zip"].size == pack.size  # whole, and no part left


def test_a_second_job_finds_the_runtime_in_the_cache_and_uploads_nothing(bare_nodes, tmp_path):
    yarn = TonyClient("yarn")
    want = {"tony_workflow": True, "tensorflow": False}
    first = yarn.submit(load_job(probe_job(tmp_path, "first", want)))
    assert first.wait(poll_interval=1, timeout=300).state == "SUCCEEDED"
    before = cache_files(yarn)
    second = yarn.submit(load_job(probe_job(tmp_path, "second", want)))
    assert second.wait(poll_interval=1, timeout=300).state == "SUCCEEDED"
    assert cache_files(yarn) == before  # the same copies, not one rewritten


def venv_zip(tmp_path: Path) -> Path:
    """A virtualenv of the base interpreter holding one module of its own, zipped as TonY's users do."""
    from tony_workflow.backends.yarn.ship import deterministic_zip
    venv = tmp_path / "venv"
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "hello_tony.py").write_text("GREETING = 'hello from the job's own environment'\n")
    return deterministic_zip(venv, tmp_path / "venv.zip")


@pytest.mark.parametrize("where", ["local zip", "hdfs"])
def test_the_tasks_run_in_tonys_python_venv(bare_nodes, tmp_path, where):
    yarn = TonyClient("yarn")
    archive = venv_zip(tmp_path)
    location = str(archive)
    if where == "hdfs":
        from tony_workflow.storage import open_storage
        store = open_storage("hdfs:///", **yarn.backend.store_options())
        store.publish(archive, f"tmp/venvs/{tmp_path.name}/venv.zip")
        location = f"{bare_nodes['fs_default']}/tmp/venvs/{tmp_path.name}/venv.zip"
    want = {"tony_workflow": True, "hello_tony": True, "requests": False}
    st = yarn.submit(load_job(probe_job(tmp_path, f"venv-{where.split()[0]}", want, python_venv=location))).wait(
        poll_interval=1, timeout=300)
    assert st.state == "SUCCEEDED", st.diagnostics


NUMPY_PROBE = """
import os, sys
import numpy
a = numpy.arange(6.0).reshape(2, 3)
where, brought = os.path.realpath(numpy.__file__), os.path.realpath(os.environ["TONY_ENVIRONMENT"])
print("numpy", where, "environment", brought, "dot", float((a @ a.T).sum()), flush=True)
sys.exit(0 if where.startswith(brought + os.sep) and float((a @ a.T).sum()) == 83.0 else 3)
"""


def test_what_the_source_imports_goes_with_the_job_and_a_second_job_uploads_nothing(bare_nodes, tmp_path):
    # NumPy stands for the client's frameworks: compiled extensions with shared libraries of their own
    # (numpy.libs), the same packing, upload and localization as TensorFlow's 2 GB at a fiftieth of
    # the cost. The job names no environment: its source imports numpy, so numpy goes with it. What
    # the nodes cannot have, the task imports (and computes with) from the environment the job
    # brought, as YARN localized it; the script's exit status says so.
    src = tmp_path / "np-src"
    src.mkdir()
    (src / "np_probe.py").write_text(NUMPY_PROBE)
    spec = load_job({"name": "packed", "framework": "standalone", "executes": "np_probe.py", "src_dir": str(src),
                     "tasks": {"worker": {"instances": 1, "memory": "512m", "vcores": 1}},
                     "conf": {"tony.am.memory": "512m", "tony.task.tensorboard.enabled": "false"}})
    yarn = TonyClient("yarn")
    st = yarn.submit(spec).wait(poll_interval=1, timeout=600)
    assert st.state == "SUCCEEDED", st.diagnostics
    shipped = cache_files(yarn)
    assert any("/env-numpy-" in k for k in shipped), shipped
    # The same job again: every part is in the cache already, nothing is uploaded again.
    st = yarn.submit(spec).wait(poll_interval=1, timeout=600)
    assert st.state == "SUCCEEDED", st.diagnostics
    assert cache_files(yarn) == shipped


def test_an_am_container_started_again_finds_the_runtime_again(bare_nodes, tmp_path):
    yarn = TonyClient("yarn")
    gate = tmp_path / "gate"  # the worker runs till the second attempt is seen
    h = yarn.submit(load_job(sleeper_job("am-again", {"tony.am.max-attempts": "2"}, memory="256m", until=gate)))
    wait_for(lambda: h.status().state == "RUNNING", timeout=180, interval=1)
    # The AM's container dies whole (its supervisor and its AM), as with its machine.
    am = [p for p in app_processes(h.app_id) if "tony_workflow.am.supervisor" in " ".join(p.cmdline())]
    assert am
    tree = []
    for root in am:  # every process first: the container's launcher holds the supervisor, listed too
        try:
            tree += [*root.children(recursive=True), root]
        except psutil.Error:
            continue
    for p in tree:
        try:
            p.kill()
        except psutil.Error:
            pass
    again = wait_for(lambda: (s := h.status()).am_attempt == 2 and s.state == "RUNNING" and s, timeout=300, interval=1)
    assert again.am_attempt == 2
    gate.touch()
    st = h.wait(poll_interval=1, timeout=300)
    assert st.state == "SUCCEEDED", st.diagnostics
    wait_for(lambda: not app_processes(h.app_id), timeout=120)


def test_tony_clean_removes_what_jobs_shipped_but_the_current_runtime(bare_nodes):
    from tests.conftest import run_tony
    from tony_workflow.backends.yarn.runtime import runtime_key
    yarn = TonyClient("yarn")
    before = cache_files(yarn)
    assert any("/runtime-" in k for k in before) and len(before) > 1
    listed = run_tony("clean", "--backend", "yarn", "--older-than", "0s", "--dry-run")
    assert listed.returncode == 0, listed.stderr
    assert "would remove" in listed.stdout and cache_files(yarn) == before  # a dry run removes nothing
    done = run_tony("clean", "--backend", "yarn", "--older-than", "0s")
    assert done.returncode == 0, done.stderr
    left = cache_files(yarn)
    assert left and all(k.startswith(runtime_key() + "/") for k in left), left


def readme_yarn_commands() -> list[str]:
    """The commands of the README's "Your first job on YARN", as a newcomer pastes them."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Your first job on YARN"):]
    block = section[section.index("```\n") + 4:]
    return [line for line in block[:block.index("```")].splitlines() if line.strip()]


def test_the_readmes_yarn_commands_run_the_mnist_example_on_nodes_with_nothing_installed(bare_nodes, tmp_path):
    start, submit = readme_yarn_commands()
    assert start == 'tony minicluster start && eval "$(tony minicluster env)"', start
    assert submit == "tony --backend yarn submit examples/mnist_mwms/mnist_mwms.yaml --wait", submit
    # The cluster is this module's, started as `tony minicluster start --isolated` (its nodes have
    # a base Python and nothing else); its environment is what `tony minicluster env` prints for it.
    # Then the README's submission, exactly as written, with nothing set besides.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HADOOP_", "TONY_BACKEND"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["TONY_HOME"] = str(tmp_path / "tony-home")
    script = f'eval "$(tony minicluster env --dir {bare_nodes["dir"]})" && {submit}'
    done = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=1500,
                          check=False)
    if done.returncode != 0:  # what the cluster's own log says of it, beside the command's words
        free = shutil.disk_usage(bare_nodes["dir"]).free
        logged = [line for line in Path(bare_nodes["log"]).read_text(errors="replace").splitlines()
                  if " ERROR " in line or (" WARN " in line and "datanode" in line.lower())]
        pytest.fail(f"{done.stderr[-4000:]}\nthe cluster's disk has {free / 2**30:.1f} GiB free; its log's last "
                    "errors and DataNode warnings:\n" + "\n".join(logged[-15:]))
    said = done.stderr
    # What was shipped was said as it went: the environment (TensorFlow among what the example
    # imports), its upload, and the final state.
    assert "the job's environment:" in said and "tensorflow" in said.split("the job's environment:", 1)[1], said[-4000:]
    assert "uploading tensorflow" in said or "every one already in the cache" in said, said[-4000:]
    # While the node unpacked it (minutes for TensorFlow, the first time), the wait was said too.
    assert "not started yet" in said and "fetching and unpacking the job's files" in said, said[-4000:]
    assert done.stdout.split()[-1] == "SUCCEEDED", done.stdout
    # TensorFlow went without its C++ headers (18,000 files that no running job reads).
    parts = list(Path(os.environ["XDG_CACHE_HOME"]).rglob("env-tensorflow-*.tar"))
    assert parts and all(p.name.endswith("-lean.tar") for p in parts), parts
    with tarfile.open(parts[0]) as tar:
        names = tar.getnames()
    assert "tensorflow/__init__.py" in names and not any(n.startswith("tensorflow/include/") for n in names)
    # Hadoop's own INFO and WARN lines (its driver's log4j) are not mixed into the progress.
    hadoops = re.findall(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (?:INFO|WARN) .*$", said, re.MULTILINE)
    assert not hadoops, hadoops


def test_a_notebook_runs_on_nodes_with_nothing_installed_and_is_used_and_ended_as_on_the_embedded_cluster(
        bare_nodes, tmp_path, browser):
    # JupyterLab goes with the job's environment, its pages too (the files its wheel puts under
    # the environment's share/, which no import names).
    from tests.tony_workflow.jobs.test_lab import walk
    walk(tmp_path, browser, "yarn")


def test_a_notebook_job_runs_on_nodes_with_nothing_installed_and_its_executed_copy_is_kept(bare_nodes, tmp_path):
    # The notebook's imports and Jupyter go with the job; each task keeps its executed copy in the
    # job's store as it ends (its container's directory goes with it), and the record holds it.
    from tests.tony_workflow.jobs.test_notebook_jobs import job, kept_with_the_history
    from tests.tony_workflow.task.test_notebook import notebook
    src = tmp_path / "src"
    src.mkdir()
    notebook(src / "train.ipynb", ("import os\nsteps = 1", ["parameters"]),
             ("print(f\"{os.environ['TONY_TASK_ID']} ran {steps} steps\")", []))
    spec = job(src, "yarn-notebook", "--steps 5")
    spec["tasks"]["worker"]["instances"] = 1
    h = TonyClient("yarn").submit(load_job(spec))
    st = h.wait(timeout=900)
    assert st.state == "SUCCEEDED", st.diagnostics
    kept_with_the_history(h.app_id, {"worker:0"}, "worker:0 ran 5 steps", backend="yarn")

"""PyTorch and JAX jobs for real, on the embedded cluster and on the Hadoop mini cluster: the
examples train, a killed rank's session resumes from the checkpoint with the replicas ending
identical, several processes share a container under torch's own agent, and JAX processes
exchange data. What is checked is read from the processes' own output and from the machine's
process table, not from the runtime's records."""
from __future__ import annotations

import json
import re
import signal
import sys

import pytest

from tests.conftest import REPO, app_processes, user_process, wait_for
from tony_workflow.client import TonyClient, load_job
from tony_workflow.client.data import stage_input

pytestmark = pytest.mark.frameworks

DDP = REPO / "examples" / "pytorch_ddp" / "pytorch_ddp.yaml"
JAX = REPO / "examples" / "jax" / "jax.yaml"
SMALL = ["tony.am.memory=512m", "tony.worker.memory=3g"]  # a torch trainer holds about 1.8 GB resident
# What a torchrun script reads, and TonY's own names for the same.
TORCHRUN = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
            "NODE_RANK", "INIT_METHOD", "WORLD", "CUDA_VISIBLE_DEVICES", "TORCHELASTIC_RUN_ID", "TONY_TASK_ID")
DUMP = ("python -c \"import json, os; print('ENV', json.dumps({k: os.environ.get(k) for k in "
        f"{list(TORCHRUN)!r}}}), flush=True)\"")


@pytest.fixture(params=["local", pytest.param("yarn", marks=pytest.mark.yarn)])
def backend(request, tmp_path, monkeypatch):
    """Each test on both backends: a fresh TONY_HOME for the embedded cluster, the shared mini
    cluster for YARN."""
    if request.param == "local":
        request.getfixturevalue("tony_home")
    else:
        request.getfixturevalue("yarn_cluster")
    return request.param


def stdout(handle) -> str:
    """Every log of the job: each container's files on the embedded cluster, what `yarn logs`
    prints on YARN."""
    return "".join(p.read_text(errors="replace") for p in handle.logs().values() if p.exists())


def finished(handle, timeout: float = 600):
    st = handle.wait(poll_interval=0.5, timeout=timeout)
    wait_for(lambda: not app_processes(handle.app_id), timeout=120)
    return st


# On the embedded cluster: on YARN a killed worker's session relaunched from the checkpoint mirrored
# to HDFS is test_yarn_backend's and test_yarn_kerberos', torch's processes across YARN containers
# the tests below, and an input read from HDFS the data tests'.
@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_ddp_rank_killed_mid_run_resumes_from_the_checkpoint_with_identical_replicas(backend, tmp_path):
    # The example reads its training set as the job's input: Parquet files, in HDFS on YARN.
    sys.path.insert(0, str(DDP.parent))
    import digits
    client = TonyClient(backend)
    data = stage_input(digits.save_parquet(tmp_path / "train"), client.backend, f"ddp-{tmp_path.name}")
    spec = load_job(str(DDP), conf=[*SMALL, "tony.am.retry-count=1", "tony.task.tensorboard.enabled=false",
                                    f"tony.data.train.path={data}"],
                    task_params="--epochs 8 --save-every 10 --step-sleep 0.08")
    h = client.submit(spec)
    # Saved every 10 steps and mirrored every half second: past step 40, the store holds a save.
    wait_for(lambda: ((s := h.status()).progress or {}).get("step", 0) >= 40 and s.state == "RUNNING",
             timeout=300, interval=0.5)
    victim = user_process(h.status().task("worker:1").pid)
    victim.send_signal(signal.SIGKILL)
    st = finished(h)
    assert st.state == "SUCCEEDED", st.diagnostics
    assert st.session_id == 1 and st.attempts == 2
    out = stdout(h)
    starts = {int(r): int(s) for r, s in re.findall(r"session=1 rank=(\d) world=2 start_step=(\d+) "
                                                    r"input=the job input train", out)}
    assert set(starts) == {0, 1} and len(set(starts.values())) == 1 and starts[0] >= 40, out[-3000:]
    done = dict(re.findall(r"session=1 rank=(\d) done steps=176 params=(\w+)", out))
    assert set(done) == {"0", "1"} and len(set(done.values())) == 1, done   # the replicas are identical
    metrics = json.loads(re.search(r"evaluation: (\{.*\})", out).group(1))
    assert metrics["accuracy"] >= 0.85 and metrics["world_size"] == 2, metrics


def test_two_containers_of_two_processes_each_under_torchs_agent(backend):
    spec = load_job(str(DDP), conf=[*SMALL, "tony.worker.processes=2", "tony.worker.memory=5g",
                                    "tony.task.tensorboard.enabled=false"],
                    task_params="--epochs 4")
    h = TonyClient(backend).submit(spec)
    st = finished(h)
    assert st.state == "SUCCEEDED", st.diagnostics
    out = stdout(h)
    starts = re.findall(r"session=0 rank=(\d) world=(\d) start_step=0", out)
    assert sorted(starts) == [("0", "4"), ("1", "4"), ("2", "4"), ("3", "4")], out[-3000:]
    done = dict(re.findall(r"session=0 rank=(\d) done steps=88 params=(\w+)", out))
    assert set(done) == {"0", "1", "2", "3"} and len(set(done.values())) == 1, done
    # Two containers, each one executor running one agent with its two trainers.
    assert [t.task_id for t in st.tasks] == ["worker:0", "worker:1"]


# Every process of one and two a container on the embedded cluster; on YARN, two a container (one
# a container there is test_elastic_checkpoints' and test_yarn_reclaim's elastic jobs).
@pytest.mark.parametrize("backend, processes", [("local", 1), ("local", 2),
                                                pytest.param("yarn", 2, marks=pytest.mark.yarn)],
                         indirect=["backend"])
def test_the_torchrun_contract_in_every_process(backend, processes, local_site):
    gpus = 0
    if backend == "local":
        # No GPU on this machine: the embedded cluster's inventory is told it has four, and the
        # pinning is checked in what each process would select (CUDA_VISIBLE_DEVICES[LOCAL_RANK]).
        local_site({"tony.local.gpus": "4"})
        gpus = processes
    job = {"name": "torchrun-contract", "framework": "pytorch", "command": DUMP,
           "tasks": {"worker": {"instances": 2, "memory": "1536m", "gpus": gpus, "processes": processes}},
           "conf": {"tony.am.memory": "512m", "tony.task.tensorboard.enabled": "false"}}
    h = TonyClient(backend).submit(load_job(job))
    st = finished(h)
    assert st.state == "SUCCEEDED", st.diagnostics
    envs = [json.loads(line) for line in re.findall(r"^ENV (\{.*\})$", stdout(h), re.MULTILINE)]
    world = 2 * processes
    assert sorted(int(e["RANK"]) for e in envs) == list(range(world)), envs
    master = {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs}
    assert len(master) == 1
    addr, port = master.pop()
    assert all(e["INIT_METHOD"] == f"tcp://{addr}:{port}" for e in envs)
    for e in envs:
        node = int(e["TONY_TASK_ID"].split(":")[1])
        assert e["WORLD_SIZE"] == e["WORLD"] == str(world) and e["LOCAL_WORLD_SIZE"] == str(processes), e
        assert e["GROUP_RANK"] == e["NODE_RANK"] == str(node), e
        assert int(e["RANK"]) == node * processes + int(e["LOCAL_RANK"]), e
        # torch's agent starts the processes when a container runs several; one runs alone.
        assert (e["TORCHELASTIC_RUN_ID"] is not None) == (processes > 1), e
    if gpus:
        chosen = [e["CUDA_VISIBLE_DEVICES"].split(",")[int(e["LOCAL_RANK"])] for e in envs]
        assert sorted(chosen) == [str(g) for g in range(world)], envs   # a GPU of its own for each process


@pytest.mark.yarn
def test_jax_processes_join_and_exchange_data(yarn_cluster):
    # On YARN alone: the embedded cluster runs the same example for real in the Airflow DAG's test
    # (tests/airflow_provider/test_operators.py, tony_jax), and a JAX run costs a minute and a half
    # of two cores.
    backend = "yarn"
    h = TonyClient(backend).submit(load_job(str(JAX), conf=SMALL, task_params="--steps 120 --save-every 20"))
    st = finished(h)
    assert st.state == "SUCCEEDED", st.diagnostics
    out = stdout(h)
    joined = re.findall(r"session=0 process=(\d) of 3 start_step=0", out)
    assert sorted(joined) == ["0", "1", "2"], out[-3000:]
    # The parameters are all-reduced every step and gathered at the end: the same on all three.
    done = dict(re.findall(r"session=0 process=(\d) done steps=120 params=(\w+)", out))
    assert set(done) == {"0", "1", "2"} and len(set(done.values())) == 1, done
    metrics = json.loads(re.search(r"evaluation: (\{.*\})", out).group(1))
    assert metrics["processes"] == 3 and metrics["accuracy"] >= 0.8, metrics


def test_mxnet_parameter_server_job_in_an_environment_of_its_own(tony_home):
    # MXNet 1.9.1 cannot live beside this project's NumPy: `make test` builds it a venv of its own.
    venv = REPO / ".venv-mxnet"
    if not (venv / ".installed").exists():
        pytest.skip(f"no MXNet environment at {venv}: `make test` (or `make mxnet`) builds it")
    job = {"name": "mxnet-kvstore", "framework": "mxnet", "executes": "kvstore.py",
           "src_dir": str(REPO / "tests" / "tony_workflow" / "mxnet_job"), "python_venv": str(venv),
           "tasks": {"scheduler": {"instances": 1, "memory": "1g"}, "server": {"instances": 1, "memory": "1g"},
                     "worker": {"instances": 2, "memory": "1g"}},
           "conf": {"tony.am.memory": "512m", "tony.task.tensorboard.enabled": "false"}}
    h = TonyClient("local").submit(load_job(job))
    st = finished(h)
    assert st.state == "SUCCEEDED", st.diagnostics
    assert any("Horovod" in w or "MXNet" in w for w in st.warnings), st.warnings   # the caveat travels with it
    pulled = sorted(re.findall(r"\[mxnet\] worker (\d) of 2 pulled \[3\.0, 3\.0, 3\.0\]", stdout(h)))
    assert pulled == ["0", "1"], stdout(h)[-3000:]   # 1 + 2, summed by the server over both workers

import json
import shlex
from pathlib import Path

from tony_workflow.frameworks import (
    ELASTIC_RDZV_CONF,
    PLACE_VARIABLES,
    TaskContext,
    build_env,
    in_place_env,
    launch_command,
    tf_config,
    thread_env,
)

CLUSTER = {"chief": ["h0:1"], "worker": ["h1:2", "h2:3"], "ps": ["h3:4"], "tensorboard": ["h4:5"]}


def ctx(framework="tensorflow", task_type="worker", index=1, cluster=CLUSTER, chief=False):
    return TaskContext(framework=framework, cluster=cluster, task_type=task_type, index=index,
                       is_chief=chief, sidecar_types=["tensorboard"], monitored=3)


def test_tf_config_excludes_sidecars_and_names_the_task():
    env = build_env(ctx())
    tf = json.loads(env["TF_CONFIG"])
    assert tf == {"cluster": {"chief": ["h0:1"], "worker": ["h1:2", "h2:3"], "ps": ["h3:4"]},
                  "task": {"type": "worker", "index": 1}}
    # CLUSTER_SPEC is the whole picture, sidecars included (TonY's contract).
    assert json.loads(env["CLUSTER_SPEC"]) == CLUSTER
    assert env["JOB_NAME"] == "worker" and env["TASK_INDEX"] == "1" and env["TASK_NUM"] == "3"
    assert "IS_CHIEF" not in env


def test_chief_flag_and_evaluator_hidden_from_others():
    cluster = {**CLUSTER, "evaluator": ["h9:9"]}
    assert "evaluator" not in tf_config(ctx(cluster=cluster))["cluster"]
    assert "evaluator" in tf_config(ctx(cluster=cluster, task_type="evaluator", index=0))["cluster"]
    assert build_env(ctx(task_type="chief", index=0, chief=True))["IS_CHIEF"] == "true"


def test_pytorch_ranks_put_the_chief_first():
    env = build_env(ctx("pytorch", "worker", 1))
    assert env["MASTER_ADDR"] == "h0" and env["MASTER_PORT"] == "1"
    assert env["INIT_METHOD"] == "tcp://h0:1"
    assert env["RANK"] == "2" and env["WORLD_SIZE"] == "3" and env["WORLD"] == "3"
    assert build_env(ctx("pytorch", "chief", 0, chief=True))["RANK"] == "0"


def test_mxnet_and_jax_and_horovod():
    cluster = {"scheduler": ["s:7"], "server": ["a:1", "b:2"], "worker": ["c:3", "d:4"]}
    env = build_env(ctx("mxnet", "server", 0, cluster=cluster))
    assert (env["DMLC_ROLE"], env["DMLC_PS_ROOT_URI"], env["DMLC_PS_ROOT_PORT"]) == ("server", "s", "7")
    assert env["DMLC_NUM_SERVER"] == "2" and env["DMLC_NUM_WORKER"] == "2"
    jax = build_env(ctx("jax", "worker", 1, cluster={"worker": ["c:3", "d:4"]}))
    assert jax["JAX_COORDINATOR_ADDRESS"] == "c:3" and jax["JAX_PROCESS_ID"] == "1" and jax["JAX_NUM_PROCESSES"] == "2"
    hvd = build_env(ctx("horovod", "worker", 1, cluster={"driver": ["z:9"], "worker": ["c:3", "c:4"]}))
    assert hvd["HOROVOD_RANK"] == "1" and hvd["HOROVOD_SIZE"] == "2"
    assert hvd["HOROVOD_LOCAL_RANK"] == "1" and hvd["HOROVOD_CROSS_SIZE"] == "1"
    assert (hvd["HOROVOD_GLOO_RENDEZVOUS_ADDR"], hvd["HOROVOD_GLOO_RENDEZVOUS_PORT"]) == ("z", "9")
    assert hvd["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "2000"  # TonY's


def test_standalone_sets_no_cluster():
    env = build_env(ctx("standalone", "worker", 0, cluster={"worker": ["h:1"]}, chief=True))
    assert "TF_CONFIG" not in env and "CLUSTER_SPEC" not in env and env["IS_CHIEF"] == "true"


def test_pytorch_gives_torchruns_variables_with_several_processes_per_container():
    cluster = {"chief": ["h0:1"], "worker": ["h1:2", "h2:3"]}
    procs = {"chief": 1, "worker": 2}
    env = build_env(TaskContext("pytorch", cluster, "worker", 1, False, processes=procs, agent=True))
    # Nodes: chief (1 rank), worker:0 (2), worker:1 (2): this container's first rank is 3.
    assert (env["GROUP_RANK"], env["NODE_RANK"], env["GROUP_WORLD_SIZE"]) == ("2", "2", "3")
    assert (env["RANK"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("3", "0", "2")
    assert env["WORLD_SIZE"] == env["WORLD"] == "5"
    chief = build_env(TaskContext("pytorch", cluster, "chief", 0, True, processes=procs, agent=True))
    assert (chief["RANK"], chief["NODE_RANK"], chief["LOCAL_WORLD_SIZE"]) == ("0", "0", "1")


def test_torchs_agent_wraps_the_command_only_when_the_job_runs_under_it():
    cluster = {"worker": ["h1:2", "h2:3"]}
    plain = TaskContext("pytorch", cluster, "worker", 1, False, processes={"worker": 1})
    assert launch_command(plain, "python train.py --lr 0.1", "/venv/bin/python") == "python train.py --lr 0.1"
    agent = TaskContext("pytorch", cluster, "worker", 1, False, processes={"worker": 2}, agent=True)
    argv = shlex.split(launch_command(agent, "python train.py --lr 0.1", "/venv/bin/python"))
    assert argv[:3] == ["/venv/bin/python", "-m", "torch.distributed.run"]
    flags = dict(zip(argv[3:-4:2], argv[4:-4:2]))
    assert flags == {"--nnodes": "2", "--node-rank": "1", "--nproc-per-node": "2", "--master-addr": "h1",
                     "--master-port": "2", "--max-restarts": "0", "--monitor-interval": "0.5"}
    assert argv[-4:] == ["--no-python", "bash", "-c", "python train.py --lr 0.1"]   # the user's command, unchanged
    tf = TaskContext("tensorflow", cluster, "worker", 1, False, agent=True)
    assert launch_command(tf, "python train.py", "python") == "python train.py"   # no launcher of its own


def test_an_elastic_job_runs_torchs_agent_in_the_ams_rendezvous_between_its_bounds():
    cluster = {"chief": ["h0:1"], "worker": ["h1:2", "h2:3", "h3:4"]}
    elastic = TaskContext("pytorch", cluster, "worker", 2, False, processes={"worker": 2}, agent=True,
                          elastic=(3, 4), rendezvous="am-host:7000", run_id="application_1_0002-1",
                          max_restarts=12, join_timeout_s=660, host="h3")
    argv = shlex.split(launch_command(elastic, "python train.py --lr 0.1", "/venv/bin/python"))
    # The job's interpreter, which imports this package from where the executor found it.
    assert argv[0] == "/venv/bin/python" and argv[1] == "-c" and "tony_workflow.task.torch_agent" in argv[2]
    import tony_workflow
    assert argv[3] == str(Path(tony_workflow.__file__).resolve().parent.parent)
    flags = dict(zip(argv[4:-4:2], argv[5:-4:2]))
    assert flags == {"--nnodes": "3:4", "--nproc-per-node": "2", "--rdzv-backend": "tony",
                     "--rdzv-endpoint": "am-host:7000", "--rdzv-id": "application_1_0002-1",
                     "--rdzv-conf": f"join_timeout=660,{ELASTIC_RDZV_CONF}", "--max-restarts": "12",
                     "--monitor-interval": "0.5", "--local-addr": "h3"}
    # No fixed node rank or master: the rendezvous gives them, round by round.
    assert "--node-rank" not in argv and "--master-addr" not in argv
    assert argv[-4:] == ["--no-python", "bash", "-c", "python train.py --lr 0.1"]
    sidecar = TaskContext("pytorch", {**cluster, "tensorboard": ["h9:9"]}, "tensorboard", 0, False, agent=True,
                          elastic=(3, 4), rendezvous="am-host:7000", run_id="r")
    assert launch_command(sidecar, "tensorboard --logdir x", "python") == "tensorboard --logdir x"


def test_a_trainer_regrouping_in_place_runs_as_it_is_with_no_place_but_the_group_s_address():
    cluster = {"worker": ["h1:1", "h2:2", "h3:3"]}
    ctx = TaskContext("pytorch", cluster, "worker", 1, False, elastic=(2, 3), rendezvous="am-host:7000",
                      run_id="application_1_0002-0", host="h2")
    assert launch_command(ctx, "python train.py", "python") == "python train.py"  # no agent
    env = build_env(ctx)
    assert env["RANK"] == "1" and env["MASTER_ADDR"] == "h1"  # what a fixed job gets ...
    env["PYTHONPATH"] = "/job/src"
    in_place_env(env, ctx, "group-token")
    assert not set(PLACE_VARIABLES) & set(env)  # ... is taken away: each generation gives the place
    assert {k: env[k] for k in env if k.startswith("TONY_ELASTIC_")} == {
        "TONY_ELASTIC_REGROUP": "in-place", "TONY_ELASTIC_ENDPOINT": "am-host:7000",
        "TONY_ELASTIC_RUN_ID": "application_1_0002-0", "TONY_ELASTIC_TOKEN": "group-token",
        "TONY_ELASTIC_MIN": "2", "TONY_ELASTIC_MAX": "3", "TONY_ELASTIC_HOST": "h2"}
    assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("0", "1")
    # The script's own path first; tony_workflow's after it, for an interpreter without it installed.
    first, package = env["PYTHONPATH"].split(":")
    assert first == "/job/src" and (Path(package) / "tony_workflow" / "torch_elastic.py").exists()


def test_only_horovod_and_mxnet_jobs_carry_a_caveat():
    from tony_workflow.frameworks import CAVEATS
    assert set(CAVEATS) == {"horovod", "mxnet"}
    # Each names the framework, why it is not installed here, and what the job must bring.
    for name, why in (("horovod", "C++20"), ("mxnet", "numpy < 1.24")):
        assert CAVEATS[name].startswith(f"framework {name}: ") and why in CAVEATS[name]
        assert "python_venv" in CAVEATS[name]


def test_each_process_gets_its_share_of_the_containers_vcores_as_threads_unless_set():
    assert thread_env(4, 1, {}) == {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4", "OPENBLAS_NUM_THREADS": "4"}
    assert thread_env(4, 2, {})["OMP_NUM_THREADS"] == "2"
    assert thread_env(1, 4, {})["OMP_NUM_THREADS"] == "1"  # never none
    assert thread_env(8, 1, {"OMP_NUM_THREADS": "3"}) == {"MKL_NUM_THREADS": "8", "OPENBLAS_NUM_THREADS": "8"}

"""The Hadoop 3.5.0 mini cluster: a real YARN + HDFS, started once for the module (``yarn`` tier),
and the command's error handling, which needs no cluster."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest
import requests

from tests.conftest import REPO, SESSION_CLUSTER, START_TIMEOUT, app_processes, minicluster_missing, run_tony, wait_for
from tony_workflow import minicluster
from tony_workflow.minicluster.build import _POM, _sha256
from tony_workflow.minicluster.scheduling import Scheduling

if TYPE_CHECKING:
    import skein


@pytest.fixture(scope="module")
def cluster(hadoop_cluster):
    return hadoop_cluster


@pytest.fixture
def hadoop_env(cluster, monkeypatch, tmp_path):
    """The environment of a Hadoop client: HADOOP_CONF_DIR, JAVA_HOME and the cluster's bin on PATH."""
    for k, v in minicluster.client_env(cluster).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SKEIN_CONFIG", str(tmp_path / "skein"))  # skein writes its credentials there
    return dict(os.environ)


def site(conf_dir: str, name: str) -> dict[str, str]:
    root = ET.parse(Path(conf_dir) / name).getroot()
    return {p.findtext("name"): p.findtext("value") for p in root.iter("property")}


# -- against a running cluster --------------------------------------------------------------------

@pytest.mark.yarn
def test_cluster_json_and_client_conf_describe_the_running_cluster(cluster):
    d = Path(cluster["hadoop_conf_dir"]).parent
    assert json.loads((d / "cluster.json").read_text()) == cluster and cluster["dir"] == str(d)
    assert psutil.pid_exists(cluster["pid"])
    for key, scheme in (("rm_web", "http://"), ("webhdfs", "http://"), ("fs_default", "hdfs://")):
        assert cluster[key].startswith(scheme) and cluster[key].rsplit(":", 1)[1].isdigit()

    core, hdfs, yarn = (site(cluster["hadoop_conf_dir"], f"{n}-site.xml") for n in ("core", "hdfs", "yarn"))
    assert core["fs.defaultFS"] == cluster["fs_default"]
    assert "http://" + hdfs["dfs.namenode.http-address"] == cluster["webhdfs"]
    assert yarn["yarn.resourcemanager.address"] == cluster["rm_address"]
    assert yarn["yarn.resourcemanager.scheduler.address"] == cluster["rm_scheduler_address"]
    assert "http://" + yarn["yarn.resourcemanager.webapp.address"] == cluster["rm_web"]
    assert site(cluster["hadoop_conf_dir"], "resource-types.xml")["yarn.resource-types"] == "yarn.io/gpu"

    info = requests.get(f"{cluster['rm_web']}/ws/v1/cluster/info", timeout=10).json()["clusterInfo"]
    assert info["state"] == "STARTED" and info["hadoopVersion"] == "3.5.0"
    assert requests.get(f"{cluster['webhdfs']}/webhdfs/v1/?op=GETFILESTATUS&user.name=tony",
                        timeout=10).json()["FileStatus"]["type"] == "DIRECTORY"


@pytest.mark.yarn
def test_the_nodemanager_offers_four_gpus_as_a_countable_resource(cluster):
    nodes = requests.get(f"{cluster['rm_web']}/ws/v1/cluster/nodes", timeout=10).json()["nodes"]["node"]
    assert [n["state"] for n in nodes] == ["RUNNING"]
    total = {r["name"]: r for r in nodes[0]["totalResource"]["resourceInformations"]["resourceInformation"]}
    assert total["yarn.io/gpu"]["value"] == 4 and total["yarn.io/gpu"]["resourceType"] == "COUNTABLE"
    assert total["memory-mb"]["value"] == SESSION_CLUSTER["nm_memory_mb"]
    assert total["vcores"]["value"] == SESSION_CLUSTER["nm_vcores"]
    # A ResourceManager with the DefaultResourceCalculator refuses to start with any resource type
    # beyond memory, so the GPU type being there also shows the DominantResourceCalculator is in use.
    scheduler = requests.get(f"{cluster['rm_web']}/ws/v1/cluster/scheduler", timeout=10).json()
    assert scheduler["scheduler"]["schedulerInfo"]["type"] == "capacityScheduler"


@pytest.mark.yarn
def test_yarn_command_answers_classpath_glob_for_skein(cluster, hadoop_env):
    out = subprocess.run(["yarn", "classpath", "--glob"], capture_output=True, text=True, check=True,
                         env=hadoop_env).stdout.strip().split(":")
    assert out[0] == cluster["hadoop_conf_dir"]
    assert any(Path(p).name == "hadoop-yarn-client-3.5.0.jar" for p in out)
    assert all(Path(p).exists() for p in out)
    nodes = subprocess.run(["yarn", "node", "-list"], capture_output=True, text=True, env=hadoop_env, timeout=120,
                           check=False)
    assert nodes.returncode == 0 and "RUNNING" in nodes.stdout, nodes.stderr


@pytest.mark.yarn
@pytest.mark.filterwarnings("ignore:Skein global security credentials not found")  # a fresh SKEIN_CONFIG
def test_skein_hello_world_application_succeeds(cluster, hadoop_env, tmp_path):
    skein = pytest.importorskip("skein")
    spec = skein.ApplicationSpec(
        name="hello", queue="default",
        master=skein.Master(resources=skein.Resources(memory="256 MiB", vcores=1)),
        services={"hello": skein.Service(resources=skein.Resources(memory="128 MiB", vcores=1),
                                         script="sleep 5; echo hi"),
                  # containers find the client configuration, as on a real cluster
                  "env": skein.Service(resources=skein.Resources(memory="128 MiB", vcores=1),
                                       script='echo "conf=$HADOOP_CONF_DIR"')})
    with skein.Client(log=str(tmp_path / "driver.log")) as client:
        app_id = client.submit(spec)

        def final_report():
            report = client.application_report(app_id)
            return report if str(report.state) in ("FINISHED", "FAILED", "KILLED") else None
        report = wait_for(final_report, timeout=180)
    assert (str(report.state), str(report.final_status)) == ("FINISHED", "SUCCEEDED"), report.diagnostics

    # The services' output, from the logs YARN aggregated into HDFS.
    def logs() -> str:
        r = subprocess.run(["yarn", "logs", "-applicationId", app_id, "-log_files", "hello.log,env.log"],
                           capture_output=True, text=True, env=hadoop_env, timeout=120, check=False)
        return r.stdout if "LogContents:\nhi" in r.stdout and "conf=" in r.stdout else ""
    out = wait_for(logs, timeout=60, interval=2)
    assert f"conf={cluster['hadoop_conf_dir']}\n" in out


@pytest.mark.yarn
def test_a_second_start_in_the_same_directory_is_refused(cluster):
    d = Path(cluster["hadoop_conf_dir"]).parent
    with pytest.raises(minicluster.MiniClusterError, match="already runs"):
        minicluster.start(d)
    assert minicluster.status(d) == cluster


@pytest.mark.yarn
def test_cli_start_recovers_from_a_crashed_cluster_and_stop_stops_it(tmp_path):
    reason = minicluster_missing()
    if reason:
        pytest.skip(reason)
    d = tmp_path / "mc"
    r = run_tony("minicluster", "start", "--dir", str(d), "--gpus", "2", "--memory-mb", "4096", "--vcores", "4")
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout)
    assert first["gpus_per_nm"] == 2 and first["gpus_stand_in"] and "ready in" in r.stderr  # none behind them
    try:
        os.kill(first["pid"], signal.SIGKILL)  # a crash leaves cluster.json and the pid behind
        wait_for(lambda: not psutil.pid_exists(first["pid"]) or
                 psutil.Process(first["pid"]).status() == psutil.STATUS_ZOMBIE, timeout=30, interval=0.1)
        assert run_tony("minicluster", "status", "--dir", str(d)).returncode == 1

        r = run_tony("minicluster", "start", "--dir", str(d))
        assert r.returncode == 0, r.stderr
        second = json.loads(r.stdout)
        # By default, the GPUs this machine has (nvidia-smi), none here: a truthful count.
        from tony_workflow.process import detect_gpus
        assert second["pid"] != first["pid"] and second["gpus_per_nm"] == len(detect_gpus())
        assert second["gpus_stand_in"] is False
        assert json.loads(run_tony("minicluster", "status", "--dir", str(d)).stdout) == second
    finally:
        r = run_tony("minicluster", "stop", "--dir", str(d))
    assert r.returncode == 0 and "stopped" in r.stderr
    assert not psutil.pid_exists(second["pid"]) or psutil.Process(second["pid"]).status() == psutil.STATUS_ZOMBIE
    assert not (d / "cluster.json").exists()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{second['rm_web']}/ws/v1/cluster/info", timeout=5)
    r = run_tony("minicluster", "stop", "--dir", str(d))
    assert r.returncode == 0 and "no mini cluster was running" in r.stderr


@pytest.mark.yarn
def test_a_plain_cluster_offers_one_queue_no_labels_and_hadoops_defaults(cluster):
    assert cluster["queues"] == {"default": {"capacity": 100, "maximum_capacity": 100}}
    assert (cluster["preemption"], cluster["node_labels"], cluster["max_application_priority"],
            cluster["node_expiry_s"]) == (False, {}, 0, None)
    [node] = cluster["nodes"]
    assert node["index"] == 0 and node["label"] == "" and not node["stopped"]
    assert node["node_id"].startswith("localhost:") and node["http_address"].startswith("localhost:")
    # The daemons run with the settings a plain cluster always had: nothing of scheduling.py.
    server = Path(cluster["hadoop_conf_dir"]).parent / "server-conf"
    assert Scheduling().server_settings(server.parent) == {}
    assert not any(k.startswith(("yarn.resourcemanager.scheduler.monitor", "yarn.node-labels", "yarn.nm.liveness",
                                 "yarn.cluster.max-application-priority")) for k in site(server, "yarn-site.xml"))
    assert site(server, "capacity-scheduler.xml")["yarn.scheduler.capacity.root.queues"] == "default"


# -- a cluster that takes containers back: preemption, node loss, node labels, priorities ----------

def rm_get(info: dict, path: str) -> dict:
    return requests.get(f"{info['rm_web']}/ws/v1/cluster/{path}", timeout=10).json()


def queue(info: dict, name: str) -> dict:
    queues = rm_get(info, "scheduler")["scheduler"]["schedulerInfo"]["queues"]["queue"]
    return next(q for q in queues if q["queueName"] == name)


def rm_node(info: dict, node_id: str) -> dict:
    return rm_get(info, f"nodes/{node_id}")["node"]


def cluster_processes(d: Path) -> list[psutil.Process]:
    """Live processes started for the mini cluster in ``d``, its JVM and containers alike (their
    command lines name the cluster's directory), found by scanning the machine."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and str(d) in " ".join(p.cmdline()):
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


@pytest.fixture(scope="module")
def scheduling_cluster(tmp_path_factory):
    """A mini cluster that takes containers back, as a shared production cluster does: two
    NodeManagers of 4 GiB, 4 vcores and 2 GPUs each, NodeManager 1 carrying the exclusive node
    label ``gpu``; the queues ``default`` and ``urgent`` (half the cluster each, all of it when
    the other is idle) with preemption; priorities up to 10; and a silent NodeManager declared
    LOST after 8 s. A test stops NodeManager 1 for good; nothing of the cluster may outlive the
    module."""
    reason = minicluster_missing()
    if reason:
        pytest.skip(reason)
    d = tmp_path_factory.mktemp("scheduling-minicluster")
    info = minicluster.start(d, nodemanagers=2, nm_memory_mb=4096, nm_vcores=4, gpus_per_nm=2, preemption=True,
                             node_labels={"gpu": [1]}, max_priority=10, node_expiry_s=8, timeout=START_TIMEOUT)
    yield info
    assert minicluster.stop(d)
    # Killed processes may take a moment to go.
    wait_for(lambda: not cluster_processes(d), timeout=30, interval=0.5)


@pytest.fixture(scope="module")
def skein_client(scheduling_cluster, tmp_path_factory):
    """A skein driver for the scheduling cluster, with the client environment it needs."""
    skein = pytest.importorskip("skein")
    saved = dict(os.environ)
    os.environ.update(minicluster.client_env(scheduling_cluster))
    tmp = tmp_path_factory.mktemp("skein")
    os.environ["SKEIN_CONFIG"] = str(tmp / "config")  # skein writes its credentials there
    try:
        with warnings.catch_warnings():  # a fresh SKEIN_CONFIG has none yet
            warnings.filterwarnings("ignore", "Skein global security credentials not found")
            client = skein.Client(log=str(tmp / "driver.log"))
        with client:
            yield client
    finally:
        os.environ.clear()
        os.environ.update(saved)


def sleepers(name: str, queue_name: str, instances: int = 1, **services) -> skein.ApplicationSpec:
    """An application of ``instances`` containers that sleep, plus ``services`` (name -> node label).
    A container that YARN takes back fails without failing the application (allow_failures)."""
    import skein
    def service(n: int, label: str = "") -> skein.Service:
        return skein.Service(resources=skein.Resources(memory="512 MiB", vcores=1), instances=n, script="sleep 600",
                             allow_failures=True, node_label=label)
    return skein.ApplicationSpec(
        name=name, queue=queue_name, master=skein.Master(resources=skein.Resources(memory="256 MiB", vcores=1)),
        services={"sleep": service(instances), **{s: service(1, label) for s, label in services.items()}})


def containers(app, service: str, *states: str) -> list:
    return app.get_containers(services=[service], states=list(states or ["RUNNING"]))


@pytest.mark.yarn
def test_the_scheduling_cluster_says_what_it_offers(scheduling_cluster):
    info = scheduling_cluster
    d = Path(info["hadoop_conf_dir"]).parent
    assert json.loads(run_tony("minicluster", "status", "--dir", str(d)).stdout) == info
    assert info["queues"] == {"default": {"capacity": 50, "maximum_capacity": 100},
                              "urgent": {"capacity": 50, "maximum_capacity": 100}}
    assert (info["preemption"], info["node_labels"], info["max_application_priority"], info["node_expiry_s"]) == (
        True, {"gpu": [1]}, 10, 8)
    assert [(n["index"], n["label"], n["stopped"]) for n in info["nodes"]] == [(0, "", False), (1, "gpu", False)]

    # The ResourceManager agrees: both nodes run, NodeManager 1 carrying gpu, each with 2 GPUs.
    for node in info["nodes"]:
        report = rm_node(info, node["node_id"])
        assert report["state"] == "RUNNING" and report["nodeHTTPAddress"] == node["http_address"]
        assert (report.get("nodeLabels") or [""]) == [node["label"]]
        gpus = {r["name"]: r["value"] for r in report["totalResource"]["resourceInformations"]["resourceInformation"]}
        assert gpus["yarn.io/gpu"] == 2 and gpus["memory-mb"] == 4096
    labels = rm_get(info, "get-node-labels")["nodeLabelInfo"]
    assert [(label["name"], label["exclusivity"]) for label in labels] == [("gpu", True)]
    for name in ("default", "urgent"):
        q = queue(info, name)
        assert (q["capacity"], q["maxCapacity"], q["defaultPriority"]) == (50, 100, 0)
        by_partition = {p["partitionName"]: p for p in q["capacities"]["queueCapacitiesByPartition"]}
        assert (by_partition["gpu"]["capacity"], by_partition["gpu"]["maxCapacity"]) == (50, 100)
    conf = site(d / "server-conf", "yarn-site.xml")
    assert conf["yarn.resourcemanager.scheduler.monitor.enable"] == "true"
    assert conf["yarn.nm.liveness-monitor.expiry-interval-ms"] == "8000"
    # As a plain cluster: GPUs counted by the DominantResourceCalculator.
    assert "DominantResourceCalculator" in site(d / "server-conf", "capacity-scheduler.xml")[
        "yarn.scheduler.capacity.resource-calculator"]

    listed = json.loads(run_tony("minicluster", "nodemanager", "list", "--dir", str(d)).stdout)
    assert [(n["index"], n["node_id"], n["state"]) for n in listed] == [
        (n["index"], n["node_id"], "RUNNING") for n in info["nodes"]]


@pytest.mark.yarn
def test_a_queue_under_its_share_takes_containers_back_by_preemption(scheduling_cluster, skein_client):
    info = scheduling_cluster
    # The default partition is NodeManager 0 (1 holds the exclusive label): 4 vcores, which an
    # ApplicationMaster and three containers fill; five more stay pending.
    filler = skein_client.submit(sleepers("filler", "default", instances=8))
    urgent = None
    try:
        wait_for(lambda: queue(info, "default")["absoluteUsedCapacity"] >= 100, timeout=120, interval=0.5)
        # Guaranteed half of the partition, the urgent queue gets its ApplicationMaster and one
        # container only by taking two of the filler's.
        urgent = skein_client.submit(sleepers("urgent", minicluster.URGENT_QUEUE, instances=1))
        def preempted():
            app = rm_get(info, f"apps/{filler}")["app"]
            return app if app["numNonAMContainerPreempted"] >= 1 else None
        report = wait_for(preempted, timeout=120, interval=0.5)
        assert report["preemptedResourceMB"] >= 512 and report["numAMContainerPreempted"] == 0
        assert report["state"] == "RUNNING"
        urgent_app = skein_client.connect(urgent)
        wait_for(lambda: containers(urgent_app, "sleep"), timeout=120, interval=0.5)

        # skein's ApplicationMaster reports YARN's diagnostics for a container it did not end itself,
        # for each one the ResourceManager counts (it hears of them on its next heartbeats).
        filler_app = skein_client.connect(filler)

        def every_preempted():
            failed = containers(filler_app, "sleep", "FAILED")
            counted = rm_get(info, f"apps/{filler}")["app"]["numNonAMContainerPreempted"]
            return failed if failed and len(failed) == counted else None
        preempted = wait_for(every_preempted, timeout=60, interval=0.5)
        assert {(str(c.state), c.exit_message) for c in preempted} == {("FAILED", "Container preempted by scheduler")}
    finally:
        for app_id in (filler, urgent):
            if app_id:
                skein_client.kill_application(app_id)


@pytest.mark.yarn
def test_an_application_priority_can_be_raised_up_to_the_clusters_maximum(scheduling_cluster, skein_client):
    info = scheduling_cluster
    app_id = skein_client.submit(sleepers("prioritised", "default"))
    try:
        wait_for(lambda: rm_get(info, f"apps/{app_id}")["app"]["state"] in ("ACCEPTED", "RUNNING"), timeout=60)
        assert rm_get(info, f"apps/{app_id}")["app"]["priority"] == 0

        def put(priority: int) -> int:
            r = requests.put(f"{info['rm_web']}/ws/v1/cluster/apps/{app_id}/priority", json={"priority": priority},
                             params={"user.name": "tony"}, timeout=10)
            assert r.status_code == 200, r.text
            return r.json()["priority"]
        assert put(5) == 5
        assert rm_get(info, f"apps/{app_id}")["app"]["priority"] == 5
        assert put(50) == 10  # capped at yarn.cluster.max-application-priority
    finally:
        skein_client.kill_application(app_id)


@pytest.fixture(scope="module")
def labelled_app(scheduling_cluster, skein_client):
    """An application with one container on the gpu label and one without, both running."""
    app_id = skein_client.submit(sleepers("labelled", "default", instances=1, gpu="gpu"))
    app = skein_client.connect(app_id)
    wait_for(lambda: containers(app, "sleep") and containers(app, "gpu"), timeout=120, interval=0.5)
    yield app_id, app
    skein_client.kill_application(app_id)


@pytest.mark.yarn
def test_a_service_asking_for_the_gpu_label_runs_on_the_labelled_nodemanager(scheduling_cluster, labelled_app):
    info = scheduling_cluster
    app_id, app = labelled_app
    [gpu] = containers(app, "gpu")
    [plain] = containers(app, "sleep")
    assert minicluster.nodemanager_of(info, gpu.yarn_node_http_address) == 1
    assert minicluster.nodemanager_of(info, plain.yarn_node_http_address) == 0
    attempt = rm_get(info, f"apps/{app_id}/appattempts")["appAttempts"]["appAttempt"][0]
    assert minicluster.nodemanager_of(info, attempt["nodeId"]) == 0  # an AM asks for no label
    # Each NodeManager lists what it holds, once it has taken the start request (skein calls a
    # container RUNNING when the AM has asked for it to start; the NodeManager may not list it yet).
    def listed():
        held = {n["index"]: n["containers"] for n in minicluster.nodemanagers(info)}
        return held if gpu.yarn_container_id in held[1] and plain.yarn_container_id in held[0] else None
    held = wait_for(listed, timeout=60, interval=0.5)
    assert gpu.yarn_container_id not in held[0] and plain.yarn_container_id not in held[1]


@pytest.mark.yarn
def test_a_lost_nodemanager_takes_its_containers_with_it(scheduling_cluster, labelled_app, skein_client):
    """Last of the module: NodeManager 1 stays stopped."""
    info = scheduling_cluster
    d = Path(info["hadoop_conf_dir"]).parent
    app_id, app = labelled_app
    [gpu] = containers(app, "gpu")
    [plain] = containers(app, "sleep")
    node_id = info["nodes"][1]["node_id"]
    wait_for(lambda: app_processes(gpu.yarn_container_id), timeout=60)

    r = run_tony("minicluster", "nodemanager", "stop", "--dir", str(d), "--index", "1")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {**info["nodes"][1], "stopped": True}
    # Its containers' processes are killed with it, as when a machine dies.
    wait_for(lambda: not app_processes(gpu.yarn_container_id), timeout=30, interval=0.5)
    assert minicluster.status(d)["nodes"][1]["stopped"] is True

    # The ResourceManager was not told: it declares the node LOST when node_expiry_s has passed,
    # and the container ends as ABORTED, which skein reports as YARN's diagnostics.
    wait_for(lambda: rm_node(info, node_id)["state"] == "LOST", timeout=60, interval=0.5)
    [lost] = wait_for(lambda: containers(app, "gpu", "FAILED"), timeout=60, interval=0.5)
    assert lost.exit_message == "Container released on a *lost* node"
    # The rest of the application carries on, on the other node.
    assert [c.id for c in containers(app, "sleep")] == [plain.id]
    assert rm_get(info, f"apps/{app_id}")["app"]["state"] == "RUNNING"
    listed = {n["index"]: n for n in minicluster.nodemanagers(minicluster.status(d))}
    assert (listed[1]["state"], listed[1]["containers"], listed[0]["state"]) == ("LOST", {}, "RUNNING")

    with pytest.raises(minicluster.MiniClusterError, match="already stopped"):
        minicluster.stop_nodemanager(d, 1)


# -- bad input: a clear message and exit status 2, never a traceback ------------------------------

def fake_jdk(tmp_path: Path, version: str = "17") -> Path:
    """A JAVA_HOME whose java reports ``version`` the way a real one does, and does nothing else."""
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    for tool in ("java", "javac"):
        (home / "bin" / tool).write_text(
            f"#!/bin/sh\necho '    java.specification.version = {version}' >&2\necho 'openjdk version' >&2\n")
        (home / "bin" / tool).chmod(0o755)
    return home


def assert_clean_failure(r, *needles: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("tony minicluster: "), r.stderr
    for n in needles:
        assert n in r.stderr, r.stderr


def test_start_without_java_fails_cleanly(tmp_path):
    r = run_tony("minicluster", "start", "--dir", str(tmp_path / "mc"),
                 env={"JAVA_HOME": str(tmp_path / "no-jdk")})
    assert_clean_failure(r, "JAVA_HOME", "JDK 17")


def test_start_with_an_old_java_fails_cleanly(tmp_path):
    r = run_tony("minicluster", "start", "--dir", str(tmp_path / "mc"),
                 env={"JAVA_HOME": str(fake_jdk(tmp_path, "11"))})
    assert_clean_failure(r, "needs Java 17 or newer", "Java 11")


def test_start_when_maven_fails_reports_its_output(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mvn").write_text("#!/bin/sh\necho '[ERROR] Could not transfer artifact: Network is unreachable'\n"
                                 "exit 1\n")
    (bin_dir / "mvn").chmod(0o755)
    env = {"JAVA_HOME": str(fake_jdk(tmp_path)), "TONY_HADOOP_LIB": str(tmp_path / "lib"),
           "PATH": f"{bin_dir}:/usr/bin:/bin"}
    r = run_tony("minicluster", "start", "--dir", str(tmp_path / "mc"), env=env)
    assert_clean_failure(r, "Maven could not fetch the Hadoop 3.5.0 jars", "Network is unreachable")
    assert not (tmp_path / "lib" / ".tony-pom-sha256").exists()


def test_start_without_maven_and_without_cached_jars_fails_cleanly(tmp_path):
    env = {"JAVA_HOME": str(fake_jdk(tmp_path)), "TONY_HADOOP_LIB": str(tmp_path / "lib"), "PATH": "/nonexistent"}
    r = run_tony("minicluster", "start", "--dir", str(tmp_path / "mc"), env=env)
    assert_clean_failure(r, "Maven ('mvn') is needed", "TONY_HADOOP_LIB")


def test_start_on_a_port_in_use_fails_cleanly(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run_tony("minicluster", "start", "--dir", str(tmp_path / "mc"), "--rm-web-port", str(port))
    assert_clean_failure(r, f"port {port} (ResourceManager web) is not free")


def test_a_jvm_that_dies_while_starting_is_reported_with_its_log(tmp_path):
    jdk = fake_jdk(tmp_path)
    (jdk / "bin" / "java").write_text(
        "#!/bin/sh\ncase \"$*\" in *XshowSettings*) echo '    java.specification.version = 17' >&2; exit 0;; esac\n"
        "echo 'tony-minicluster: failed to start'; echo 'java.lang.OutOfMemoryError: Java heap space'; exit 1\n")
    lib = tmp_path / "lib"
    lib.mkdir()
    # A cache that looks filled, so that neither Maven nor javac is needed.
    (lib / ".tony-pom-sha256").write_text(_sha256(_POM))
    r = run_tony("minicluster", "start", "--dir", str(tmp_path / "mc"),
                 env={"JAVA_HOME": str(jdk), "TONY_HADOOP_LIB": str(lib)})
    assert_clean_failure(r, "exited with status 1 while starting", "OutOfMemoryError", "minicluster.log")
    assert minicluster.status(tmp_path / "mc") is None


def test_start_with_bad_sizes_fails_cleanly(tmp_path):
    r = run_tony("minicluster", "start", "--dir", str(tmp_path / "mc"), "--nodemanagers", "0")
    assert_clean_failure(r, "nodemanagers must be an integer >= 1")


@pytest.mark.parametrize("args, message", [
    (["--node-labels", "gpu"], "LABEL=INDEX"),
    (["--node-labels", "gpu=1"], "numbered 0 to 0"),
    (["--nodemanagers", "2", "--node-labels", "gpu=0,gpu=1"], "leaving none for ApplicationMasters"),
    (["--nodemanagers", "2", "--node-labels", "gpu=1,big=1"], "one label at most"),
    (["--node-labels", "g/pu=0", "--nodemanagers", "2"], "letters, digits"),
    (["--max-priority", "-1"], "max_priority must be an integer >= 0"),
    (["--node-expiry-s", "1"], "at least 3 seconds"),
])
def test_start_with_bad_scheduling_options_fails_cleanly(tmp_path, args, message):
    r = run_tony("minicluster", "start", "--dir", str(tmp_path / "mc"), *args)
    assert_clean_failure(r, message)
    assert not (tmp_path / "mc").exists()  # refused before anything was written


def test_nodemanager_commands_without_a_cluster(tmp_path):
    r = run_tony("minicluster", "nodemanager", "stop", "--dir", str(tmp_path), "--index", "1")
    assert_clean_failure(r, f"no mini cluster is running in {tmp_path}")
    r = run_tony("minicluster", "nodemanager", "list", "--dir", str(tmp_path))
    assert r.returncode == 1 and "no mini cluster is running" in r.stderr


def test_stop_and_status_without_a_cluster(tmp_path):
    assert run_tony("minicluster", "stop", "--dir", str(tmp_path)).returncode == 0
    r = run_tony("minicluster", "status", "--dir", str(tmp_path))
    assert r.returncode == 1 and "no mini cluster is running" in r.stderr


def test_the_tony_command_loads_the_mini_cluster_only_for_tony_minicluster():
    code = ("import sys, tony_workflow.client.cli as cli; cli.build_parser().parse_args(['list']); "
            "print([m for m in sys.modules if m.startswith('tony_workflow.minicluster')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.strip() == "[]"
    # The help `tony` shows for the command it does not load is the command's own.
    assert minicluster.cli._HELP in run_tony("--help", env={"COLUMNS": "200"}).stdout
    r = run_tony("minicluster", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: tony minicluster [-h] {start,stop,status,env,nodemanager}")

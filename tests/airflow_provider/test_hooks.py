"""TonyHook against real Airflow connections (``AIRFLOW_CONN_<ID>``): which backend a connection
makes, what its fields set, that one hook keeps one client, and that a YARN connection's addresses
drive the YARN backend with no HADOOP_CONF_DIR. Only the last test needs the Hadoop mini cluster."""
from __future__ import annotations

import copy
import json
import os

import pytest
import yaml

from airflow_provider.get_provider_info import get_provider_info
from airflow_provider.hooks import TonyHook
from airflow_provider.operators import TonyOperator
from airflow_provider.triggers import TonyJobTrigger
from tony_workflow import hadoop
from tony_workflow.storage import open_storage


def define(monkeypatch, conn_id: str, **extra) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "tony", "extra": extra}))


@pytest.fixture
def no_hadoop_env(monkeypatch, tmp_path):
    """No HADOOP_CONF_DIR, and a private cache for the conf directories the backend writes."""
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "tony-workflow" / "hadoop-conf"


def test_no_default_connection_means_the_embedded_cluster(airflow_db, tony_home, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_TONY_DEFAULT", raising=False)
    hook = TonyHook()
    assert hook.tony_conn_id == "tony_default" and hook.backend == "local"
    assert hook.connection_conf() == {}
    assert hook.get_conn().backend.name == "local"


def test_a_connection_sets_the_queue_and_node_label_of_its_jobs(airflow_db, monkeypatch):
    define(monkeypatch, "tony_q", backend="local", queue="research", extra__tony__node_label="gpu")
    hook = TonyHook("tony_q")
    assert hook.backend == "local"
    assert hook.connection_conf() == {"tony.yarn.queue": "research", "tony.application.node-label": "gpu"}


def test_a_jobs_proxy_user_comes_from_the_operator_else_the_connection(airflow_db, tony_home, monkeypatch):
    from datetime import datetime

    from airflow.sdk import DAG
    define(monkeypatch, "tony_proxy", backend="local", proxy_user="etl")
    job = {"name": "p", "command": "true", "tasks": {"worker": {"instances": 1}}}
    with DAG("tony_proxy_users", schedule=None, start_date=datetime(2026, 1, 1)):
        theirs = TonyOperator(task_id="a", job_spec=job, tony_conn_id="tony_proxy")
        mine = TonyOperator(task_id="b", job_spec=job, tony_conn_id="tony_proxy", proxy_user="alice")
        nobody = TonyOperator(task_id="c", job_spec=job)
    assert theirs.build_spec().proxy_user == "etl"
    assert mine.build_spec().proxy_user == "alice" and "proxy_user" in TonyOperator.template_fields
    assert nobody.build_spec().proxy_user is None


def test_an_unknown_connection_raises(airflow_db):
    from airflow.sdk.exceptions import AirflowNotFoundException
    with pytest.raises(AirflowNotFoundException):
        TonyHook("tony_nowhere").get_conn()


def test_one_hook_one_client_shared_by_the_operator_its_copies_and_the_trigger(airflow_db, tony_home,
                                                                               monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_TONY_DEFAULT", raising=False)
    hook = TonyHook()
    assert hook.get_conn() is hook.get_conn()
    op = TonyOperator(task_id="t", job_spec={"name": "x"})
    assert op.hook is op.hook
    client = op.hook.get_conn()
    assert copy.deepcopy(op).hook.get_conn() is client and copy.copy(op).hook.get_conn() is client
    trigger = TonyJobTrigger("application_1_0001")
    assert trigger.hook is trigger.hook


def test_every_field_of_the_connection_form_is_read_by_the_hook(airflow_db, monkeypatch, no_hadoop_env):
    fields = get_provider_info()["connection-types"][0]["conn-fields"]
    values = {"backend": "yarn", "hadoop_conf_dir": None, "rm_address": "rm.example.com",
              "rm_web_address": "http://rm-web.example.com:8188", "webhdfs": "http://nn.example.com:9870",
              "queue": "q", "node_label": "gpu", "principal": "tony@EXAMPLE.COM", "keytab": "/k/tony.keytab"}
    assert set(fields) == set(values)
    define(monkeypatch, "tony_all", **{k: v for k, v in values.items() if v})
    hook = TonyHook("tony_all")
    backend = hook.get_conn().backend
    assert hook.connection_conf() == {"tony.yarn.queue": "q", "tony.application.node-label": "gpu"}
    assert (backend.principal, backend.keytab) == ("tony@EXAMPLE.COM", "/k/tony.keytab")
    assert backend.rm_web == "http://rm-web.example.com:8188"
    assert backend.conf["yarn.resourcemanager.address"] == "rm.example.com:8032"
    assert backend.conf["dfs.namenode.http-address"] == "nn.example.com:9870"


def test_a_yarn_connection_needs_no_hadoop_conf_dir(airflow_db, monkeypatch, no_hadoop_env):
    define(monkeypatch, "tony_yarn", backend="yarn", rm_address="rm.example.com:8032",
           webhdfs="http://nn.example.com:9870")
    backend = TonyHook("tony_yarn").get_conn().backend
    assert backend.name == "yarn" and not backend.driver_started  # nothing started yet, no network used
    assert backend.rm_web == "http://rm.example.com:8088"
    assert backend.conf_dir.parent == no_hadoop_env
    assert hadoop.read_site(backend.conf_dir / "yarn-site.xml") == {
        "yarn.resourcemanager.hostname": "rm.example.com",
        "yarn.resourcemanager.address": "rm.example.com:8032",
        "yarn.resourcemanager.webapp.address": "rm.example.com:8088",
        "yarn.http.policy": "HTTP_ONLY"}
    assert hadoop.read_site(backend.conf_dir / "core-site.xml") == {"fs.defaultFS": "hdfs://nn.example.com:8020"}
    assert hadoop.read_site(backend.conf_dir / "hdfs-site.xml")["dfs.namenode.http-address"] == "nn.example.com:9870"
    # the application's HDFS directory (checkpoints, final status) is reached through that WebHDFS
    from tony_workflow.backends.yarn import app_store
    store = open_storage(app_store("application_1_0001"), hadoop_conf_dir=backend.conf_dir)
    assert store.client.hosts == ["nn.example.com:9870"]
    assert "HADOOP_CONF_DIR" not in os.environ
    # the same settings elsewhere (another task, the triggerer) share the directory
    assert TonyHook("tony_yarn").get_conn().backend.conf_dir == backend.conf_dir


def test_connection_addresses_win_over_a_hadoop_conf_dir(airflow_db, monkeypatch, tmp_path, no_hadoop_env):
    base = tmp_path / "etc-hadoop"
    base.mkdir()
    (base / "yarn-site.xml").write_text(
        "<configuration><property><name>yarn.resourcemanager.hostname</name><value>old-rm</value></property>"
        "<property><name>yarn.resourcemanager.webapp.address</name>"
        "<value>${yarn.resourcemanager.hostname}:8088</value></property>"
        "<property><name>yarn.scheduler.minimum-allocation-mb</name><value>256</value></property></configuration>")
    (base / "core-site.xml").write_text(
        "<configuration><property><name>fs.defaultFS</name><value>hdfs://nameservice1</value></property>"
        "</configuration>")
    (base / "log4j.properties").write_text("log4j.rootLogger=WARN\n")
    define(monkeypatch, "tony_base", backend="yarn", hadoop_conf_dir=str(base))
    assert TonyHook("tony_base").get_conn().backend.rm_web == "http://old-rm:8088"  # ${...} expanded
    define(monkeypatch, "tony_over", backend="yarn", hadoop_conf_dir=str(base), rm_address="new-rm:9032",
           rm_web_address="https://new-rm:9443", webhdfs="nn1.example.com")
    backend = TonyHook("tony_over").get_conn().backend
    assert backend.rm_web == "https://new-rm:9443"
    assert backend.conf["yarn.resourcemanager.address"] == "new-rm:9032"
    assert backend.conf["yarn.scheduler.minimum-allocation-mb"] == "256"  # the rest of the directory stays
    assert (backend.conf_dir / "log4j.properties").read_text() == "log4j.rootLogger=WARN\n"
    assert backend.conf["fs.defaultFS"] == "hdfs://nameservice1"
    assert backend.conf["dfs.namenode.http-address.nameservice1"] == "nn1.example.com:9870"


@pytest.mark.parametrize("fields, message", [
    ({"rm_address": "http://rm.example.com:8088"}, "rm_web_address"),
    ({"rm_address": "rm.example.com", "rm_web_address": "ftp://rm.example.com"}, "rm_web_address"),
    ({"webhdfs": "http://nn.example.com:9870"}, "rm_address"),
    ({}, "rm_address"),
])
def test_a_yarn_connection_without_usable_addresses_is_refused(airflow_db, monkeypatch, no_hadoop_env,
                                                               fields, message):
    define(monkeypatch, "tony_bad", backend="yarn", **fields)
    with pytest.raises(ValueError, match=message):
        TonyHook("tony_bad").get_conn()


@pytest.mark.yarn
def test_a_job_runs_on_yarn_through_the_connection_addresses_alone(airflow_db, hadoop_cluster, monkeypatch,
                                                                   no_hadoop_env):
    from tony_workflow import minicluster
    from tony_workflow.client import load_job
    env = minicluster.client_env(hadoop_cluster)
    monkeypatch.setenv("JAVA_HOME", env["JAVA_HOME"])
    monkeypatch.setenv("PATH", env["PATH"])  # skein's `yarn classpath`
    define(monkeypatch, "tony_mc", backend="yarn", rm_address=hadoop_cluster["rm_address"],
           rm_web_address=hadoop_cluster["rm_web"], webhdfs=hadoop_cluster["webhdfs"])
    hook = TonyHook("tony_mc")
    job = {"name": "conn", "am": {"memory": "512m"}, "command": "sleep 1",
           "tasks": {"worker": {"instances": 1, "memory": "512m"}}, "conf": {"tony.task.tensorboard.enabled": "false"}}
    handle = hook.submit(load_job(yaml.safe_dump(job)))
    final = handle.wait(poll_interval=1, timeout=300)
    assert final.state == "SUCCEEDED", final.diagnostics
    # the full final status (with its tasks) was written by the AM and read back through WebHDFS
    stored = hook.get_conn().backend.stored_status(handle.app_id)
    assert stored.state == "SUCCEEDED" and [t.task_id for t in stored.tasks] == ["worker:0"]
    assert "HADOOP_CONF_DIR" not in os.environ

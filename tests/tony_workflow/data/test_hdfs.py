"""The reader on a real HDFS (the Hadoop mini cluster's, over WebHDFS): files written by pyarrow,
fastavro and TensorFlow read from ``hdfs:///`` paths, a unit in few requests, and a YARN job whose
workers read their shares from HDFS."""
from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import app_processes, wait_for
from tests.tony_workflow.data.test_reader import N, write
from tony_workflow.client import TonyClient, load_job
from tony_workflow.client.data import stage_input
from tony_workflow.data import dataset
from tony_workflow.data.fs import HDFSFileSystem

pytestmark = pytest.mark.yarn


@pytest.fixture
def staged(yarn_cluster, tmp_path):
    """Stages a local directory into the user's HDFS home; returns its hdfs:// URI."""
    backend = TonyClient("yarn").backend

    def stage(local, name):
        return stage_input(local, backend, name)
    return stage


@pytest.mark.parametrize("fmt", ["parquet", "orc", "avro"])
def test_each_format_reads_from_hdfs_as_from_local_files(staged, tmp_path, fmt):
    uri = staged(write(tmp_path / fmt, fmt), f"test-{fmt}")
    assert uri.startswith("hdfs://")
    seen = collections.Counter()
    for rank in range(2):
        for batch in dataset(path=uri, batch_size=64, rank=rank, world=2, remainder="partial", shuffle=True):
            seen.update(batch["id"].tolist())
    assert sorted(seen) == list(range(N)) and max(seen.values()) == 1


@pytest.mark.tf
def test_tfrecords_written_by_tensorflow_read_from_hdfs(staged, tmp_path):
    from tests.tony_workflow.data.tfrecords import write_examples
    local = tmp_path / "tfr"
    local.mkdir()
    write_examples(local / "a.tfrecord", 300)
    write_examples(local / "b.tfrecord.gz", 200, "GZIP", start=300)
    uri = staged(local, "test-tfrecord")
    ids = sorted(i for b in dataset(path=uri, batch_size=50, remainder="partial") for i in b["id"].tolist())
    assert ids == list(range(500))


def test_a_unit_is_read_in_few_requests_and_a_hdfs_path_names_its_namenode(staged, tmp_path, monkeypatch):
    local = tmp_path / "big"
    local.mkdir()
    rows = 40_000
    pq.write_table(pa.table({"id": np.arange(rows), "x": np.random.default_rng(0).random(rows)}),
                   local / "a.parquet", row_group_size=5_000)
    uri = staged(local, "test-requests")
    reads = []
    original = HDFSFileSystem.read

    def counted(self, path, offset, length):
        reads.append((offset, length))
        return original(self, path, offset, length)

    monkeypatch.setattr(HDFSFileSystem, "read", counted)
    default_fs = "hdfs:///" + uri.split("://", 1)[1].split("/", 1)[1]  # hdfs:///user/...: fs.defaultFS's
    ds = dataset(path=default_fs, batch_size=1000, remainder="partial")
    assert ds.plan.files[0].path.startswith(uri)  # the plan names the NameNode, for tasks of any configuration
    planning = len(reads)
    ids = [i for b in ds for i in b["id"].tolist()]
    assert ids == list(range(rows))
    units = len(ds.plan.units)
    # Where each unit's replicas are, from one GETFILEBLOCKLOCATIONS for the file.
    assert len(ds.plan.unit_hosts) == units and all(ds.plan.unit_hosts), ds.plan.unit_hosts
    assert units == 8 and len(reads) - planning <= 2 * units, reads  # a block a request, the next read ahead


@pytest.mark.job
def test_a_yarn_jobs_workers_read_their_shares_from_hdfs(staged, tmp_path):
    from tests.tony_workflow.jobs.test_data_jobs import ids_read, yarn_reader_job
    uri = staged(write(tmp_path / "d"), "test-job")
    out = tmp_path / "out"
    out.mkdir()
    h = TonyClient("yarn").submit(load_job(yarn_reader_job(uri, out)))
    st = h.wait(poll_interval=1, timeout=600)
    assert st.state == "SUCCEEDED", st.diagnostics
    seen = ids_read(out, 2)
    assert sorted(seen) == list(range(N)) and max(seen.values()) == 1
    # YARN's NodeManagers clean a finished application's containers up a moment after it ends.
    wait_for(lambda: not app_processes(h.app_id), timeout=120)


def test_a_local_path_is_refused_on_yarn_naming_it(yarn_cluster, tmp_path):
    from tony_workflow.errors import SpecError
    job = {"name": "x", "executes": "t.py", "tasks": {"worker": {"instances": 1}},
           "framework": "standalone", "data": {"train": {"path": str(write(tmp_path / "d"))}}}
    with pytest.raises(SpecError, match="YARN's nodes cannot read"):
        TonyClient("yarn").submit(load_job(job))


@pytest.fixture(scope="module")
def two_datanodes(tmp_path_factory):
    """A cluster of this module's own, of two DataNodes, with a replica of every block on each:
    its tests stop them as machines die."""
    from tests.conftest import minicluster_missing, own_minicluster
    reason = minicluster_missing()
    if reason:
        pytest.skip(reason)
    with own_minicluster(tmp_path_factory.mktemp("two-dn"), datanodes=2) as info:
        yield info


def test_a_datanode_that_dies_while_a_job_reads_is_avoided_and_every_row_is_read(two_datanodes, tmp_path, caplog):
    # One DataNode is stopped as a machine dies, without the NameNode being told, after the
    # reading began. Many small files make many requests after that: the NameNode sends about half
    # of them to the dead DataNode, until it is named to avoid.
    from tony_workflow.minicluster import stop_datanode
    local = tmp_path / "many"
    local.mkdir()
    files, per_file = 24, 1000
    for i in range(files):
        pq.write_table(pa.table({"id": np.arange(i * per_file, (i + 1) * per_file)}), local / f"part-{i:02d}.parquet")
    assert [d["index"] for d in two_datanodes["datanodes"]] == [0, 1]
    uri = stage_input(local, TonyClient("yarn").backend, "two-replicas")
    ds = dataset(path=uri, batch_size=500, remainder="partial")
    batches = iter(ds)
    ids = next(batches)["id"].tolist()
    caplog.set_level("WARNING", logger="tony.data")
    stopped = stop_datanode(two_datanodes["dir"], 0)
    ids += [i for b in batches for i in b["id"].tolist()]
    assert sorted(ids) == list(range(files * per_file))
    failed = [r.getMessage() for r in caplog.records if "failed; reading another replica" in r.getMessage()]
    assert failed and all(stopped["http_address"] in m for m in failed), (failed, stopped)


def test_with_no_datanode_left_a_submission_says_why_and_submits_nothing(two_datanodes, tmp_path):
    # Every DataNode is stopped as machines die: the NameNode still names them, and the files
    # skein's driver writes for the application (its launch script, its spec) find no DataNode to
    # take their blocks. The job names an interpreter its nodes have and their packages, so that
    # nothing else is written to HDFS first.
    import json
    import sys

    import requests

    from tests.conftest import run_tony
    from tony_workflow.minicluster import stop_datanode
    state = json.loads((Path(two_datanodes["dir"]) / "cluster.json").read_text())
    for node in state["datanodes"]:
        if not node["stopped"]:
            stop_datanode(two_datanodes["dir"], node["index"])
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps({
        "name": "no-datanode", "framework": "standalone",
        "tasks": {"worker": {"instances": 1, "memory": "256m", "vcores": 1, "command": "true"}},
        "conf": {"tony.am.memory": "256m", "tony.task.tensorboard.enabled": "false",
                 "tony.yarn.python": sys.executable, "tony.yarn.environment": "nodes"}}))
    done = run_tony("--backend", "yarn", "submit", str(job), timeout=300)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    said = done.stderr.strip().splitlines()
    assert said[-1].startswith("tony: HDFS took none of the job's files"), said
    assert "nothing was submitted" in said[-1] and "dfs.datanode.data.dir" in said[-1], said
    assert any("trying once more" in line for line in said), said  # a DataNode busy for a moment is given a second try
    apps = requests.get(f"{two_datanodes['rm_web']}/ws/v1/cluster/apps", timeout=30).json()["apps"]
    assert not [a for a in (apps or {}).get("app", []) if a["name"] == "no-datanode"], apps

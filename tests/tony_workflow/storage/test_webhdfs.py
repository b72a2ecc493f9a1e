"""WebHDFS storage: how locations resolve and errors are retried (no cluster needed), and the store
and the checkpoint mirror against a real HDFS in the mini cluster (``yarn`` tier)."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tony_workflow.storage import LocalStorage, WebHDFSStorage, open_storage
from tony_workflow.task.checkpoint_mirror import CheckpointMirror

pyhdfs = pytest.importorskip("pyhdfs")


def write(p: Path, data: str | bytes) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    return p


def hadoop_conf(tmp_path: Path, core: dict[str, str] | None = None, hdfs: dict[str, str] | None = None) -> Path:
    d = tmp_path / "hadoop-conf"
    d.mkdir(parents=True, exist_ok=True)
    for name, props in (("core-site.xml", core or {}), ("hdfs-site.xml", hdfs or {})):
        body = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())
        (d / name).write_text(f"<?xml version=\"1.0\"?><configuration>{body}</configuration>")
    return d


# -- locations --------------------------------------------------------------------------------------

def test_local_locations_stay_local(tmp_path):
    assert isinstance(open_storage(str(tmp_path)), LocalStorage)
    assert isinstance(open_storage(f"file://{tmp_path}"), LocalStorage)


def test_webhdfs_locations_name_the_http_address(tmp_path):
    s = open_storage("webhdfs://nn.example:9870/ckpt/job")
    assert isinstance(s, WebHDFSStorage)
    assert (s.client.hosts, s.root, s.scheme, s.uri) == (["nn.example:9870"], "/ckpt/job", "http",
                                                        "webhdfs://nn.example:9870/ckpt/job")
    assert open_storage("swebhdfs://nn.example:9871/x").scheme == "https"
    with pytest.raises(ValueError, match="host:port"):
        open_storage("webhdfs:///ckpt")


def test_hdfs_locations_find_webhdfs_in_the_hadoop_configuration(tmp_path, monkeypatch):
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    # No configuration: the NameNode's host on Hadoop's default HTTP port.
    assert open_storage("hdfs://nn.example:8020/ckpt").client.hosts == ["nn.example:9870"]

    conf = hadoop_conf(tmp_path, core={"fs.defaultFS": "hdfs://nn.example:8020"},
                       hdfs={"dfs.namenode.http-address": "0.0.0.0:50070"})
    s = open_storage("hdfs://nn.example:8020/ckpt", hadoop_conf_dir=conf)
    assert (s.client.hosts, s.root, s.uri) == (["nn.example:50070"], "/ckpt", "hdfs://nn.example:8020/ckpt")
    monkeypatch.setenv("HADOOP_CONF_DIR", str(conf))
    assert open_storage("hdfs:///ckpt").client.hosts == ["nn.example:50070"]  # fs.defaultFS


def test_hdfs_locations_of_an_ha_nameservice_use_every_namenode(tmp_path):
    conf = hadoop_conf(tmp_path, hdfs={
        "dfs.nameservices": "prod", "dfs.ha.namenodes.prod": "nn1, nn2",
        "dfs.namenode.http-address.prod.nn1": "a.example:9870",
        "dfs.namenode.http-address.prod.nn2": "b.example:9870"})
    assert sorted(open_storage("hdfs://prod/ckpt", hadoop_conf_dir=conf).client.hosts) == [
        "a.example:9870", "b.example:9870"]
    broken = hadoop_conf(tmp_path / "b", hdfs={"dfs.ha.namenodes.prod": "nn1,nn2",
                                               "dfs.namenode.http-address.prod.nn1": "a.example:9870"})
    with pytest.raises(ValueError, match="dfs.namenode.http-address.prod.nn2"):
        open_storage("hdfs://prod/ckpt", hadoop_conf_dir=broken)


def test_unusable_locations_are_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    with pytest.raises(ValueError, match="fs.defaultFS"):
        open_storage("hdfs:///ckpt")
    with pytest.raises(ValueError, match="unsupported storage location"):
        open_storage("s3://bucket/ckpt")
    with pytest.raises(ValueError, match="escapes the store"):
        WebHDFSStorage("nn:9870", "/ckpt")._path("../other/file")


# -- errors and retries -----------------------------------------------------------------------------

class Flaky:
    """Raises the given errors in turn, then returns ``result``."""

    def __init__(self, errors, result=None):
        self.errors, self.result, self.calls = list(errors), result, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.result


def server_error(status: int, exception: str = "RuntimeException"):
    classes = {500: pyhdfs.HdfsRuntimeException, 403: pyhdfs.HdfsAccessControlException}
    cls = classes.get(status, pyhdfs.HdfsHttpException)
    return cls(message="boom", exception=exception, javaClassName="x", status_code=status)


def test_connection_errors_and_5xx_are_retried_with_backoff(monkeypatch):
    s = WebHDFSStorage("nn:9870", "/ckpt", attempts=4, base_delay=0.01)
    status = pyhdfs.FileStatus(type="DIRECTORY", pathSuffix="", length=0, modificationTime=0)
    stat = Flaky([pyhdfs.HdfsNoServerException("down"), server_error(500), server_error(503)], result=status)
    monkeypatch.setattr(s.client, "get_file_status", stat)
    monkeypatch.setattr(s.client, "list_status", Flaky([], result=[]))
    assert s.list("") == {} and stat.calls == 4


def test_other_errors_surface_at_once_as_oserrors(monkeypatch, tmp_path):
    s = WebHDFSStorage("nn:9870", "/ckpt", attempts=4, base_delay=0.01)
    denied = Flaky([server_error(403, "AccessControlException")])
    monkeypatch.setattr(s.client, "delete", denied)
    with pytest.raises(PermissionError, match="delete /ckpt/k"):
        s.delete("k")
    assert denied.calls == 1
    missing = Flaky([pyhdfs.HdfsFileNotFoundException(message="File /ckpt/k not found.", exception="x",
                                                      javaClassName="x", status_code=404)])
    monkeypatch.setattr(s.client, "open", missing)
    with pytest.raises(FileNotFoundError):
        s.get("k", tmp_path / "k")
    assert missing.calls == 1 and not list(tmp_path.iterdir())


def test_an_unreachable_namenode_fails_after_the_retries(tmp_path):
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again at once: nothing listens there
    s = WebHDFSStorage(f"127.0.0.1:{port}", "/ckpt", attempts=3, base_delay=0.01, timeout=2)
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}"):
        s.put(write(tmp_path / "f", "x"), "f")


# -- against HDFS in the mini cluster ---------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(hadoop_cluster):
    return hadoop_cluster


@pytest.fixture
def store(cluster, request):
    root = f"/tests/{request.node.name}"
    return WebHDFSStorage(cluster["webhdfs"].split("://", 1)[1], root)


@pytest.mark.yarn
def test_round_trip_on_real_hdfs(store, tmp_path):
    data = os.urandom(3 << 20)
    store.put(write(tmp_path / "up" / "big", data), "a/b/big")
    store.put(write(tmp_path / "up" / "small", "v1"), "small")
    store.put(write(tmp_path / "up" / "small", "v2"), "small")  # overwrite in place
    listing = store.list("")
    assert sorted(listing) == ["a/b/big", "small"] and listing["a/b/big"].size == len(data)
    assert store.list("a") == {"b/big": listing["a/b/big"]}
    assert store.list("nothing-here") == {}

    store.get("a/b/big", tmp_path / "down" / "big")
    store.get("small", tmp_path / "down" / "small")
    assert (tmp_path / "down" / "big").read_bytes() == data
    assert (tmp_path / "down" / "small").read_text() == "v2"
    with pytest.raises(FileNotFoundError):
        store.get("missing", tmp_path / "down" / "missing")

    # files being written are not listed
    store.client.create(f"{store.root}/a/ckpt-9.index.tmp", b"partial")
    store.client.create(f"{store.root}/a/big.0123.tony-part", b"partial")
    assert sorted(store.list("")) == ["a/b/big", "small"]

    store.delete("a/b/big")
    store.delete("a/b/big")  # already gone: no error
    assert sorted(store.list("")) == ["small"]


@pytest.mark.yarn
def test_published_files_are_never_replaced_and_shared_directories_are_sticky(store, tmp_path):
    assert not store.exists("cache/d1/conf.zip")
    assert store.publish(write(tmp_path / "a", "first"), "cache/d1/conf.zip") is True
    before = store.list("cache")["d1/conf.zip"]
    assert store.publish(write(tmp_path / "b", "second"), "cache/d1/conf.zip") is False
    store.get("cache/d1/conf.zip", tmp_path / "back")
    assert (tmp_path / "back").read_text() == "first" and store.list("cache")["d1/conf.zip"] == before
    assert store.exists("cache/d1/conf.zip") and sorted(store.list("cache")) == ["d1/conf.zip"]  # no part left

    store.shared_dir("line/root.default")
    for d in ("/line", "/line/root.default"):  # made here (the store's own directory was there already)
        status = store.client.get_file_status(f"{store.root}{d}")
        assert status.type == "DIRECTORY" and status.permission == "1777", (d, status)
    store.touch("line/root.default/intent-7")
    assert store.list("line") == {"root.default/intent-7": store.list("line")["root.default/intent-7"]}
    assert store.list("line")["root.default/intent-7"].size == 0


@pytest.mark.yarn
def test_readers_never_see_a_partial_file(store, tmp_path):
    data = os.urandom(24 << 20)
    src = write(tmp_path / "ckpt.data", data)
    seen: list[int] = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            entry = store.list("").get("ckpt.data")
            if entry:
                seen.append(entry.size)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        store.put(src, "ckpt.data")
        store.put(src, "ckpt.data")
    finally:
        done.set()
        watcher.join()
    assert seen and set(seen) == {len(data)}


@pytest.mark.yarn
def test_checkpoint_mirror_syncs_and_restores_through_real_hdfs(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("HADOOP_CONF_DIR", cluster["hadoop_conf_dir"])
    store = open_storage("hdfs:///tests/mirror")  # fs.defaultFS and the WebHDFS address from the conf
    assert isinstance(store, WebHDFSStorage) and store.client.hosts == [cluster["webhdfs"].split("://", 1)[1]]
    puts: list[str] = []
    real_put = store.put
    monkeypatch.setattr(store, "put", lambda local, key: (puts.append(key), real_put(local, key)))

    local = tmp_path / "chief"
    m = CheckpointMirror(store, "job", local)
    write(local / "ckpt-1.data-00000-of-00001", "d1")
    write(local / "ckpt-1.index", "i1")
    write(local / "checkpoint", "latest: ckpt-1")
    write(local / "ckpt-2.index.tmp1234", "a save in progress")
    assert m.sync() == 3
    assert puts == ["job/ckpt-1.data-00000-of-00001", "job/ckpt-1.index", "job/checkpoint"]
    assert m.sync() == 0

    # the trainer rotates: ckpt-2 arrives, ckpt-1 goes
    (local / "ckpt-2.index.tmp1234").unlink()
    write(local / "ckpt-2.data-00000-of-00001", "d2")
    write(local / "ckpt-2.index", "i2")
    write(local / "checkpoint", "latest: ckpt-2")
    os.utime(local / "checkpoint", (1, 1))
    (local / "ckpt-1.data-00000-of-00001").unlink()
    (local / "ckpt-1.index").unlink()
    puts.clear()
    m.sync()
    assert puts[-1] == "job/checkpoint"
    assert sorted(store.list("job")) == ["checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index"]

    fresh = tmp_path / "relaunched" / "checkpoint"
    restored = CheckpointMirror(open_storage(f"{cluster['fs_default']}/tests/mirror"), "job", fresh)
    assert restored.restore() == 3
    assert (fresh / "checkpoint").read_text() == "latest: ckpt-2"
    assert (fresh / "ckpt-2.index").read_text() == "i2"
    assert restored.sync() == 0  # what was restored counts as mirrored

"""What a YARN job ships (:mod:`tony_workflow.backends.yarn.ship`): archives whose bytes depend on
their files alone, a cache that uploads a content once and never replaces it, and the spec carried
in the containers' environment and written out by their scripts' first lines."""
from __future__ import annotations

import json
import subprocess

from tony_workflow.backends.yarn.app import Shipment, prelude
from tony_workflow.backends.yarn.ship import SPEC_ENV, Cache, deterministic_zip, spec_env
from tony_workflow.storage import LocalStorage


def tree(root, files: dict[str, str]):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_same_files_zip_to_the_same_bytes_wherever_and_whenever(tmp_path):
    a = tree(tmp_path / "a", {"core-site.xml": "<c/>", "sub/yarn-site.xml": "<y/>", "__pycache__/x.pyc": "junk"})
    (a / "run.sh").write_text("#!/bin/sh")
    (a / "run.sh").chmod(0o755)
    first = deterministic_zip(a, tmp_path / "1.zip").read_bytes()
    # Written again later, in another order: same bytes.
    b = tree(tmp_path / "b", {"sub/yarn-site.xml": "<y/>", "core-site.xml": "<c/>"})
    (b / "run.sh").write_text("#!/bin/sh")
    (b / "run.sh").chmod(0o755)
    assert deterministic_zip(b, tmp_path / "2.zip").read_bytes() == first
    import zipfile
    with zipfile.ZipFile(tmp_path / "1.zip") as z:
        assert z.namelist() == ["core-site.xml", "run.sh", "sub/yarn-site.xml"]  # no __pycache__
        assert (z.getinfo("run.sh").external_attr >> 16) & 0o777 == 0o755  # still executable
    (b / "core-site.xml").write_text("<changed/>")
    assert deterministic_zip(b, tmp_path / "3.zip").read_bytes() != first


def test_a_shipped_file_is_uploaded_once_per_content(tmp_path):
    store = LocalStorage(tmp_path / "hdfs")
    cache = Cache(store, "hdfs://nn:8020", user="etl")
    conf = tmp_path / "hadoop-conf.zip"
    conf.write_bytes(b"v1")
    uri = cache.ship(conf, "hadoop-conf.zip")
    assert uri.startswith("hdfs://nn:8020/user/etl/.tony/cache/") and uri.endswith("/hadoop-conf.zip")
    copy = tmp_path / "hdfs" / uri.split("8020/", 1)[1]
    stamp = copy.stat().st_mtime_ns
    assert cache.ship(conf, "hadoop-conf.zip") == uri and copy.stat().st_mtime_ns == stamp  # no second upload
    conf.write_bytes(b"v2")
    assert cache.ship(conf, "hadoop-conf.zip") != uri  # new content, new copy; the old one stays
    assert copy.read_bytes() == b"v1"


def test_the_spec_rides_in_the_environment_and_the_script_writes_it_out(tmp_path):
    spec = {"name": "j", "tasks": {"worker": {"instances": 2}}, "conf": {"tony.x": "a \"quoted\" $value"}}
    env = spec_env(spec)
    assert env is not None and set(env[SPEC_ENV]) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
    script = prelude(Shipment("python3", spec_env=env)) + f'echo "left: ${{{SPEC_ENV}:-none}}"; echo "$HADOOP_CONF_DIR"'
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env={"PATH": "/usr/bin:/bin", **env},
                          capture_output=True, text=True, check=True)
    assert json.loads((tmp_path / "spec.json").read_text()) == spec
    assert done.stdout.splitlines() == ["left: none", f"{tmp_path}/hadoop-conf"]  # no task inherits it
    # Too large for one variable: it goes as a file instead.
    assert spec_env({"env": {f"K{i}": "x" * 64 for i in range(20000)}}) is None
    assert "spec.json" not in prelude(Shipment("python3"))


def test_resources_ship_as_yarn_localizes_them(tmp_path):
    import pytest
    pytest.importorskip("skein")
    from tony_workflow.backends.yarn.ship import ship_resources
    from tony_workflow.spec import SpecError
    given = tree(tmp_path / "given", {"vocab.txt": "w", "dir/a.txt": "a", "m.zip": "zip"})
    hdfs = tree(tmp_path / "hdfs", {"lib/one.jar": "1", "lib/two.jar": "2", "lib/nested/three.jar": "3",
                                    "data/x.csv": "x"})

    def open_remote(uri):  # HDFS as its WebHDFS store lists it; the store here is a local one
        return LocalStorage(str(hdfs / uri.split("://nn:8020/", 1)[1]))

    cache = Cache(LocalStorage(str(tmp_path / "store")), "hdfs://nn:8020", user="u")
    conf = {"tony.containers.resources": f"{given}/vocab.txt,{given}/dir,hdfs://nn:8020/lib",
            "tony.worker.resources": f"{given}/m.zip::model#archive,hdfs://nn:8020/data/x.csv::x"}
    shipped = ship_resources(conf, tmp_path / "staging", cache, open_remote)
    common, worker = shipped[None], shipped["worker"]
    assert sorted(common) == ["dir", "one.jar", "two.jar", "vocab.txt"]  # a directory's own files, not nested ones
    assert common["one.jar"].source == "hdfs://nn:8020/lib/one.jar" and common["one.jar"].type == "file"
    assert common["dir"].type == "archive" and common["dir"].source.endswith("/dir.zip")  # zipped, unpacked by YARN
    assert common["vocab.txt"].source.startswith("hdfs://nn:8020/user/u/.tony/cache/")  # uploaded once
    assert worker["model"].type == "archive" and worker["x"].source == "hdfs://nn:8020/data/x.csv"
    assert worker["x"].type == "file"

    def refusing(uri):
        raise PermissionError(13, "Permission denied", uri)

    with pytest.raises(SpecError, match="tony.containers.resources: hdfs://nn:8020/lib could not be given to the "
                                        "containers: .*Permission denied"):
        ship_resources({"tony.containers.resources": "hdfs://nn:8020/lib"}, tmp_path / "s2", None, refusing)


def test_a_source_that_holds_this_machines_tony_home_is_zipped_without_it(tmp_path, monkeypatch):
    src = tree(tmp_path / "home", {"train.py": "", ".tony/history/record.json": "{}"})
    monkeypatch.setenv("TONY_HOME", str(src / ".tony"))
    import zipfile
    with zipfile.ZipFile(deterministic_zip(src, tmp_path / "src.zip")) as z:
        assert z.namelist() == ["train.py"]

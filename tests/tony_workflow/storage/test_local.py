"""The local store (:mod:`tony_workflow.storage.local`) and picking a store for a location
(:mod:`tony_workflow.storage`): whole files only, keys that stay inside the store."""
from __future__ import annotations

import pytest

from tony_workflow.storage import LocalStorage, open_storage
from tony_workflow.storage.base import is_temp


def test_a_put_file_is_listed_got_and_deleted(tmp_path):
    src = tmp_path / "model.index"
    src.write_text("weights")
    store = LocalStorage(tmp_path / "store")
    store.put(src, "job/chief/model.index")
    [(key, entry)] = store.list("job").items()
    assert key == "chief/model.index" and entry.size == len("weights")
    store.get("job/chief/model.index", tmp_path / "back" / "model.index")
    assert (tmp_path / "back" / "model.index").read_text() == "weights"
    store.delete("job/chief/model.index")
    store.delete("job/chief/model.index")  # already gone: not an error
    assert store.list("job") == {}


def test_files_being_written_are_never_listed(tmp_path):
    store = LocalStorage(tmp_path)
    for name in ("ckpt-1.index", "ckpt-1.index.tony-part", "ckpt-2.data.tmp", ".hidden", "state~", "a_temp/x"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert set(store.list("")) == {"ckpt-1.index", "a_temp/x"}
    assert is_temp("dir/ckpt.tony-part") and not is_temp("dir/ckpt-1.index")


def test_a_key_that_escapes_the_store_is_refused(tmp_path):
    store = LocalStorage(tmp_path / "store")
    with pytest.raises(ValueError, match="escapes the store"):
        store.put(tmp_path / "x", "../outside")


def test_a_failed_put_leaves_no_partial_file(tmp_path):
    store = LocalStorage(tmp_path / "store")
    with pytest.raises(FileNotFoundError):
        store.put(tmp_path / "missing", "job/file")
    assert not list((tmp_path / "store").rglob("*.tony-part"))


@pytest.mark.parametrize("location", ["/tmp/x", "file:///tmp/x"])
def test_a_path_or_file_uri_opens_a_local_store(location):
    assert isinstance(open_storage(location), LocalStorage)


def test_an_unknown_scheme_is_refused_naming_what_is_allowed():
    from tony_workflow.errors import ConfigError

    with pytest.raises(ConfigError, match="use a local path, file://, hdfs:// or webhdfs://"):
        open_storage("s3://bucket/x")


def test_a_file_is_published_once_and_never_replaced(tmp_path):
    store = LocalStorage(tmp_path / "store")
    first, second = tmp_path / "a", tmp_path / "b"
    first.write_text("first")
    second.write_text("second")
    assert not store.exists("cache/x/conf.zip")
    assert store.publish(first, "cache/x/conf.zip") is True
    mtime = (tmp_path / "store/cache/x/conf.zip").stat().st_mtime_ns
    # A reader may hold the first copy (a NodeManager checks its time): a second writer keeps it.
    assert store.publish(second, "cache/x/conf.zip") is False
    assert (tmp_path / "store/cache/x/conf.zip").read_text() == "first"
    assert (tmp_path / "store/cache/x/conf.zip").stat().st_mtime_ns == mtime
    assert store.exists("cache/x/conf.zip") and set(store.list("cache")) == {"x/conf.zip"}


def test_a_shared_directory_lets_everyone_add_files_and_a_marker_is_an_empty_file(tmp_path):
    store = LocalStorage(tmp_path / "store")
    store.shared_dir("line/root.default")
    for d in (tmp_path / "store", tmp_path / "store/line", tmp_path / "store/line/root.default"):
        assert d.stat().st_mode & 0o7777 == 0o1777, d
    store.touch("line/root.default/intent-1")
    assert store.list("line") == {"root.default/intent-1": store.list("line")["root.default/intent-1"]}
    assert store.list("line")["root.default/intent-1"].size == 0
    store.shared_dir("line/root.default")  # there already: left as it is

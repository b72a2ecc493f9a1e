import os

from tony_workflow.storage import CheckpointMirror, LocalStorage, upload_order


class RecordingStorage(LocalStorage):
    def __init__(self, root):
        super().__init__(root)
        self.puts = []

    def put(self, local, key):
        self.puts.append(key)
        super().put(local, key)


def write(p, text):
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def test_upload_order_keeps_the_state_file_last():
    names = ["checkpoint", "ckpt-2.index", "ckpt-2.data-00000-of-00001"]
    assert sorted(names, key=upload_order) == ["ckpt-2.data-00000-of-00001", "ckpt-2.index", "checkpoint"]


def test_sync_uploads_data_then_index_then_state_and_follows_deletes(tmp_path):
    local, store = tmp_path / "local", RecordingStorage(tmp_path / "store")
    m = CheckpointMirror(store, "job", local)
    write(local / "chief" / "ckpt-1.data-00000-of-00001", "d1")
    write(local / "chief" / "ckpt-1.index", "i1")
    write(local / "chief" / "checkpoint", "latest: ckpt-1")
    write(local / "chief" / "ckpt-1.index.tmp1234", "partial")  # a save in progress
    assert m.sync() == 3
    assert store.puts == ["job/chief/ckpt-1.data-00000-of-00001", "job/chief/ckpt-1.index", "job/chief/checkpoint"]
    assert not (tmp_path / "store" / "job" / "chief" / "ckpt-1.index.tmp1234").exists()
    assert m.sync() == 0  # unchanged files are not sent again

    # the trainer rotates: ckpt-2 arrives, ckpt-1 goes
    write(local / "chief" / "ckpt-2.data-00000-of-00001", "d2")
    write(local / "chief" / "ckpt-2.index", "i2")
    write(local / "chief" / "checkpoint", "latest: ckpt-2")
    os.utime(local / "chief" / "checkpoint", (1, 1))
    (local / "chief" / "ckpt-1.data-00000-of-00001").unlink()
    (local / "chief" / "ckpt-1.index").unlink()
    store.puts.clear()
    m.sync()
    assert store.puts[-1] == "job/chief/checkpoint"
    assert sorted(p.name for p in (tmp_path / "store" / "job" / "chief").iterdir()) == [
        "checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index"]


def test_restore_fills_a_fresh_directory(tmp_path):
    store = LocalStorage(tmp_path / "store")
    write(tmp_path / "store" / "chief" / "ckpt-3.index", "i3")
    write(tmp_path / "store" / "chief" / "checkpoint", "latest")
    fresh = tmp_path / "container" / "checkpoint"
    m = CheckpointMirror(store, "", fresh)
    assert m.restore() == 2
    assert (fresh / "chief" / "ckpt-3.index").read_text() == "i3"
    # restored files count as already mirrored
    assert m.sync() == 0

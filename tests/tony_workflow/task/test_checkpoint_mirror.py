import os

from tony_workflow.storage import LocalStorage
from tony_workflow.task.checkpoint_mirror import CheckpointMirror, upload_order


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


def state(*names):
    return (f'model_checkpoint_path: "{names[-1]}"\n'
            + "".join(f'all_model_checkpoint_paths: "{n}"\n' for n in names))


def test_a_state_file_is_only_sent_once_the_checkpoint_it_names_is_stored(tmp_path):
    # The trainer can rotate to ckpt-2 while a sync runs: the state file then names files the sync
    # never saw. Sending it would leave a store whose restore fails.
    local, root = tmp_path / "local", tmp_path / "store"
    m = CheckpointMirror(LocalStorage(root), "", local)
    write(local / "chief" / "ckpt-1.data-00000-of-00001", "d1")
    write(local / "chief" / "ckpt-1.index", "i1")
    write(local / "chief" / "checkpoint", state("ckpt-1"))
    m.sync()
    assert (root / "chief" / "checkpoint").read_text() == state("ckpt-1")

    # rotation half done: the state names ckpt-2, whose data has not appeared yet
    write(local / "chief" / "checkpoint", state("ckpt-2"))
    write(local / "chief" / "ckpt-2.index", "i2")
    (local / "chief" / "ckpt-1.data-00000-of-00001").unlink()
    (local / "chief" / "ckpt-1.index").unlink()
    m.sync()
    assert (root / "chief" / "checkpoint").read_text() == state("ckpt-1")  # still the loadable one
    assert (root / "chief" / "ckpt-1.data-00000-of-00001").exists()  # named by the stored state: kept

    write(local / "chief" / "ckpt-2.data-00000-of-00001", "d2")
    m.sync()
    assert (root / "chief" / "checkpoint").read_text() == state("ckpt-2")
    m.sync()  # now ckpt-1 is named by nothing stored and can go
    assert sorted(p.name for p in (root / "chief").iterdir()) == [
        "checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index"]
    fresh = CheckpointMirror(LocalStorage(root), "", tmp_path / "fresh")
    assert fresh.restore() == 3 and (tmp_path / "fresh" / "chief" / "ckpt-2.data-00000-of-00001").exists()

"""A chief's TensorBoard event files copied to the job's store as it ends
(:mod:`tony_workflow.task.kept_events`); on YARN, end to end, in client/test_board.py."""
from __future__ import annotations

from tony_workflow.task.kept_events import keep_events


def test_every_file_is_sent_once_and_a_relaunched_chief_adds_its_own(tmp_path):
    logdir, store = tmp_path / "tensorboard", tmp_path / "store"
    (logdir / "train").mkdir(parents=True)
    (logdir / "train" / "events.out.tfevents.1.h").write_bytes(b"a" * 10)
    (logdir / "events.out.tfevents.2.h").write_bytes(b"b" * 5)
    assert keep_events(logdir, str(store)) == 2
    assert (store / "train" / "events.out.tfevents.1.h").read_bytes() == b"a" * 10
    assert keep_events(logdir, str(store)) == 0  # nothing new
    (logdir / "events.out.tfevents.2.h").write_bytes(b"b" * 7)  # it grew
    (logdir / "events.out.tfevents.3.h").write_bytes(b"c")      # the next session's chief
    assert keep_events(logdir, str(store)) == 2
    assert sorted(p.name for p in store.rglob("*") if p.is_file()) == [
        "events.out.tfevents.1.h", "events.out.tfevents.2.h", "events.out.tfevents.3.h"]


def test_a_chief_that_wrote_nothing_sends_nothing_and_opens_no_store(tmp_path):
    assert keep_events(tmp_path / "none", "hdfs://nowhere:1/x") == 0  # would fail to reach the store
    (tmp_path / "empty").mkdir()
    assert keep_events(tmp_path / "empty", "hdfs://nowhere:1/x") == 0

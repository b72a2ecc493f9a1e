"""``tony tensorboard``'s parts (:mod:`tony_workflow.client.board`); the command run for real over a
finished job's kept event files is test_history.py's."""
from __future__ import annotations

import socket

from tony_workflow.client.board import _event_files, _free_port
from tony_workflow.storage import LocalStorage


def test_the_port_asked_for_when_it_is_free_else_another():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        other = _free_port(busy)
        assert other != busy and other > 0
    assert _free_port(other) == other


class Remote:
    """A store that is not a local directory (HDFS's place), over a directory: its files must be copied."""

    def __init__(self, root):
        self.inner = LocalStorage(root)

    def list(self, prefix):
        return self.inner.list(prefix)

    def get(self, key, local):
        self.inner.get(key, local)


def test_kept_files_are_read_in_place_from_a_local_history_and_copied_from_any_other(tmp_path):
    history = tmp_path / "history"
    kept = history / "finished" / "2026" / "11" / "28" / "application_1_0001" / "tensorboard"
    (kept / "worker0").mkdir(parents=True)
    (kept / "worker0" / "events.out.tfevents.1.h").write_bytes(b"\x00event")
    key = "finished/2026/11/28/application_1_0001/tensorboard"
    assert _event_files(LocalStorage(history), key, tmp_path / "scratch") == kept
    assert not (tmp_path / "scratch").exists()
    copied = _event_files(Remote(history), key, tmp_path / "scratch")
    assert (copied / "worker0" / "events.out.tfevents.1.h").read_bytes() == b"\x00event"

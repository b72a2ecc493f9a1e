"""The finished jobs' TensorBoards (:mod:`tony_workflow.web.boards`): where the kept event files are
read, and the keeper's boards, real TensorBoard processes, found in the process table: one per job
however many ask at once, answering under the job page's path, stopped when idle, when too many
run, and with the keeper."""
from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.conftest import TENSORBOARD_EVENTS, wait_for
from tony_workflow.storage import LocalStorage
from tony_workflow.web.boards import BoardKeeper, event_files, free_port

pytestmark = pytest.mark.tf


def test_the_port_asked_for_when_it_is_free_else_another():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        other = free_port(busy)
        assert other != busy and other > 0
    assert free_port(other) == other


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
    assert event_files(LocalStorage(history), key, tmp_path / "scratch") == kept
    assert not (tmp_path / "scratch").exists()
    copied = event_files(Remote(history), key, tmp_path / "scratch")
    assert (copied / "worker0" / "events.out.tfevents.1.h").read_bytes() == b"\x00event"


def kept_events(tmp_path, app_id: str) -> tuple[LocalStorage, str]:
    """A history whose record of ``app_id`` kept one event file of five steps of a loss."""
    root = tmp_path / "history"
    key = f"finished/2026/11/29/{app_id}/tensorboard"
    (root / key).mkdir(parents=True)
    subprocess.run([sys.executable, "-c", TENSORBOARD_EVENTS, "worker0"], check=True,
                   env={"TONY_LOG_DIR": str(root / key), "PATH": "/usr/bin:/bin"})
    return LocalStorage(root), key


_SINCE = {"t": 0.0}


@pytest.fixture(autouse=True)
def _this_tests_boards():
    # A test module shares its process with others run before it: only boards started from now on
    # are this test's.
    _SINCE["t"] = time.time() - 0.5
    yield


def boards_running() -> list[psutil.Process]:
    """TensorBoard processes this test started serving a keeper's copy or a history: the keeper's
    own children of this test process (an embedded-cluster job of an earlier test, still ending
    in this process's cluster, may start a TensorBoard of its own further down), started since
    the test began."""
    def serving(p: psutil.Process) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE and "--logdir" in p.cmdline() \
                and p.create_time() >= _SINCE["t"]
        except psutil.Error:  # it ended between the listing and the look: not running
            return False

    return [p for p in psutil.Process().children(recursive=False) if serving(p)]


def test_one_board_per_job_shared_by_its_viewers_stopped_when_idle_and_with_the_keeper(tmp_path):
    store, key = kept_events(tmp_path, "application_1_0001")
    keeper = BoardKeeper(idle_s=4.0)
    try:
        got = []
        askers = [threading.Thread(target=lambda: got.append(keeper.board("application_1_0001", store, key,
                                                                         "/jobs/application_1_0001/tensorboard")))
                  for _ in range(3)]
        for t in askers:
            t.start()
        for t in askers:
            t.join(180)
        assert len(got) == 3 and len({id(b) for b in got}) == 1  # three viewers at once, one board
        running = boards_running()
        assert [p.pid for p in running] == [got[0].proc.pid], [p.cmdline() for p in running]
        # It serves under the job page's path, the event files' run and tag.
        with urllib.request.urlopen(got[0].url + "data/plugin/scalars/tags", timeout=30) as r:
            assert b'"loss"' in r.read() and got[0].url.endswith("/jobs/application_1_0001/tensorboard/")
        # Unused for longer than idle_s, it is stopped, and its process is gone.
        wait_for(lambda: not boards_running(), timeout=60, interval=0.5)
        assert keeper.running() == {}
        again = keeper.board("application_1_0001", store, key, "/jobs/application_1_0001/tensorboard")
        assert again.proc.pid != got[0].proc.pid and boards_running()
    finally:
        keeper.stop()
    assert not boards_running()


def test_past_the_most_boards_the_least_recently_used_is_stopped(tmp_path):
    keeper = BoardKeeper(idle_s=600.0, most=1)
    try:
        first_store, first_key = kept_events(tmp_path / "a", "application_1_0001")
        second_store, second_key = kept_events(tmp_path / "b", "application_1_0002")
        first = keeper.board("application_1_0001", first_store, first_key, "")
        second = keeper.board("application_1_0002", second_store, second_key, "")
        wait_for(lambda: first.proc.poll() is not None, timeout=30)
        assert list(keeper.running()) == ["application_1_0002"] and second.proc.poll() is None
    finally:
        keeper.stop()
    assert not boards_running()


def test_a_board_that_cannot_start_says_why_and_leaves_nothing(tmp_path):
    scratch = set(Path(tempfile.gettempdir()).glob("tony-board-*"))
    keeper = BoardKeeper()
    try:
        with pytest.raises(RuntimeError, match="no longer in .*/no/such"):
            keeper.board("application_1_0003", LocalStorage(tmp_path / "none"), "no/such", "")
        assert keeper.running() == {} and not boards_running()
        assert set(Path(tempfile.gettempdir()).glob("tony-board-*")) <= scratch
    finally:
        keeper.stop()


def test_a_board_still_starting_when_the_keeper_stops_is_stopped_too(tmp_path):
    # The server stops (its test ends, Ctrl-C) while a viewer's board is still coming up: the
    # board answers after stop() has stopped the others, and must not outlive the keeper.
    store, key = kept_events(tmp_path, "application_1_0004")
    keeper = BoardKeeper()
    answer: list[object] = []

    def ask() -> None:
        try:
            answer.append(keeper.board("application_1_0004", store, key, ""))
        except Exception as e:  # noqa: BLE001 - what the viewer was told
            answer.append(e)

    asker = threading.Thread(target=ask)
    asker.start()
    wait_for(lambda: boards_running() or answer, timeout=60, interval=0.05)  # its process exists, not answering yet
    keeper.stop()
    asker.join(180)
    assert not boards_running() and keeper.running() == {}
    assert answer and (isinstance(answer[0], RuntimeError) and "stopping" in str(answer[0])
                       or answer[0].proc.poll() is not None), answer

"""AM attempts that outlive the AM's container on YARN (:mod:`tony_workflow.backends.yarn.attempts`):
how many times skein may start the AM again, and the events copy that keeps a lost container's
history. Taking over after a lost container is tests/tony_workflow/jobs/test_yarn_reclaim.py."""
from __future__ import annotations

from tests.conftest import wait_for
from tony_workflow.backends.yarn.attempts import EVENTS_COPY, EventsCopy, am_restarts
from tony_workflow.storage import LocalStorage


def test_skein_may_restart_the_am_once_per_counted_attempt_and_per_container_taken_back():
    assert am_restarts(2, 10) == 11
    assert am_restarts(1, 0) == 0
    assert am_restarts(0, -1) == 0


def test_the_events_are_copied_to_the_store_as_they_stand_at_each_request(tmp_path):
    events = tmp_path / "events.jsonl"
    store = LocalStorage(tmp_path / "store")
    copy = EventsCopy(store, events)
    copy.request()  # no events yet: nothing to copy, and no error
    events.write_text('{"event": "am_started"}\n')
    copy.request()
    stored = tmp_path / "store" / EVENTS_COPY
    wait_for(lambda: stored.is_file() and stored.read_text() == events.read_text(), timeout=10)
    events.write_text('{"event": "am_started"}\n{"event": "session_started"}\n')
    copy.request()
    wait_for(lambda: stored.read_text().count("\n") == 2, timeout=10)

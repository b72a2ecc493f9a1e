"""The checkpoint handoff between a container's elastic side and its executor: requests answered
in order, a failure told to the asker, and nothing to ask where the executor hands nothing over."""
from __future__ import annotations

import threading

import pytest

from tony_workflow.task.handoff import HANDOFF_ENV, HandoffError, ask, serve


def test_requests_are_answered_in_the_order_asked_and_failures_reach_the_asker(tmp_path):
    seen = []

    def handle(request):
        seen.append(request)
        if request.get("boom"):
            raise OSError("the store is away")
        return {"ok": True, "n": len(seen)}

    stop = threading.Event()
    thread = serve(tmp_path / "handoff", handle, stop)
    try:
        assert ask({"flush": True}, tmp_path / "handoff", timeout=10)["n"] == 1
        assert ask({"pull": True, "rank0": False}, tmp_path / "handoff", timeout=10)["n"] == 2
        with pytest.raises(HandoffError, match="OSError: the store is away"):
            ask({"boom": True}, tmp_path / "handoff", timeout=10)
    finally:
        stop.set()
        thread.join(5)
    assert seen == [{"flush": True}, {"pull": True, "rank0": False}, {"boom": True}]
    assert not list((tmp_path / "handoff").iterdir()), "no request or answer is left behind"
    # Nobody serving: the asker is told, and its request does not linger.
    with pytest.raises(HandoffError, match="did not answer"):
        ask({"flush": True}, tmp_path / "handoff", timeout=0.3)
    assert not list((tmp_path / "handoff").glob("*.request"))


def test_a_container_without_a_handoff_asks_nothing(monkeypatch):
    monkeypatch.delenv(HANDOFF_ENV, raising=False)
    assert ask({"flush": True}) == {"ok": True, "skipped": True}

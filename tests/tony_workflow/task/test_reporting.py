"""``tony_workflow.report()`` in user code and the executor's inbox for it (:mod:`tony_workflow.task.reporting`):
loopback datagrams, merged, the newest step always arriving, bad values named."""
from __future__ import annotations

import json

import pytest

from tests.conftest import wait_for
from tony_workflow.task import reporting
from tony_workflow.task.reporting import ReportInbox


@pytest.fixture
def inbox(monkeypatch):
    box = ReportInbox("secret-key")
    monkeypatch.setattr(reporting, "_sender", reporting._Sender())  # a fresh channel per test
    for name, value in box.environment().items():
        monkeypatch.setenv(name, value)
    yield box
    box.close()


def test_report_is_a_no_op_outside_a_job(monkeypatch):
    monkeypatch.delenv(reporting.ADDRESS_ENV, raising=False)
    monkeypatch.setattr(reporting, "_sender", reporting._Sender())
    reporting.report(step=1, total=10, loss=0.5)  # nothing to send to, nothing raised
    assert reporting._sender._target is None


def test_reports_reach_the_inbox_merged_and_the_newest_step_always_arrives(inbox):
    reporting.report(step=1, total=100, loss=2.0)
    reporting.report(step=2, accuracy=0.1)   # within the interval: merged, sent when it is over
    reporting.report(step=3)
    snap = wait_for(lambda: (s := inbox.snapshot()) and s["step"] == 3 and s, timeout=5, interval=0.05)
    assert snap["total"] == 100 and snap["metrics"] == {"loss": 2.0, "accuracy": 0.1}
    assert snap["reports"] == 2, "three calls within one interval make two datagrams"
    assert 0 <= snap["age"] < 5


def test_a_datagram_without_the_tasks_key_is_ignored(inbox):
    assert not inbox.accept(json.dumps({"key": "wrong", "step": 99}).encode())
    assert not inbox.accept(b"not json")
    assert inbox.snapshot() is None
    assert inbox.accept(json.dumps({"key": "secret-key", "step": 5, "metrics": {"x": "text", "y": 1}}).encode())
    assert inbox.snapshot()["metrics"] == {"y": 1.0}, "only numbers are kept"


@pytest.mark.parametrize("kwargs, error", [
    ({"step": "ten"}, "step must be a number, got str"),
    ({"step": -1}, "step must be >= 0"),
    ({"loss": [1.0]}, "loss must be a number, got list"),
    ({"done": True}, "done must be a number, got bool"),
    ({f"m{i}": i for i in range(33)}, "at most 32 metrics"),
    ({"x" * 65: 1.0}, "longer than 64 characters"),
])
def test_report_refuses_what_is_not_a_number_and_names_it(inbox, kwargs, error):
    with pytest.raises((TypeError, ValueError), match=error):
        reporting.report(**kwargs)


def test_numpy_scalars_and_nan_are_handled(inbox):
    np = pytest.importorskip("numpy")
    reporting.report(step=np.int64(7), total=np.int32(10), loss=np.float32(0.25), bad=float("nan"))
    snap = wait_for(lambda: inbox.snapshot(), timeout=5, interval=0.05)
    assert (snap["step"], snap["total"], snap["metrics"]) == (7, 10, {"loss": 0.25})


def test_drain_keeps_the_last_reports_of_an_exited_process_and_then_stops_receiving(inbox):
    """A real process reports and exits at once (its last report sent as it exits); drain() keeps
    every datagram it sent, whichever thread had taken it, and leaves no thread receiving."""
    import subprocess
    import sys

    code = ("from tony_workflow import report\n"
            "for step in range(1, 51):\n"
            "    report(step=step, total=50, loss=1.0 / step)\n"
            "report(val_accuracy=0.75)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    inbox.drain()
    snap = inbox.snapshot()
    assert snap["step"] == 50 and snap["metrics"] == {"loss": 1.0 / 50, "val_accuracy": 0.75}
    assert not inbox._receiver.is_alive()

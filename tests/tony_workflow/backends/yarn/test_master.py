"""skein's master as the AM speaks to it (:mod:`tony_workflow.backends.yarn.master`): a call that
fails for a moment (skein's ApplicationError with no text, a master slow to answer) is made again;
what skein says of the request itself is not. The application client here counts its calls and
fails as told: the real master's stumbles cannot be caused on demand."""
from __future__ import annotations

import pytest
from skein.exceptions import ApplicationError

from tony_workflow.backends.yarn import master
from tony_workflow.backends.yarn.master import Master


class Stumbling:
    def __init__(self, failures: list[BaseException]):
        self.failures = list(failures)
        self.calls = 0
        self.kv: dict[str, bytes] = {}

    def get_containers(self, states=None):
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return ["c1"]


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(master, "PATIENCE_S", (0.0, 0.0, 0.0))


def test_a_call_that_fails_for_a_moment_is_made_again():
    app = Stumbling([ApplicationError(""), ApplicationError("")])
    assert Master(app).get_containers(states=["RUNNING"]) == ["c1"] and app.calls == 3


def test_a_call_that_keeps_failing_fails_after_its_tries_and_a_refusal_at_once():
    app = Stumbling([ApplicationError("")] * 4)
    with pytest.raises(ApplicationError):
        Master(app).get_containers()
    assert app.calls == 4
    app = Stumbling([KeyError("no such container")])
    with pytest.raises(KeyError):
        Master(app).get_containers()
    assert app.calls == 1


def test_the_key_value_store_is_reached_through_it():
    app = Stumbling([])
    m = Master(app)
    m.kv["tony.x"] = b"1"
    assert m.kv.get("tony.x") == b"1" and m.kv["tony.x"] == b"1" and app.kv == {"tony.x": b"1"}

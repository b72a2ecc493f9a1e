"""What every store shares (:mod:`tony_workflow.storage.base`): the one retry, and which errors it tries again."""
from __future__ import annotations

import errno

import pytest

from tony_workflow.storage.base import retry


def test_transient_errors_are_tried_again_and_lasting_ones_are_not():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise OSError(errno.EIO, "input/output error")
        return "done"

    assert retry(flaky, attempts=5, base_delay=0.001) == "done" and len(calls) == 3
    for lasting in (FileNotFoundError(errno.ENOENT, "gone"), PermissionError(errno.EACCES, "no"),
                    OSError(errno.ENOSPC, "full"), ValueError("a bug")):
        calls.clear()

        def fails(e=lasting):
            calls.append(1)
            raise e

        with pytest.raises(type(lasting)):
            retry(fails, attempts=5, base_delay=0.001)
        assert len(calls) == 1, lasting


def test_the_last_error_is_raised_as_it_was_after_the_attempts():
    calls = []

    def down():
        calls.append(1)
        raise ConnectionError(f"try {len(calls)}")

    with pytest.raises(ConnectionError, match="try 4"):
        retry(down, attempts=4, base_delay=0.001, retry_on=lambda e: isinstance(e, ConnectionError))
    assert len(calls) == 4

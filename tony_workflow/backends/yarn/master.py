"""skein's master as the AM speaks to it: a call that fails for a moment is made again.

skein's Java ApplicationMaster answers an error of its own that carries no message (an exception
in its handler) as an :class:`skein.exceptions.ApplicationError` with an empty text, and a busy
master may not answer a call in time; both pass. Such a call is made again, a few times within a
few seconds, before the error is the AM's: a job must not fail because its cluster's bookkeeper
stumbled once. What skein says of the request itself (an unknown container: ``KeyError``, a
refused one: ``ValueError``) is not retried.
"""
from __future__ import annotations

import logging
import time
from typing import Any

__all__ = ["PATIENCE_S", "Master"]

log = logging.getLogger("tony.yarn")

#: the pauses before each new try of a call that failed for a moment
PATIENCE_S = (0.2, 0.5, 1.0, 2.0)


def _transient() -> tuple[type[BaseException], ...]:
    from skein.exceptions import ApplicationError, ConnectionError, TimeoutError  # type: ignore[import-untyped]
    return (ApplicationError, ConnectionError, TimeoutError)


class _Patient:
    """Calls ``fn``, again after each pause of :data:`PATIENCE_S` while it fails for a moment."""

    def __init__(self, fn: Any, what: str):
        self.fn, self.what = fn, what

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        transient = _transient()
        for pause in (*PATIENCE_S, None):
            try:
                return self.fn(*args, **kwargs)
            except transient as e:
                if pause is None:
                    raise
                log.warning("skein's master: %s failed (%r); again in %g s", self.what, e, pause)
                time.sleep(pause)
        raise AssertionError("unreachable")


class _PatientKV:
    def __init__(self, kv: Any):
        self._kv = kv

    def get(self, key: str, *args: Any, **kwargs: Any) -> Any:
        return _Patient(self._kv.get, f"reading {key}")(key, *args, **kwargs)

    def __getitem__(self, key: str) -> Any:
        return _Patient(self._kv.__getitem__, f"reading {key}")(key)

    def __setitem__(self, key: str, value: bytes) -> None:
        _Patient(self._kv.__setitem__, f"writing {key}")(key, value)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kv, name)


class Master:
    """An :class:`skein.ApplicationClient` whose container and key-value calls are patient."""

    _PATIENT = ("add_container", "kill_container", "get_containers")

    def __init__(self, app: Any):
        self._app = app
        self.kv = _PatientKV(app.kv)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._app, name)
        return _Patient(attr, name) if name in self._PATIENT else attr

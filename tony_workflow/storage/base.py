"""The store interface: whole files under slash-separated keys, and what every store shares.

A store never lists a file that is still being written (:func:`is_temp`: a writer's partial file,
a checkpoint writer's temporary one), so a reader sees a file whole or not at all. Stores retry
their own transient failures (:func:`retry`) and surface the rest as :class:`OSError`
(``FileNotFoundError``, ``PermissionError``, :class:`~tony_workflow.errors.StoreError`).
"""
from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

__all__ = ["Entry", "Storage", "is_temp", "retry"]

T = TypeVar("T")

# Files a checkpoint writer produces while saving; copying them would publish half a checkpoint.
_TEMP_MARKERS = (".tmp", "_temp", ".tony-part", "~")


def is_temp(name: str) -> bool:
    """Whether ``name`` (a key or a file's name) is a file still being written."""
    base = name.rsplit("/", 1)[-1]
    return any(m in base for m in _TEMP_MARKERS) or base.startswith(".")


_PERMANENT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


def _transient_os_error(e: BaseException) -> bool:
    # A missing file, a refused permission, a full disk or a read-only store stay so: no retry.
    return (isinstance(e, OSError) and not isinstance(e, (FileNotFoundError, PermissionError))
            and e.errno not in _PERMANENT_ERRNOS)


def retry(fn: Callable[[], T], attempts: int = 5, base_delay: float = 0.2,
          retry_on: Callable[[BaseException], bool] | None = None) -> T:
    """Runs ``fn`` up to ``attempts`` times, sleeping ``base_delay`` × 2^n between tries, and
    raises the last error as it was. By default it retries an OSError other than a missing file,
    a refused permission, a full disk or a read-only store (network filesystems hiccup);
    ``retry_on`` picks the retried errors instead."""
    import tenacity  # on the first store operation, not with every program that can open a store

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(attempts),
        wait=tenacity.wait_exponential(multiplier=base_delay, min=base_delay),
        retry=tenacity.retry_if_exception(retry_on or _transient_os_error),
        reraise=True)
    return retrying(fn)


@dataclass(frozen=True)
class Entry:
    size: int
    mtime: float


class Storage:
    """Interface of a file store. Keys are relative, slash-separated paths."""

    uri: str
    #: whether several threads may call it at once (ask it about several files together)
    concurrent: bool = False

    def list(self, prefix: str) -> dict[str, Entry]:  # pragma: no cover - interface
        raise NotImplementedError

    def put(self, local: Path, key: str) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def get(self, key: str, local: Path) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def delete(self, key: str) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def read_bytes(self, key: str) -> bytes:
        """The content of the file ``key`` (copied through a temporary file; a store that can read
        in place does)."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="tony-read-") as tmp:
            local = Path(tmp) / "file"
            self.get(key, local)
            return local.read_bytes()

    def exists(self, key: str) -> bool:
        """Whether a file ``key`` is there."""
        return key.rsplit("/", 1)[-1] in self.list(key.rsplit("/", 1)[0] if "/" in key else "")

    def located(self) -> bool:  # pragma: no cover - interface
        """Whether the store's own location is there (a file or a directory)."""
        raise NotImplementedError

    def publish(self, local: Path, key: str,
                progress: Callable[[int], None] | None = None) -> bool:  # pragma: no cover - interface
        """Puts ``local`` at ``key`` unless a file is there already, which is then kept as it is
        (readers may hold on to it): True when this call published it. ``progress`` is told the
        bytes sent so far, as they go."""
        raise NotImplementedError

    def touch(self, key: str) -> None:  # pragma: no cover - interface
        """Creates ``key`` as an empty file (a marker whose name says it all: no data to wait for)."""
        raise NotImplementedError

    def stamp(self, key: str, mtime: float) -> None:  # pragma: no cover - interface
        """Sets file ``key``'s modification time to ``mtime`` (seconds), its content unchanged: a
        file read by others who watch for a change of its time, not of its content."""
        raise NotImplementedError

    def private_dir(self, key: str) -> None:  # pragma: no cover - interface
        """Makes directory ``key`` (with its parents) one only its owner may enter (mode 700); one
        that exists is made so too, when this user owns it."""
        raise NotImplementedError

    def shared_dir(self, key: str) -> None:  # pragma: no cover - interface
        """Makes directory ``key`` (with its parents) one where every user may add files and only
        remove their own, as ``/tmp`` is (mode 1777); a directory that exists is left as it is."""
        raise NotImplementedError

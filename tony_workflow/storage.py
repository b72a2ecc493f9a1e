"""Filesystems for staging and the checkpoint mirror.

A :class:`Storage` stores whole files under slash-separated keys. The checkpoint mirror copies a
task's local checkpoint directory up to storage in an order that keeps the stored copy loadable at
every moment (data files, then index files, then the ``checkpoint`` state file), and restores it
into a fresh local directory before a session starts.
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, TypeVar

__all__ = ["Storage", "LocalStorage", "CheckpointMirror", "open_storage", "upload_order"]

T = TypeVar("T")

# Files a checkpoint writer produces while saving; copying them would publish half a checkpoint.
_TEMP_MARKERS = (".tmp", "_temp", ".tony-part", "~")


def _is_temp(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return any(m in base for m in _TEMP_MARKERS) or base.startswith(".")


def upload_order(name: str) -> int:
    """Rank for copying: data first, index next, state files last, so readers never see a
    state file pointing at a checkpoint whose data has not arrived."""
    base = name.rsplit("/", 1)[-1]
    if base == "checkpoint" or base.endswith(".json") and "metadata" in base:
        return 2
    if base.endswith(".index"):
        return 1
    return 0


def retry(fn: Callable[[], T], attempts: int = 5, base_delay: float = 0.2) -> T:
    """Runs ``fn`` with exponential backoff on OSError (network filesystems hiccup)."""
    for i in range(attempts):
        try:
            return fn()
        except FileNotFoundError:
            raise
        except OSError:
            if i == attempts - 1:
                raise
            time.sleep(base_delay * (2 ** i))
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Entry:
    size: int
    mtime: float


class Storage:
    """Interface of a file store. Keys are relative, slash-separated paths."""

    uri: str

    def list(self, prefix: str) -> dict[str, Entry]:  # pragma: no cover - interface
        raise NotImplementedError

    def put(self, local: Path, key: str) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def get(self, key: str, local: Path) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def delete(self, key: str) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class LocalStorage(Storage):
    """A directory on the local filesystem (or any mounted one)."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)
        self.uri = str(self.root)

    def _path(self, key: str) -> Path:
        p = (self.root / key).resolve()
        if self.root.resolve() not in (p, *p.parents):
            raise ValueError(f"storage key escapes the store: {key!r}")
        return p

    def list(self, prefix: str) -> dict[str, Entry]:
        base = self._path(prefix) if prefix else self.root
        out: dict[str, Entry] = {}
        if not base.is_dir():
            return out
        for p in base.rglob("*"):
            if p.is_file() and not _is_temp(p.name):
                st = p.stat()
                out[p.relative_to(base).as_posix()] = Entry(st.st_size, st.st_mtime)
        return out

    def put(self, local: Path, key: str) -> None:
        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(dest.name + ".tony-part")

        def copy() -> None:
            shutil.copyfile(local, part)
            os.replace(part, dest)  # atomic: readers see the old file or the whole new one

        retry(copy)

    def get(self, key: str, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        retry(lambda: shutil.copyfile(self._path(key), local))

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink()
        except FileNotFoundError:
            pass


def open_storage(location: str) -> Storage:
    """A store for ``location``: a local path or ``file://`` URI. (WebHDFS lives in the YARN backend.)"""
    if location.startswith("file://"):
        location = location[len("file://"):]
    if "://" in location:
        raise ValueError(f"unsupported storage location {location!r}: use a local path or file:// URI")
    return LocalStorage(location)


class CheckpointMirror:
    """Keeps ``prefix`` in a store equal to a local checkpoint directory."""

    def __init__(self, store: Storage, prefix: str, local_dir: str | os.PathLike[str]):
        self.store = store
        self.prefix = prefix.strip("/")
        self.local = Path(local_dir)
        self._sent: dict[str, tuple[int, float]] = {}

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _local_files(self) -> dict[str, tuple[int, float]]:
        out = {}
        if self.local.is_dir():
            for p in self.local.rglob("*"):
                if p.is_file() and not _is_temp(p.relative_to(self.local).as_posix()):
                    try:
                        st = p.stat()
                    except FileNotFoundError:  # deleted by the trainer while we walk
                        continue
                    out[p.relative_to(self.local).as_posix()] = (st.st_size, st.st_mtime)
        return out

    def restore(self) -> int:
        """Copies the stored checkpoint into the local directory; returns the number of files."""
        self.local.mkdir(parents=True, exist_ok=True)
        remote = self.store.list(self.prefix)
        for rel in sorted(remote, key=lambda r: (upload_order(r), r)):
            self.store.get(self._key(rel), self.local / rel)
        self._sent = self._local_files()
        return len(remote)

    def sync(self) -> int:
        """Uploads new or changed files, then removes stored files that are gone locally.
        Returns the number of files uploaded."""
        files = self._local_files()
        changed = [r for r, sig in files.items() if self._sent.get(r) != sig]
        for rel in sorted(changed, key=lambda r: (upload_order(r), r)):
            try:
                self.store.put(self.local / rel, self._key(rel))
            except FileNotFoundError:
                continue  # rotated away by the trainer between the walk and the copy
            self._sent[rel] = files[rel]
        for rel in [r for r in self._sent if r not in files]:
            self.store.delete(self._key(rel))
            del self._sent[rel]
        return len(changed)


def copy_tree(src: Path, dest: Path, ignore: Iterable[str] = ()) -> None:
    shutil.copytree(src, dest, dirs_exist_ok=True, symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", ".git", *ignore))

"""A store in a local (or mounted) directory."""
from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from .base import Entry, Storage, is_temp, retry

__all__ = ["LocalStorage"]


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
            if p.is_file() and not is_temp(p.name):
                st = p.stat()
                out[p.relative_to(base).as_posix()] = Entry(st.st_size, st.st_mtime)
        return out

    def put(self, local: Path, key: str) -> None:
        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(dest.name + ".tony-part")

        def copy() -> None:
            try:
                shutil.copyfile(local, part)
                os.replace(part, dest)  # atomic: readers see the old file or the whole new one
            except BaseException:
                with contextlib.suppress(OSError):
                    part.unlink()  # a full disk or a refused write leaves no partial file behind
                raise

        retry(copy)

    def get(self, key: str, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        retry(lambda: shutil.copyfile(self._path(key), local))

    def read_bytes(self, key: str) -> bytes:
        return retry(lambda: self._path(key).read_bytes())

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink()
        except FileNotFoundError:
            pass

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def located(self) -> bool:
        return self.root.exists()

    def publish(self, local: Path, key: str, progress: Callable[[int], None] | None = None) -> bool:
        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(f"{dest.name}.{os.getpid()}.tony-part")
        try:
            shutil.copyfile(local, part)
            if progress is not None:
                progress(part.stat().st_size)
            os.link(part, dest)  # fails, keeping the one there, if another writer came first
            return True
        except FileExistsError:
            return False
        finally:
            part.unlink(missing_ok=True)

    def touch(self, key: str) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()

    def stamp(self, key: str, mtime: float) -> None:
        os.utime(self._path(key), (mtime, mtime))

    def private_dir(self, key: str) -> None:
        path = self._path(key)
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o700)

    def shared_dir(self, key: str) -> None:
        path = self._path(key)
        missing = [d for d in (path, *path.parents) if not d.exists()]
        path.mkdir(parents=True, exist_ok=True)
        for d in missing:
            with contextlib.suppress(OSError):  # made at the same moment by another user
                os.chmod(d, 0o1777)

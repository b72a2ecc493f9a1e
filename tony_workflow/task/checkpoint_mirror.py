"""The checkpoint mirror: a task's local checkpoint directory kept equal to a prefix of a store.

It copies in an order that keeps the stored copy loadable at every moment (data files, then index
files, then the ``checkpoint`` state file: :func:`upload_order`), and restores the stored copy into
a fresh local directory before a session starts. Which checkpoint a session resumes from, when
several are at hand, is :mod:`tony_workflow.task.checkpoints`'.
"""
from __future__ import annotations

import os
import re
import tempfile
import threading
from pathlib import Path

from ..storage import Storage, is_temp

__all__ = ["CheckpointMirror", "upload_order"]


def upload_order(name: str) -> int:
    """Rank for copying: data first, index next, state files last, so readers never see a
    state file pointing at a checkpoint whose data has not arrived."""
    base = name.rsplit("/", 1)[-1]
    if base == "checkpoint" or base.endswith(".json") and "metadata" in base:
        return 2
    if base.endswith(".index"):
        return 1
    return 0


class CheckpointMirror:
    """Keeps ``prefix`` in a store equal to a local checkpoint directory."""

    def __init__(self, store: Storage, prefix: str, local_dir: str | os.PathLike[str]):
        self.store = store
        self.prefix = prefix.strip("/")
        self.local = Path(local_dir)
        self._sent: dict[str, tuple[int, float]] = {}
        self._sent_state: dict[str, bytes] = {}  # state file -> the content last uploaded
        self._lock = threading.Lock()  # the periodic sync and a sync at stop may overlap

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _local_files(self) -> dict[str, tuple[int, float]]:
        out = {}
        if self.local.is_dir():
            for p in self.local.rglob("*"):
                if p.is_file() and not is_temp(p.relative_to(self.local).as_posix()):
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
        self._sent_state = {r: (self.local / r).read_bytes() for r in self._sent
                            if r.rsplit("/", 1)[-1] == "checkpoint"}
        return len(remote)

    def pull(self) -> int:
        """:meth:`restore`, between two syncs: the stored checkpoint replaces the local copy of
        each of its files (another container's saves, now the group's)."""
        with self._lock:
            return self.restore()

    def sync(self) -> int:
        """Uploads new or changed files, then removes stored files that are gone locally.

        A TensorFlow ``checkpoint`` state file is uploaded only as the snapshot read before its
        checkpoint's files were sent, and only once every checkpoint it names has its index and data
        in the store: the trainer may rotate to a newer checkpoint while a sync runs, and a state
        file naming files that never arrived would make the next restore fail. Stored state files,
        and the files they name, are not deleted. Returns the number of files uploaded."""
        with self._lock:
            return self._sync()

    def _sync(self) -> int:
        files = self._local_files()
        states: dict[str, bytes] = {}
        for rel in files:
            if rel.rsplit("/", 1)[-1] == "checkpoint":
                try:
                    states[rel] = (self.local / rel).read_bytes()
                except FileNotFoundError:
                    continue
        changed = [r for r, sig in files.items() if self._sent.get(r) != sig and r not in states]
        uploaded = 0
        for rel in sorted(changed, key=lambda r: (upload_order(r), r)):
            try:
                self.store.put(self.local / rel, self._key(rel))
            except FileNotFoundError:
                continue  # rotated away by the trainer between the walk and the copy
            self._sent[rel] = files[rel]
            uploaded += 1
        for rel, content in states.items():
            if self._sent_state.get(rel) == content or not self._complete(rel, content):
                continue
            self._put_bytes(content, rel)
            self._sent_state[rel] = content
            self._sent[rel] = files[rel]
            uploaded += 1
        # A state file gone locally stays in the store, and so does what it names: a trainer that
        # removes its checkpoint once done (Keras' BackupAndRestore) may still be killed before it
        # exits, and its relaunch must find the checkpoint, not start over.
        keep = {f for rel, content in self._sent_state.items() for f in self._named_files(rel, content)}
        keep |= set(self._sent_state)
        for rel in [r for r in self._sent if r not in files and r not in keep]:
            self.store.delete(self._key(rel))
            del self._sent[rel]
        return uploaded

    @staticmethod
    def _prefixes(state_rel: str, content: bytes) -> set[str]:
        """The checkpoint prefixes a TensorFlow state file names, relative to the mirrored dir."""
        base = state_rel.rsplit("/", 1)[0] + "/" if "/" in state_rel else ""
        out = set()
        for name in re.findall(r'(?:model_checkpoint_path|all_model_checkpoint_paths):\s*"([^"]+)"',
                               content.decode("utf-8", "replace")):
            out.add(base + name.rsplit("/", 1)[-1])  # absolute paths point into this same directory
        return out

    def _named_files(self, state_rel: str, content: bytes) -> set[str]:
        prefixes = self._prefixes(state_rel, content)
        return {r for r in self._sent if any(r == p + ".index" or r.startswith(p + ".data-") for p in prefixes)}

    def _complete(self, state_rel: str, content: bytes) -> bool:
        for prefix in self._prefixes(state_rel, content):
            if prefix + ".index" not in self._sent or not any(r.startswith(prefix + ".data-") for r in self._sent):
                return False
        return True

    def _put_bytes(self, content: bytes, rel: str) -> None:
        with tempfile.NamedTemporaryFile(delete=False) as fh:
            fh.write(content)
        try:
            self.store.put(Path(fh.name), self._key(rel))
        finally:
            os.unlink(fh.name)

"""Which checkpoint a new session resumes from.

A session restores its tasks' checkpoint directory from the checkpoint store. The store can be
behind: its writes failed (unwritable, full) while training went on, or the last mirror ran a
moment before the session was torn down. On the embedded cluster the directories of earlier
containers are still on this machine, so a task may hold a newer checkpoint than the store; the
newest *complete* one wins, and whatever newer but incomplete checkpoint was seen says how many
steps are lost.

A TensorFlow checkpoint directory has a ``checkpoint`` state file naming its newest checkpoint
(``model_checkpoint_path: "ckpt-20"``), at its top or in a subdirectory; that checkpoint is complete
when its ``.index`` and at least one ``.data-*`` file exist beside the state file, and its step is
the number at the end of its name (the highest over the directory's state files counts).
Directories of any other format are compared by the time of their newest file.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Found", "choose", "inspect", "replace_with"]

_STATE = re.compile(r'^model_checkpoint_path:\s*"([^"]+)"', re.MULTILINE)
_STEP = re.compile(r"-(\d+)$")


@dataclass(frozen=True)
class Found:
    """What one checkpoint directory holds."""

    path: Path
    #: the step its state file names (None: no TensorFlow state file, or no number in the name)
    step: int | None
    #: whether the checkpoint its state file names has its index and data (always true without one)
    complete: bool
    #: the modification time of its newest file
    newest: float

    def describe(self) -> str:
        return f"step {self.step}" if self.step is not None else "its newest files"


def inspect(path: str | os.PathLike[str]) -> Found | None:
    """What ``path`` holds, or None when it holds no file."""
    root = Path(path)
    newest = 0.0
    seen = False
    with contextlib.suppress(OSError):
        for p in root.rglob("*"):
            with contextlib.suppress(OSError):
                if p.is_file():
                    seen = True
                    newest = max(newest, p.stat().st_mtime)
    if not seen:
        return None
    # The state files, at the top or below it (Keras' BackupAndRestore keeps its own in
    # backup/chief/): the one naming the highest step speaks for the directory.
    best: tuple[int, bool] | None = None
    with contextlib.suppress(OSError):
        for state in root.rglob("checkpoint"):
            try:
                match = _STATE.search(state.read_text(errors="replace")) if state.is_file() else None
            except OSError:
                match = None
            if match is None:
                continue
            name = match.group(1).rsplit("/", 1)[-1]
            step_match = _STEP.search(name)
            if step_match is None:
                continue
            here = state.parent
            complete = (here / f"{name}.index").is_file() and any(here.glob(f"{name}.data-*"))
            candidate = (int(step_match.group(1)), complete)
            if best is None or candidate > best:
                best = candidate
    if best is None:
        return Found(root, None, True, newest)
    return Found(root, best[0], best[1], newest)


def _key(found: Found) -> tuple[int, float]:
    # By step where both have one; a directory with a step outranks one without at equal time.
    return (found.step if found.step is not None else -1, found.newest)


def choose(candidates: list[Found | None]) -> tuple[Found | None, int | None]:
    """The newest complete checkpoint among ``candidates``, and how many steps newer the newest
    one seen (complete or not) is, when both have steps (None when unknown)."""
    present = [c for c in candidates if c is not None]
    complete = [c for c in present if c.complete]
    if not complete:
        best = None
    elif all(c.step is not None for c in complete):
        best = max(complete, key=_key)
    else:
        best = max(complete, key=lambda c: c.newest)
    steps = [c.step for c in present if c.step is not None]
    lost = None
    if best is not None and best.step is not None and steps:
        lost = max(steps) - best.step
    elif best is None and steps:
        lost = max(steps)
    return best, lost


def replace_with(target: Path, source: Path) -> None:
    """Makes ``target`` a copy of ``source``'s files."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, symlinks=True)

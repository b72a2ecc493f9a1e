"""A chief's TensorBoard event files copied to the job's store as it ends, for its history record.

Where the job's tasks share no directory (YARN: each container has its own), the event files its
TensorBoard served would go with the chief's container. The executor copies them to the store the
cluster names (:data:`~tony_workflow.protocol.BOARD_STORE_ENV`), and the ApplicationMaster keeps
them with the job's record (:func:`tony_workflow.history.record_job`). A relaunched chief adds its
own files; a file already there at the same size is not sent again.
"""
from __future__ import annotations

from pathlib import Path

from ..storage import open_storage

__all__ = ["keep_events"]


def keep_events(logdir: Path, location: str) -> int:
    """Copies the files under ``logdir`` to the store at ``location``; returns how many it sent."""
    files = sorted(f for f in logdir.rglob("*") if f.is_file()) if logdir.is_dir() else []
    if not files:
        return 0
    store = open_storage(location)
    try:
        have = store.list("")
    except FileNotFoundError:
        have = {}
    sent = 0
    for f in files:
        rel = f.relative_to(logdir).as_posix()
        if rel in have and have[rel].size == f.stat().st_size:
            continue
        store.put(f, rel)
        sent += 1
    return sent

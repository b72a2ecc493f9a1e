"""Training data from HDFS or local files: each task reads its own share of a Parquet, ORC, Avro or
TFRecord input, in batches, and resumes exactly where the group left it.

A job declares its inputs (``data: {train: {path: hdfs:///data/clicks, format: parquet}}``, or
TonY's keys ``tony.data.train.path``, ``.format``, ``.columns``, ``.filter``, ``.remainder``); the
client plans them before anything runs (:mod:`.manifest`), and a task reads::

    from tony_workflow.data import dataset
    ds = dataset("train", batch_size=64, shuffle=True, seed=7)
    for batch in ds:            # one epoch; batch is {column: numpy array}
        ...
    state = ds.state_dict()     # small; rank 0's copy resumes every rank, at any world size

The layers, from the bottom: :mod:`.plan` (the epoch's order and each rank's share, pure
numbers), :mod:`.fs` (listing and reading files, local or WebHDFS), :mod:`.formats` (one reader
per format), :mod:`.manifest` (an input planned), :mod:`.reader` (:class:`Dataset`), and the
adapters :mod:`.tf` and :mod:`.torch`. This package imports pyarrow; the ``data`` extra brings it,
fastavro and the codecs.
"""
from __future__ import annotations

from typing import Any

__all__ = ["Dataset", "dataset"]


def __getattr__(name: str) -> Any:
    # The reader imports pyarrow and numpy: only a process that reads data pays for them.
    if name in __all__:
        from . import reader
        return getattr(reader, name)
    raise AttributeError(name)

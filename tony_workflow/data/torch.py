"""A reader's share as a PyTorch ``IterableDataset``, split again across ``DataLoader`` workers.

In a ``DataLoader`` with ``num_workers`` processes (``batch_size=None``: the reader's batches are
already whole), worker ``k`` of ``n`` hands out batches ``k``, ``k + n``, ``k + 2n``... of the
rank's share, and the ``DataLoader`` takes them from the workers in turn, so the batches arrive in
the rank's own order, none twice and none missing. Each worker reads in its own process.

:func:`loader` splits by *blocks* instead, a window's worth of consecutive batches each (worker
``k`` takes blocks ``k``, ``k + n``...), so that each worker reads only its blocks' units rather
than every unit, and puts the batches back in the rank's order as they arrive (holding at most
about a block per worker). It also counts each batch into the reader as the training loop takes
it, which a ``DataLoader``'s workers cannot: with it, :meth:`~.reader.Dataset.state_dict` stays
true.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from .arrays import to_numpy

#: A reader's share (:class:`.reader.Dataset`), whose methods hand it here: the reader imports this
#: module when asked for it, and naming its class back would make the two modules one.
Dataset = Any

__all__ = ["TorchDataset", "loader"]


def _tensors(batch: dict[str, np.ndarray]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, values in batch.items():
        if values.dtype.kind in "biuf":
            # Arrow's buffers are read-only, which torch's tensors do not take.
            writable = values if values.flags.writeable and values.flags.c_contiguous else np.array(values)
            out[name] = torch.from_numpy(writable)
        elif values.dtype.kind in "mM":
            out[name] = torch.from_numpy(values.astype(np.int64))
        else:
            out[name] = values  # strings, bytes, nested values: as numpy holds them
    return out


class TorchDataset(IterableDataset):  # type: ignore[type-arg]
    """The reader's share of the current epoch as batches of tensors (see the module's docstring).
    ``block``: batches a worker takes in a row, each handed out as (step, batch)."""

    def __init__(self, ds: Dataset, block: int | None = None):
        super().__init__()
        self.ds, self.block = ds, block

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        if self.block is None:
            if info is None or info.num_workers == 1:
                for batch in self.ds:
                    yield _tensors(batch)
                return
            n, k = info.num_workers, info.id
            for _, table in self.ds._steps_read(lambda step: step % n == k):
                yield _tensors(to_numpy(table))
            return
        n, k = (info.num_workers, info.id) if info is not None else (1, 0)
        block = self.block
        for step, table in self.ds._steps_read(lambda s: (s // block) % n == k):
            yield step, _tensors(to_numpy(table))

    def __len__(self) -> int:
        return int(self.ds.steps())


class _Counted:
    """Iterates a DataLoader of (step, batch), handing the batches out in step order and counting
    each one taken into the reader's position."""

    def __init__(self, ds: Dataset, loader: DataLoader[Any]):
        self.ds, self.loader = ds, loader

    def __iter__(self) -> Iterator[dict[str, Any]]:
        ds = self.ds
        start_epoch = ds.epoch
        if ds._committed is not None:
            ds._steps = ds._committed
        ds._rebase(ds.group()[1])  # a group of another size takes up what the last one left, from its step 0
        following = ds._steps
        early: dict[int, dict[str, Any]] = {}
        for step, batch in self.loader:
            early[step] = batch
            while following in early:
                ds._steps = following + 1  # the training loop has this batch now
                following += 1
                yield early.pop(following - 1)
        if ds.epoch == start_epoch:  # the workers ran the epoch to its end; this process did not
            ds.epoch = start_epoch + 1

    def __len__(self) -> int:
        return len(self.loader)


def loader(ds: Dataset, **options: Any) -> _Counted:
    """A ``DataLoader`` over ``ds`` (``options`` as DataLoader takes them; ``batch_size`` is the
    reader's) whose batches count in ``ds``'s state as the loop takes them."""
    options.setdefault("batch_size", None)
    if options["batch_size"] is not None:
        raise ValueError("the reader makes the batches: give dataset() the batch_size, not the DataLoader")
    ds._rebase(ds.group()[1])
    block = max(1, ds.window // ds.batch_size) if ds.shuffle else max(1, _unit_rows(ds) // ds.batch_size)
    return _Counted(ds, DataLoader(TorchDataset(ds, block), **options))


def _unit_rows(ds: Dataset) -> int:
    rows = [u[2] for u in ds.plan.units]
    return int(sum(rows) / len(rows)) if rows else 1

"""A reader's share as a PyTorch ``IterableDataset``, split again across ``DataLoader`` workers.

In a ``DataLoader`` with ``num_workers`` processes, worker ``k`` hands out batches ``k``,
``k + n``, ``k + 2n``... of the rank's share (``batch_size=None``: the reader's batches are
already whole), and the ``DataLoader`` takes them from the workers in turn, so the batches arrive
in the rank's own order, none twice and none missing. Each worker reads in its own process.

A ``DataLoader``'s workers cannot tell the reader in the training process how far training got,
so :func:`loader` is the way to iterate with workers while :meth:`~.reader.Dataset.state_dict`
stays true: it counts each batch into the reader as the training loop takes it.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from .arrays import to_numpy

if TYPE_CHECKING:
    from .reader import Dataset

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
    """The reader's share of the current epoch as batches of tensors (see the module's docstring)."""

    def __init__(self, ds: Dataset):
        super().__init__()
        self.ds = ds

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        if info is None or info.num_workers == 1:
            for batch in self.ds:
                yield _tensors(batch)
            return
        for i, table in enumerate(self.ds.batches()):
            if i % info.num_workers == info.id:
                yield _tensors(to_numpy(table))

    def __len__(self) -> int:
        return self.ds.steps()


class _Counted:
    """Iterates a DataLoader, counting each batch taken into the reader's position."""

    def __init__(self, ds: Dataset, loader: DataLoader[Any]):
        self.ds, self.loader = ds, loader

    def __iter__(self) -> Iterator[dict[str, Any]]:
        ds = self.ds
        start_epoch, start = ds.epoch, ds._steps
        for taken, batch in enumerate(self.loader, 1):
            ds._steps = start + taken  # the training loop has this batch now
            yield batch
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
    return _Counted(ds, DataLoader(TorchDataset(ds), **options))

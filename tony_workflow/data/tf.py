"""A reader's share as a ``tf.data.Dataset``, for Keras ``fit`` and custom loops.

Each rank reads its own share already, so TensorFlow must neither shard the data again nor split
each batch among the workers: under MultiWorkerMirroredStrategy the dataset is handed over through
``strategy.distribute_datasets_from_function`` (each worker's replica takes its rank's batch as
it is, the global batch being the ranks' batches together), and auto-sharding is off. Without a
strategy of several workers it is a plain dataset. Under ParameterServerStrategy only the
coordinator runs Python, so it reads the whole input (the reader's group is one) and
``coordinator.create_per_worker_dataset`` cannot take it; feed steps from it in the training loop.

**Resuming with Keras.** Keras's ``BackupAndRestore`` restores the epoch and the step within it,
but starts the dataset's iterator again from its beginning. :func:`keras_callback` keeps the
reader at Keras's place: at the first step of a ``fit`` it sets the reader's epoch and position to
Keras's, and the dataset's generator waits for that before it reads, so the step a restored run
starts at gets the very batch the lost run would have had. From there the dataset spans the whole
``fit`` (Keras keeps one iterator of a distributed dataset for every epoch) and reads on into the
next epoch without waiting, as ``repeat()`` would, up to the ``fit``'s last epoch: the reader's
epochs and Keras's stay in step because ``fit`` takes ``steps_per_epoch=len(reader)`` (the callback
refuses other lengths). Without the callback, each iteration of the dataset is one epoch of the
reader.
"""
from __future__ import annotations

import atexit
import threading
import weakref
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import DataError
from .arrays import flat_fields

#: A reader's share (:class:`.reader.Dataset`), whose methods hand it here: the reader imports this
#: module when asked for it, and naming its class back would make the two modules one.
Dataset = Any

__all__ = ["as_tf", "keras_callback", "signature"]

#: How long the Keras callback waits for the last fit's generator to be done with its epochs.
GATE_S = 300.0
#: Every gate of this process, closed as it exits: a generator waiting at one would hold up the exit.
_GATES: weakref.WeakSet[_Gate] = weakref.WeakSet()


@atexit.register
def _close_gates() -> None:
    for gate in list(_GATES):
        gate.close()


def _tf_dtype(tf: Any, kind: pa.DataType, column: str) -> tuple[Any, tuple[int | None, ...]]:
    if pa.types.is_fixed_size_list(kind):
        inner, shape = _tf_dtype(tf, kind.value_type, column)
        return inner, (kind.list_size, *shape)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        inner, shape = _tf_dtype(tf, kind.value_type, column)
        return inner, (None, *shape)
    if pa.types.is_string(kind) or pa.types.is_binary(kind) or pa.types.is_large_string(kind) \
            or pa.types.is_fixed_size_binary(kind):
        return tf.string, ()
    if pa.types.is_timestamp(kind) or pa.types.is_date(kind) or pa.types.is_time(kind):
        return tf.int64, ()
    if pa.types.is_boolean(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind):
        return tf.as_dtype(kind.to_pandas_dtype()), ()
    raise DataError(f"column {column} is {kind}, which has no tensor type: leave it out with columns")


def signature(ds: Dataset) -> dict[str, Any]:
    """The ``tf.TensorSpec`` of each column of a batch."""
    import tensorflow as tf
    out = {}
    for name, kind in flat_fields(ds.plan.schema, ds.columns):
        dtype, shape = _tf_dtype(tf, kind, name)
        out[name] = tf.TensorSpec(shape=(None, *shape), dtype=dtype)
    return out


def _tensorable(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for name, values in batch.items():
        if values.dtype.kind in "mM":  # dates and times as their integer count
            values = values.astype(np.int64)
        out[name] = values
    return out


class _Gate:
    """Where the dataset's generator and the Keras callback meet at a ``fit``'s first step: the
    generator waits there, the callback sets the reader's place (and the fit's last epoch) and lets
    it through."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.waiting = self.open = self.started = self.closed = False
        #: the epoch the fit ends before (Keras's ``epochs``): the generator reads no further
        self.end: int | None = None

    def arrive(self, name: str) -> bool:
        """Waits for the fit's first step (however long Keras takes to get there); False when fit
        has ended, or the process is ending."""
        with self.cond:
            self.started = self.waiting = True
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.open or self.closed)
            self.open = self.waiting = False
            return not self.closed

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def reopen(self) -> None:
        """A new fit begins: its generator is let through once its first step is placed."""
        with self.cond:
            self.closed = False

    def admit(self, name: str, place: Any, end: int | None) -> None:
        with self.cond:
            if self.started and not self.cond.wait_for(lambda: self.waiting or self.closed, GATE_S):
                raise DataError("Keras started a fit while the reader was still inside the last one's epochs: give "
                                "fit steps_per_epoch=len(reader), the steps of the reader's epoch", name)
            place()
            self.end = end
            self.open = True
            self.cond.notify_all()


def _generate(ds: Dataset) -> Any:
    gate: _Gate | None = getattr(ds, "_keras_gate", None)
    if gate is None:  # one epoch an iterator: Keras makes a new one each epoch
        for batch in ds:
            yield _tensorable(batch)
        return
    # Under the callback, one iterator for the whole fit: it waits for Keras's place at the fit's
    # first step, then reads epoch after epoch without a pause, up to the fit's last.
    while gate.arrive(ds.name):
        while not gate.closed and (gate.end is None or ds.epoch < gate.end):
            for batch in ds:
                yield _tensorable(batch)


def _workers(strategy: Any) -> int:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1
    spec = resolver.cluster_spec().as_dict()
    return len(spec.get("chief", [])) + len(spec.get("worker", []))


def as_tf(ds: Dataset, strategy: Any = None, map_fn: Any = None) -> Any:
    """``ds`` as a ``tf.data.Dataset`` of dicts of tensors (or what ``map_fn`` makes of each,
    ``(features, label)`` for Keras); under a MultiWorkerMirroredStrategy of several workers (the
    ``strategy`` given, or the one whose scope this is called in), a distributed dataset for
    ``fit`` (see the module's docstring)."""
    import tensorflow as tf

    output = signature(ds)

    def make(_: Any = None) -> Any:
        data = tf.data.Dataset.from_generator(lambda: _generate(ds), output_signature=output)
        if map_fn is not None:
            data = data.map(map_fn, num_parallel_calls=tf.data.AUTOTUNE)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        return data.with_options(options).prefetch(tf.data.AUTOTUNE)

    strategy = strategy if strategy is not None else tf.distribute.get_strategy()
    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        return make()
    if _workers(strategy) > 1:
        return strategy.distribute_datasets_from_function(make)
    rank, world = ds.group()
    if world > 1 and not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        raise DataError(f"this task is rank {rank} of {world}, and no MultiWorkerMirroredStrategy is given: call "
                        "ds.as_tf(strategy), or ds.as_tf() inside strategy.scope(), so that TensorFlow does not "
                        "split the rank's batches again", ds.name)
    return make()


def _keras() -> Any:
    """The Keras that runs under several workers (tf_keras), else Keras."""
    try:
        import tf_keras
        return tf_keras
    except ImportError:
        import keras
        return keras


def keras_callback(ds: Dataset, keras: Any = None) -> Any:
    """A Keras callback (of ``keras``, default ``tf_keras`` else ``keras``) that puts ``ds`` at
    Keras's epoch and step as each epoch starts (see the module's docstring). Give it to ``fit``
    after ``BackupAndRestore``."""
    keras = keras if keras is not None else _keras()
    gate = _Gate()
    _GATES.add(gate)
    ds._keras_gate = gate

    class DataPosition(keras.callbacks.Callback):  # type: ignore[misc]
        """Puts the reader at Keras's epoch and step at the fit's first step."""

        def __init__(self) -> None:
            super().__init__()
            self._epoch = 0
            self._placed = False

        def on_train_begin(self, logs: Any = None) -> None:
            steps = (getattr(self, "params", None) or {}).get("steps")
            if steps != len(ds):
                raise DataError(f"fit runs epochs of {steps} steps and the reader's have {len(ds)}: give fit "
                                "steps_per_epoch=len(reader)", ds.name)
            self._placed = False
            gate.reopen()

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self._epoch = epoch

        def on_train_end(self, logs: Any = None) -> None:
            gate.close()  # the generator waiting for another fit ends

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if self._placed:
                return
            self._placed = True

            def place() -> None:
                ds.epoch = self._epoch
                ds.seek(batch)

            gate.admit(ds.name, place, (getattr(self, "params", None) or {}).get("epochs"))

    return DataPosition()

"""A Keras callback that reports training progress to the job (optional: needs Keras).

``model.fit(..., callbacks=[ProgressCallback(keras)])`` reports the global step (the optimizer's
iteration count, so a run restored by ``BackupAndRestore`` carries on from where it was), the total
(epochs × steps per epoch, when Keras knows the steps) and the batch's logs (loss, metrics), every
half second, plus each epoch's logs (validation metrics included) at its end. Outside a
tony-workflow task it does nothing.

Pass the Keras you build the model with (``tf_keras`` for Keras 2, ``keras`` for Keras 3); a
callback must derive from that Keras's own ``Callback`` class, so the class is made for it.
"""
from __future__ import annotations

import time
from typing import Any

from .task.reporting import report

__all__ = ["ProgressCallback"]

_CLASSES: dict[int, type] = {}


def _numbers(logs: dict | None, prefix: str = "") -> dict[str, float]:
    out = {}
    for name, value in (logs or {}).items():
        try:
            out[prefix + str(name)] = float(value)
        except (TypeError, ValueError):
            continue  # a non-scalar log entry: not a metric to report
    return out


def _callback_class(keras: Any) -> type:
    base = keras.callbacks.Callback

    class _ProgressCallback(base):
        def __init__(self, every: float = 0.5):
            super().__init__()
            self.every = every
            self.total: int | None = None
            self._last = 0.0

        def _step(self) -> int | None:
            try:
                return int(self.model.optimizer.iterations.numpy())
            except (AttributeError, TypeError, ValueError):
                return None

        def on_train_begin(self, logs=None):
            params = self.params or {}
            epochs, steps = params.get("epochs"), params.get("steps")
            self.total = int(epochs) * int(steps) if epochs and steps else None
            report(step=self._step(), total=self.total)

        def on_train_batch_end(self, batch, logs=None):
            now = time.monotonic()
            if now - self._last < self.every:
                return  # report() merges calls anyway; this spares reading the step and the logs
            self._last = now
            report(step=self._step(), total=self.total, **_numbers(logs))

        def on_epoch_end(self, epoch, logs=None):
            self._last = time.monotonic()
            report(step=self._step(), total=self.total, epoch=epoch + 1, **_numbers(logs))

        def on_train_end(self, logs=None):
            report(step=self._step(), total=self.total)

    _ProgressCallback.__name__ = _ProgressCallback.__qualname__ = "ProgressCallback"
    return _ProgressCallback


def ProgressCallback(keras: Any = None, every: float = 0.5):
    """A callback reporting progress at most every ``every`` seconds of batches and at each
    epoch's end. ``keras`` is the Keras module the model is built with (default:
    ``tensorflow.keras``)."""
    if keras is None:
        import tensorflow as tf

        keras = tf.keras
    cls = _CLASSES.get(id(keras))
    if cls is None:
        cls = _CLASSES[id(keras)] = _callback_class(keras)
    return cls(every)

"""A Keras callback that reports training progress to the job (optional: needs Keras).

``model.fit(..., callbacks=[ProgressCallback(keras)])`` reports the global step (the optimizer's
iteration count, so a run restored by ``BackupAndRestore`` carries on from where it was), the total
(epochs × steps per epoch, when Keras knows the steps) and the batch's logs (loss, metrics), every
half second, plus each epoch's logs (validation metrics included) at its end. Outside a
tony-workflow task it does nothing.

Under a multi-worker strategy whose per-step logs are the sum over its replicas (a model's
``distribute_reduction_method`` of ``"sum"``, which ``"auto"`` means in Keras 2), a batch's
figures are divided by the number of replicas, so an accuracy never reads above 1. The
epoch's logs need no such care: Keras reads them from the metrics, aggregated. The batch's are not
read that way on purpose: reading an aggregated metric is a collective operation that every worker
would have to do at the same step, and this callback reports by the clock.

Pass the Keras you build the model with (``tf_keras`` for Keras 2, ``keras`` for Keras 3); a
callback must derive from that Keras's own ``Callback`` class, so the class is made for it.
"""
from __future__ import annotations

import sys
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


def _replicas_summed(model: Any, keras: Any) -> int:
    """How many replicas a batch's logs are the sum of: Keras sums them over the workers only
    under a multi-worker ``MultiWorkerMirroredStrategy`` with the reduction ``"sum"`` (1 when
    they are a mean, or one replica's)."""
    tf = sys.modules.get("tensorflow")
    strategy = getattr(model, "distribute_strategy", None)
    try:
        multi_worker = (tf is not None and isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
                        and bool(strategy.extended._in_multi_worker_mode()))
        replicas = int(strategy.num_replicas_in_sync) if multi_worker else 1
    except (AttributeError, TypeError, ValueError):
        return 1
    method = getattr(model, "distribute_reduction_method", None) or "auto"
    if method == "auto":  # Keras 2 sums (off TPUs, and this strategy is not one), Keras 3 takes the mean
        keras_2 = str(getattr(keras, "__version__", "")).startswith("2.")
        method = "sum" if keras_2 else "mean"
    return replicas if method == "sum" and replicas > 1 else 1


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
            summed = _replicas_summed(self.model, keras)
            figures = {k: v / summed for k, v in _numbers(logs).items()}
            report(step=self._step(), total=self.total, **figures)

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

"""The Keras progress callback (:mod:`tony_workflow.keras`) on a real Keras model: it reports the
optimizer's step, the total the fit will take, and the logs' numbers to ``tony_workflow.report``."""
from __future__ import annotations

import pytest

from tony_workflow.keras import _numbers

pytestmark = pytest.mark.tf


def test_only_the_logs_numbers_are_reported():
    assert _numbers({"loss": 0.5, "acc": "0.9", "lr": object(), "name": "x"}, "val_") == {"val_loss": 0.5,
                                                                                           "val_acc": 0.9}
    assert _numbers(None) == {}


def test_a_fit_reports_steps_total_and_metrics(monkeypatch):
    import numpy as np
    import tensorflow as tf

    from tony_workflow import keras as tony_keras

    reports: list[dict] = []
    monkeypatch.setattr(tony_keras, "report", lambda **kw: reports.append(kw))
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.zeros((8, 2), "float32"), np.zeros((8, 1), "float32")
    model.fit(x, y, batch_size=2, epochs=2, verbose=0, callbacks=[tony_keras.ProgressCallback(every=0)])
    assert reports[0] == {"step": 0, "total": 8}
    assert reports[-1] == {"step": 8, "total": 8}
    epoch_ends = [r for r in reports if "epoch" in r]
    assert [r["epoch"] for r in epoch_ends] == [1, 2] and all("loss" in r for r in epoch_ends)
    assert type(tony_keras.ProgressCallback()).__name__ == "ProgressCallback"

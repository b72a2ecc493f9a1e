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



SUMMED_FIT = r'''
import json, sys
import numpy as np
import tensorflow as tf
import tf_keras as keras  # Keras 3's fit() does not run under this strategy with two workers
from tony_workflow import keras as tony_keras
reports, raw = [], []
tony_keras.report = lambda **kw: reports.append(kw)

class Raw(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        raw.append(float(logs["accuracy"]))

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.distribute_reduction_method = sys.argv[1]
x = np.stack([np.ones(16, "float32"), np.arange(16, dtype="float32") % 2], axis=1)
y = (np.arange(16) % 2).astype("int64")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(4).with_options(options)
model.fit(data, steps_per_epoch=4, epochs=2, verbose=0,
          callbacks=[Raw(), tony_keras.ProgressCallback(keras, every=0)])
batches = [r["accuracy"] for r in reports if "accuracy" in r and "epoch" not in r]
epochs = [r["accuracy"] for r in reports if "epoch" in r]
print(json.dumps({"replicas": strategy.num_replicas_in_sync, "batches": batches, "raw": raw, "epochs": epochs}))
'''


@pytest.mark.parametrize("method,summed", [("sum", 2), ("auto", 2), ("first", 1)])
def test_a_batchs_figures_under_two_workers_are_their_mean_not_their_sum(method, summed, tmp_path):
    """Two real workers of a MultiWorkerMirroredStrategy in Keras 2: with the reduction "sum" (what
    "auto" means there), Keras logs a batch's accuracy summed over both, up to 2; the job is told
    their mean. "first" logs one replica's, passed on as it is. The epochs' figures are right."""
    import json
    import os
    import socket
    import subprocess
    import sys

    sockets = [socket.socket() for _ in range(2)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    workers = []
    for index in range(2):
        tf_config = {"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                     "task": {"type": "worker", "index": index}}
        env = {**os.environ, "TF_CONFIG": json.dumps(tf_config), "CUDA_VISIBLE_DEVICES": ""}
        workers.append(subprocess.Popen([sys.executable, "-c", SUMMED_FIT, method], env=env, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path))
    outs = [w.communicate(timeout=300) for w in workers]
    for w, (_, err) in zip(workers, outs, strict=True):
        assert w.returncode == 0, err[-3000:]
    seen = json.loads(outs[0][0].strip().splitlines()[-1])
    assert seen["replicas"] == 2 and len(seen["batches"]) == len(seen["raw"]) == 8
    assert seen["batches"] == pytest.approx([v / summed for v in seen["raw"]])
    assert all(0.0 <= v <= 1.0 for v in seen["batches"] + seen["epochs"]), seen
    if summed > 1:  # an epoch's last batch logs the epoch's running figure: Keras's own, aggregated
        assert seen["raw"][-1] == pytest.approx(2 * seen["epochs"][-1])  # what the job was told before
        assert seen["batches"][-1] == pytest.approx(seen["epochs"][-1])

"""Synchronous data-parallel training with MultiWorkerMirroredStrategy.

Every task runs this same script; TF_CONFIG tells each one its place in the
cluster. Training state is backed up every few steps into
$TONY_CHECKPOINT_DIR, so when the runtime relaunches the job session after a
failure, all workers pick up from the last backup instead of step 0.

When the job declares an input named ``train`` (``data: train: {path: ...}``,
Parquet files of ``image`` and ``label`` as synthetic_mnist.save_parquet
writes them), every worker reads its own share of it through
tony_workflow.data, and a relaunch resumes the input at the very step the
backup restores. Otherwise the data is generated in memory (or read from an
.npz given with --data).

Without TF_CONFIG the script trains as a single local worker.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

# Must be set before TensorFlow is imported to have any effect.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import synthetic_mnist
import tensorflow as tf

# Keras 3's fit() cannot run under MultiWorkerMirroredStrategy with more than
# one worker, while Keras 2 handles it, BackupAndRestore included.
import tf_keras as keras

try:  # progress for the job's status, progress bar and hang detection
    from tony_workflow import report
    from tony_workflow.keras import ProgressCallback
except ImportError:  # run outside tony-workflow
    ProgressCallback = report = None

TAG = "[mnist]"
SEED = 7
TRAIN_EXAMPLES = 4096
VALIDATION_EXAMPLES = 1024
LOG_EVERY_STEPS = 10


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument(
        "--steps-per-epoch", type=int, default=40,
        help="steps of an epoch on in-memory data (the job's input has its own)")
    parser.add_argument(
        "--batch-size", type=int, default=64,
        help="global batch size, split evenly across workers")
    parser.add_argument(
        "--save-freq", type=int, default=10,
        help="back up the training state every N steps")
    parser.add_argument(
        "--step-sleep", type=float, default=0.0,
        help="seconds to pause after every step, to stretch a run out")
    parser.add_argument(
        "--data", default=None,
        help="an .npz written by prepare_data.py; generated in memory if omitted")
    return parser.parse_args(argv)


def task_identity():
    """Return (task_type, task_index, is_chief) for this process."""
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = tf_config.get("task") or {}
    cluster = tf_config.get("cluster") or {}
    if not task:
        task_type = os.environ.get("JOB_NAME", "worker")
        task_index = int(os.environ.get("TASK_INDEX", "0"))
        return task_type, task_index, True
    task_type = task.get("type", "worker")
    task_index = int(task.get("index", 0))
    # TensorFlow's rule: a "chief" task if the cluster has one, else worker 0.
    if "chief" in cluster:
        is_chief = task_type == "chief"
    else:
        is_chief = task_type == "worker" and task_index == 0
    return task_type, task_index, is_chief


def log(message):
    # Flushed at once: the runtime tails these lines while the task runs.
    print(f"{TAG} {message}", flush=True)


def job_input():
    """The job's ``train`` input, or None when it declares none."""
    if not os.environ.get("TONY_DATA_MANIFEST"):
        return None
    from tony_workflow.data.manifest import load_manifest
    return "train" if "train" in load_manifest() else None


def input_dataset(strategy, global_batch):
    """This worker's share of the job's ``train`` input, as Keras takes it, and
    the reader (whose Keras callback keeps it at Keras's epoch and step)."""
    from tony_workflow.data import dataset

    workers = max(1, strategy.num_replicas_in_sync)
    reader = dataset("train", batch_size=global_batch // workers,
                     shuffle=True, seed=SEED, columns=["image", "label"])

    def features(batch):
        return tf.reshape(batch["image"], (-1,) + synthetic_mnist.IMAGE_SHAPE), batch["label"]

    return reader.as_tf(strategy, map_fn=features), reader


def make_dataset(images, labels, batch_size, repeat):
    dataset = tf.data.Dataset.from_tensor_slices((images, labels))
    if repeat:
        dataset = dataset.shuffle(len(images), seed=SEED).repeat()
    dataset = dataset.batch(batch_size)
    # In-memory data has no files to split between workers; saying so up
    # front avoids a fallback warning on every worker.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA)
    return dataset.with_options(options)


class ProgressLogger(keras.callbacks.Callback):
    """Reports the restored starting point and periodic losses on stdout."""

    def __init__(self, session):
        super().__init__()
        self.session = session

    def _global_step(self):
        return int(self.model.optimizer.iterations.numpy())

    def on_train_begin(self, logs=None):
        # Listed after BackupAndRestore, so any restore has happened already.
        task_type, task_index, _ = task_identity()
        log(f"session={self.session} task={task_type}:{task_index} "
            f"start_step={self._global_step()}")

    def on_train_batch_end(self, batch, logs=None):
        step = self._global_step()
        if step % LOG_EVERY_STEPS == 0:
            replicas = self.model.distribute_strategy.num_replicas_in_sync
            loss = float((logs or {}).get("loss", float("nan"))) / replicas
            log(f"session={self.session} step={step} loss={loss:.4f}")

    def on_epoch_end(self, epoch, logs=None):
        # An epoch's figures come aggregated over the workers: no division.
        logs = logs or {}
        log(f"session={self.session} epoch={epoch + 1} "
            f"loss={logs.get('loss', float('nan')):.4f} "
            f"accuracy={logs.get('accuracy', float('nan')):.4f}")


class StepSleeper(keras.callbacks.Callback):
    """Slows training down so that a run can be interrupted part-way."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(self.seconds)


def write_json_atomically(path, payload):
    # Readers such as evaluate.py must never see a half-written file.
    tmp_path = path + ".tmp"
    with open(tmp_path, "w") as handle:
        json.dump(payload, handle)
        handle.write("\n")
    os.replace(tmp_path, path)


def main(argv=None):
    args = parse_args(argv)
    session = os.environ.get("SESSION_ID", "0")
    _, _, is_chief = task_identity()
    checkpoint_dir = os.environ.get("TONY_CHECKPOINT_DIR") or os.path.join(
        tempfile.gettempdir(), "mnist_mwms_checkpoints")
    log_dir = os.environ.get("TONY_LOG_DIR") or os.path.join(
        tempfile.gettempdir(), "mnist_mwms_logs")
    os.makedirs(checkpoint_dir, exist_ok=True)

    # The strategy has to exist before any other TensorFlow op runs, because
    # creating it configures the collective runtime for the whole process.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    # Same seed everywhere: workers must agree on initial weights and on the
    # shuffling order that the data sharding is applied to.
    keras.utils.set_random_seed(SEED)
    reader = None
    if job_input():
        train_data, reader = input_dataset(strategy, args.batch_size)
        val_images, val_labels = synthetic_mnist.make_arrays(
            VALIDATION_EXAMPLES, synthetic_mnist.VALIDATION_SEED)
    elif args.data:
        (train_images, train_labels), (val_images, val_labels) = \
            synthetic_mnist.load(args.data)
    else:
        train_images, train_labels = synthetic_mnist.make_arrays(
            TRAIN_EXAMPLES, synthetic_mnist.TRAIN_SEED)
        val_images, val_labels = synthetic_mnist.make_arrays(
            VALIDATION_EXAMPLES, synthetic_mnist.VALIDATION_SEED)
    if reader is None:
        train_data = make_dataset(
            train_images, train_labels, args.batch_size, repeat=True)
    val_data = make_dataset(
        val_images, val_labels, args.batch_size, repeat=False)

    with strategy.scope():
        model = synthetic_mnist.build_model(keras)
    # Per-step logs hold each replica's running mean added up over all
    # replicas (what "auto" means in Keras 2); pinning it keeps the division
    # in ProgressLogger right should that default ever change.
    model.distribute_reduction_method = "sum"

    # TensorBoard events from every worker in one directory would clash;
    # only the chief's go to the served log dir, the others are thrown away.
    if is_chief:
        tensorboard_dir = log_dir
        scratch_dirs = []
    else:
        tensorboard_dir = tempfile.mkdtemp(prefix="mnist-tb-")
        scratch_dirs = [tensorboard_dir]

    callbacks = [
        # All workers share one backup_dir; non-chief workers divert their
        # own writes into temporary subdirectories by themselves.
        keras.callbacks.BackupAndRestore(
            backup_dir=os.path.join(checkpoint_dir, "backup"),
            save_freq=args.save_freq),
        ProgressLogger(session),
        # Epoch-level only: per-step values would be the replica sum
        # described above, while epoch values are properly aggregated.
        keras.callbacks.TensorBoard(
            log_dir=tensorboard_dir, update_freq="epoch",
            write_graph=False, profile_batch=0),
    ]
    if reader is not None:
        # After BackupAndRestore: the input starts each epoch at the step
        # Keras starts it at, so a restored run sees the batches the lost one
        # would have, none twice and none skipped.
        callbacks.append(reader.keras_callback(keras))
    if args.step_sleep > 0:
        callbacks.append(StepSleeper(args.step_sleep))
    if ProgressCallback is not None:
        callbacks.append(ProgressCallback(keras))

    model.fit(
        train_data,
        epochs=args.epochs,
        steps_per_epoch=len(reader) if reader is not None else args.steps_per_epoch,
        callbacks=callbacks,
        verbose=0,
    )

    # Scored on held-out data rather than taken from the training history,
    # which is empty when a relaunch finds the run already complete.
    loss, accuracy = model.evaluate(val_data, verbose=0)
    steps = int(model.optimizer.iterations.numpy())

    # Saving runs on every worker (TensorFlow's guidance for multi-worker
    # strategies); only the chief's copy is kept.
    if is_chief:
        final_dir = os.path.join(checkpoint_dir, "final")
        os.makedirs(final_dir, exist_ok=True)
    else:
        final_dir = tempfile.mkdtemp(prefix="mnist-final-")
        scratch_dirs.append(final_dir)
    weights_path = os.path.join(final_dir, "model.weights.h5")
    # Written under a temporary name so a crash cannot leave a truncated
    # file where evaluate.py looks.
    partial_path = os.path.join(final_dir, "partial.weights.h5")
    model.save_weights(partial_path)
    os.replace(partial_path, weights_path)
    if is_chief:
        write_json_atomically(
            os.path.join(final_dir, "metrics.json"),
            {"steps": steps, "loss": float(loss), "accuracy": float(accuracy)})

    for path in scratch_dirs:
        shutil.rmtree(path, ignore_errors=True)

    if report is not None:
        report(val_loss=float(loss), val_accuracy=float(accuracy))
    log(f"session={session} done steps={steps} "
        f"val_loss={loss:.4f} val_accuracy={accuracy:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

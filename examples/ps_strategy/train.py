"""Asynchronous training with ParameterServerStrategy (TensorFlow 2).

One script serves every role:
  * `ps` and `worker` tasks only host a TensorFlow server and wait; the
    runtime stops them once the chief has finished.
  * the `chief` task is the coordinator: it owns the training loop, places the
    variables on the parameter servers, sends each step to whichever worker is
    free, and checkpoints into $TONY_CHECKPOINT_DIR.

A worker that dies and comes back at the same address is taken back by the
coordinator, which re-runs the steps that were lost with it. If the chief
itself is relaunched it continues from the latest checkpoint.

Without TF_CONFIG the script builds a small in-process cluster, so it can be
tried on a laptop with a plain `python train.py`.
"""

import argparse
import os
import socket
import sys
import tempfile
import time

# Both must be set before TensorFlow is imported. Failing fast lets the
# coordinator notice a lost worker at once instead of waiting on a dead
# connection; TensorFlow's fault-tolerance guidance asks for it on every task.
os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import numpy as np
import tensorflow as tf
import tf_keras as keras

try:  # progress for the job's status, progress bar and hang detection
    from tony_workflow import report
except ImportError:  # run outside tony-workflow
    def report(**_):
        pass

TAG = "[ps]"
SEED = 11
NUM_FEATURES = 32
NUM_CLASSES = 4
NUM_EXAMPLES = 4096
LOG_EVERY_STEPS = 10


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--checkpoint-every", type=int, default=20)
    parser.add_argument(
        "--batch-size", type=int, default=64,
        help="examples per training step; each step runs on one worker")
    parser.add_argument(
        "--step-sleep", type=float, default=0.0,
        help="seconds the coordinator pauses after scheduling each step, "
             "to stretch a run out")
    parser.add_argument(
        "--pause-while", metavar="PATH",
        help="before scheduling each step, wait while PATH exists: hold the "
             "training still while a worker is replaced, then let it go on")
    return parser.parse_args(argv)


def log(message):
    # Flushed at once: the runtime tails these lines while the task runs.
    print(f"{TAG} {message}", flush=True)


def make_arrays():
    """A learnable classification problem: labels come from a hidden linear
    teacher applied to Gaussian features, plus some label noise."""
    rng = np.random.RandomState(SEED)
    teacher = rng.normal(size=(NUM_FEATURES, NUM_CLASSES))
    features = rng.normal(size=(NUM_EXAMPLES, NUM_FEATURES))
    scores = features @ teacher + rng.normal(
        scale=0.5, size=(NUM_EXAMPLES, NUM_CLASSES))
    labels = np.argmax(scores, axis=1)
    return features.astype("float32"), labels.astype("int64")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def local_cluster_resolver(num_workers=2, num_ps=1):
    """Start worker and ps servers inside this process for a quick trial."""
    cluster = {
        "worker": [f"127.0.0.1:{free_port()}" for _ in range(num_workers)],
        "ps": [f"127.0.0.1:{free_port()}" for _ in range(num_ps)],
    }
    cluster_spec = tf.train.ClusterSpec(cluster)
    # All servers share this process's cores; with fewer cores than workers
    # plus the coordinator, the default thread pools can starve each other
    # and the first step never completes.
    config = tf.compat.v1.ConfigProto()
    config.inter_op_parallelism_threads = max(
        num_workers + 1, os.cpu_count() or 1)
    for job_name, addresses in cluster.items():
        for index in range(len(addresses)):
            tf.distribute.Server(
                cluster_spec, job_name=job_name, task_index=index,
                config=config, protocol="grpc", start=True)
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        cluster_spec, rpc_layer="grpc")


def serve_forever(resolver, session):
    """Host this task's share of the cluster; returns only when killed."""
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc",
        start=True)
    log(f"session={session} task={resolver.task_type}:{resolver.task_id} "
        f"serving at {server.target}")
    server.join()


def build_model():
    return keras.Sequential(
        [
            keras.Input(shape=(NUM_FEATURES,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(NUM_CLASSES),
        ]
    )


def next_stop(step, total, *periods):
    """First step after `step` that ends a logging or checkpoint period."""
    candidates = [total]
    for period in periods:
        if period > 0:
            candidates.append((step // period + 1) * period)
    return min(candidates)


def coordinate(resolver, args, session):
    checkpoint_root = os.environ.get("TONY_CHECKPOINT_DIR") or os.path.join(
        tempfile.gettempdir(), "ps_strategy_checkpoints")
    log_dir = os.environ.get("TONY_LOG_DIR") or os.path.join(
        tempfile.gettempdir(), "ps_strategy_logs")
    checkpoint_dir = os.path.join(checkpoint_root, "ps_ckpt")

    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    keras.utils.set_random_seed(SEED)
    with strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.Adam(learning_rate=1e-2)
        # Creating the slot variables now, outside any traced function, means
        # a checkpoint restore can fill them immediately.
        optimizer.build(model.trainable_variables)

    # Counted here rather than read from optimizer.iterations: a step that a
    # dying worker had already applied gets re-run, so the optimizer's own
    # counter can drift past the number of steps actually scheduled.
    global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
    checkpoint = tf.train.Checkpoint(
        model=model, optimizer=optimizer, step=global_step)
    manager = tf.train.CheckpointManager(
        checkpoint, checkpoint_dir, max_to_keep=3)
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint).assert_consumed()
    step = int(global_step.numpy())
    log(f"session={session} start_step={step}")

    features, labels = make_arrays()

    def dataset_fn(input_context):
        dataset = tf.data.Dataset.from_tensor_slices((features, labels))
        # Unseeded shuffling: each worker, and each relaunch of one, walks
        # the data in its own order, which asynchronous training wants.
        dataset = dataset.shuffle(NUM_EXAMPLES).repeat()
        return dataset.batch(args.batch_size).prefetch(2)

    # Handed over as a function rather than a dataset, so that the
    # coordinator can rebuild the pipeline on a worker that was relaunched.
    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    per_worker_dataset = coordinator.create_per_worker_dataset(
        per_worker_dataset_fn)
    per_worker_iterator = iter(per_worker_dataset)

    loss_fn = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=keras.losses.Reduction.NONE)

    @tf.function
    def train_step(iterator):
        def replica_fn(batch_features, batch_labels):
            with tf.GradientTape() as tape:
                logits = model(batch_features, training=True)
                loss = tf.reduce_mean(loss_fn(batch_labels, logits))
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(
                zip(gradients, model.trainable_variables))
            return loss

        batch_features, batch_labels = next(iterator)
        per_replica_loss = strategy.run(
            replica_fn, args=(batch_features, batch_labels))
        return strategy.reduce(
            tf.distribute.ReduceOp.MEAN, per_replica_loss, axis=None)

    writer = tf.summary.create_file_writer(os.path.join(log_dir, "train"))
    while step < args.steps:
        stop = next_stop(step, args.steps, LOG_EVERY_STEPS,
                         args.checkpoint_every)
        pending = []
        for _ in range(stop - step):
            while args.pause_while and os.path.exists(args.pause_while):
                time.sleep(0.05)
            pending.append(
                coordinator.schedule(train_step, args=(per_worker_iterator,)))
            if args.step_sleep > 0:
                time.sleep(args.step_sleep)
        # Waits out steps that are being retried after a worker failure too;
        # a checkpoint must not be taken while updates are still in flight.
        coordinator.join()
        step = stop
        global_step.assign(step)
        loss = float(np.mean([value.fetch() for value in pending]))
        report(step=step, total=args.steps, loss=loss)

        if step % LOG_EVERY_STEPS == 0:
            log(f"session={session} step={step} loss={loss:.4f}")
            with writer.as_default():
                tf.summary.scalar("loss", loss, step=step)
                writer.flush()
        if (args.checkpoint_every > 0 and step % args.checkpoint_every == 0) \
                or step == args.steps:
            manager.save(checkpoint_number=step)

    log(f"session={session} done steps={step}")


def main(argv=None):
    args = parse_args(argv)
    session = os.environ.get("SESSION_ID", "0")

    if os.environ.get("TF_CONFIG"):
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        task_type = resolver.task_type
        if task_type in ("worker", "ps"):
            serve_forever(resolver, session)
            return 0
        if task_type != "chief":
            print(f"train.py: unexpected task type {task_type!r}; this job "
                  "uses chief, worker and ps", file=sys.stderr)
            return 2
    else:
        resolver = local_cluster_resolver()

    coordinate(resolver, args, session)
    return 0


if __name__ == "__main__":
    sys.exit(main())

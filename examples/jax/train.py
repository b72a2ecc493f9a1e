"""Multi-process data-parallel training with JAX: one global mesh over every process's devices.

Each process learns its place from the runtime's JAX variables
(JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID) and joins the
others through ``jax.distributed.initialize``. The model is a small
multi-layer perceptron on scikit-learn's handwritten digits (they ship with
the package). Every step, each process feeds its own shard of the global
batch; the parameters are replicated over the mesh, so the jitted step's
gradient is averaged across processes by XLA's collectives (gloo between
processes on CPUs).

Process 0 saves the parameters every --save-every steps into
$TONY_CHECKPOINT_DIR; on start it loads the newest save and broadcasts it to
every process, so a relaunched session continues where the last one saved.
At the end every process prints a digest of its parameters (identical on
all), and process 0 evaluates on the held-out test set and writes
final/params.npz and final/metrics.json.

Without the runtime's variables it trains as a single process.
"""

import argparse
import hashlib
import json
import os
import tempfile
import time
from itertools import pairwise

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

try:  # progress for the job's status, progress bar and hang detection
    from tony_workflow import report
except ImportError:  # run outside tony-workflow
    def report(**_):
        pass

TAG = "[jax]"
SEED = 7
SIZES = (64, 128, 64, 10)
CHECKPOINT = "params.npz"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=60, help="global batch, split over the processes")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--save-every", type=int, default=20)
    parser.add_argument("--step-sleep", type=float, default=0.0,
                        help="seconds to pause after every step, to stretch a run out")
    return parser.parse_args(argv)


def log(message):
    print(f"{TAG} {message}", flush=True)


def join():
    """(process id, process count): joins the other processes when the runtime says there are any."""
    if "JAX_COORDINATOR_ADDRESS" in os.environ:
        jax.distributed.initialize(coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
                                   num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
                                   process_id=int(os.environ["JAX_PROCESS_ID"]))
    return jax.process_index(), jax.process_count()


def digits_split():
    digits = load_digits()
    features = (digits.data / 16.0).astype(np.float32)
    return train_test_split(features, digits.target.astype(np.int32), test_size=0.2, random_state=0,
                            stratify=digits.target)


def init_params(key):
    params = []
    for fan_in, fan_out in pairwise(SIZES):
        key, sub = jax.random.split(key)
        params.append((jax.random.normal(sub, (fan_in, fan_out)) * np.sqrt(2.0 / fan_in), jnp.zeros(fan_out)))
    return params


def logits(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss_fn(params, x, y):
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits(params, x)), y[:, None], axis=1))


def flat(params):
    return {f"p{i}": np.asarray(a) for i, a in enumerate(jax.tree_util.tree_leaves(params))}


def unflat(arrays, like):
    leaves = [jnp.asarray(arrays[f"p{i}"]) for i in range(len(jax.tree_util.tree_leaves(like)))]
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(like), leaves)


def main(argv=None):
    args = parse_args(argv)
    session = os.environ.get("SESSION_ID", "0")
    checkpoint_dir = os.environ.get("TONY_CHECKPOINT_DIR") or os.path.join(tempfile.gettempdir(), "jax_checkpoints")
    os.makedirs(checkpoint_dir, exist_ok=True)
    me, count = join()
    if args.batch_size % jax.device_count():
        raise SystemExit(f"--batch-size {args.batch_size} does not split over {jax.device_count()} devices")
    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated = NamedSharding(mesh, PartitionSpec())

    train_x, test_x, train_y, test_y = digits_split()
    params = init_params(jax.random.PRNGKey(SEED))
    step = 0
    # Process 0 reads the newest save and every process takes it from there: the containers'
    # copies of the checkpoint directory need not agree.
    saved = None
    if me == 0 and os.path.exists(os.path.join(checkpoint_dir, CHECKPOINT)):
        with np.load(os.path.join(checkpoint_dir, CHECKPOINT)) as f:
            saved = {k: f[k] for k in f.files}
    have = multihost_utils.broadcast_one_to_all(np.array(saved is not None))
    if have:
        template = {**flat(params), "step": np.array(0)}
        saved = multihost_utils.broadcast_one_to_all(saved if saved is not None else template)
        params, step = unflat(saved, params), int(saved["step"])
    params = jax.device_put(params, replicated)
    log(f"session={session} process={me} of {count} start_step={step}")

    @jax.jit
    def train_step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - args.lr * g, params, grads), loss

    local_batch = args.batch_size // count
    started = time.time()
    while step < args.steps:
        # Every process draws the same global batch order; each feeds its own slice of it.
        order = np.random.RandomState(SEED + step).permutation(len(train_x))[:args.batch_size]
        mine = order[me * local_batch:(me + 1) * local_batch]
        x = multihost_utils.host_local_array_to_global_array(train_x[mine], mesh, PartitionSpec("data"))
        y = multihost_utils.host_local_array_to_global_array(train_y[mine], mesh, PartitionSpec("data"))
        params, loss = train_step(params, x, y)
        step += 1
        if me == 0:
            value = float(loss)
            report(step=step, total=args.steps, loss=value)
            if step % 20 == 0:
                log(f"session={session} step={step} loss={value:.4f}")
        if step % args.save_every == 0 or step == args.steps:
            host = flat(multihost_utils.process_allgather(params, tiled=True))  # a collective: every process
            if me == 0:
                tmp = os.path.join(checkpoint_dir, "params.tmp.npz")
                np.savez(tmp, step=np.array(step), **host)
                os.replace(tmp, os.path.join(checkpoint_dir, CHECKPOINT))
        if args.step_sleep:
            time.sleep(args.step_sleep)

    host = multihost_utils.process_allgather(params, tiled=True)
    digest = hashlib.sha256(b"".join(a.tobytes() for a in flat(host).values())).hexdigest()[:16]
    log(f"session={session} process={me} done steps={step} params={digest}")
    if me == 0:
        predictions = np.asarray(jnp.argmax(logits(host, jnp.asarray(test_x)), axis=1))
        metrics = {"steps": step, "accuracy": round(float(np.mean(predictions == test_y)), 4),
                   "loss": round(float(loss_fn(host, jnp.asarray(test_x), jnp.asarray(test_y))), 4),
                   "processes": count, "seconds": round(time.time() - started, 2)}
        final = os.path.join(checkpoint_dir, "final")
        os.makedirs(final, exist_ok=True)
        np.savez(os.path.join(final, "params.npz"), **flat(host))
        with open(os.path.join(final, "metrics.json"), "w") as handle:
            json.dump(metrics, handle)
        log(f"evaluation: {json.dumps(metrics)}")
    multihost_utils.sync_global_devices("done")


if __name__ == "__main__":
    main()

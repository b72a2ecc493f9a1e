"""Data-parallel training with PyTorch DistributedDataParallel, written for torchrun.

The script trains through tony_workflow.torch_elastic.run, which gives it its
place in the group: from torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT), which the runtime sets exactly as torchrun does (one
process per container, or several under torch's own agent with
tony.<type>.processes), or, in an elastic job that regroups in place
(tony.elastic.regroup=in-place), from each generation of the group: a lost
worker's survivors keep their processes and their state in memory, re-form the
group without it and train on, and the replacement joins at a later step and is
handed the state. The process group uses NCCL on GPUs and gloo on CPUs.

Every rank saves the training state every --save-every steps into its
$TONY_CHECKPOINT_DIR (the replicas are identical, so any copy will do); the
runtime mirrors the chief's to the job's checkpoint store and restores it into
every container of a relaunched session. When a group forms, the ranks compare
their steps and the newest state is handed to every rank, so all replicas
continue from the same step with the same weights and optimizer state: after a
relaunch, and as well when an elastic job's group re-forms with other ranks, a
replacement in it. At the end every rank evaluates the model on the held-out
test set and writes final/model.pt and final/metrics.json (rank 0 prints the
evaluation); every rank prints a digest of its parameters, which are identical
across replicas.

When the job declares an input named ``train`` (``data: train: {path: ...}``:
Parquet of ``pixels`` and ``label``, as digits.save_parquet writes them), every
rank reads its own share of it through tony_workflow.data; the reader is part of
the state, so a relaunch or a regroup takes up the epoch exactly where the group
left it, whatever its new size. Otherwise every rank loads scikit-learn's arrays
and shards them with a DistributedSampler.

The same script runs unchanged in a fixed job and in an elastic one
(tony.worker.min-instances): its --batch-size must then divide by every world
size the group may have.

Without torchrun's variables the script trains as a single process.
"""

import argparse
import hashlib
import json
import os
import sys
import tempfile
import threading
import time
import types

import digits
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

# Progress for the job's status, progress bar and hang detection; the group, fixed or elastic.
from tony_workflow import report
from tony_workflow.torch_elastic import State, run

TAG = "[ddp]"
SEED = 7
CHECKPOINT = "ckpt.pt"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64,
                        help="global batch size, split evenly across ranks")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--save-every", type=int, default=10,
                        help="save the training state every N steps")
    parser.add_argument(
        "--pause-while", metavar="PATH",
        help="before each step, wait while PATH exists: hold the group still, change it, let it go on")
    parser.add_argument("--step-sleep", type=float, default=0.0,
                        help="seconds to pause after every step, to stretch a run out")
    return parser.parse_args(argv)


def log(message):
    # Flushed at once: the runtime tails these lines while the task runs.
    print(f"{TAG} {message}", flush=True)


def device_of_process():
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0") or 0))
    return torch.device("cpu")


def save_atomically(state, path):
    # The runtime mirrors the directory while training runs: it must never
    # see a half-written file. Ranks that share a container share the directory:
    # each writes a file of its own before the rename.
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(state, tmp)
    os.replace(tmp, path)


class Summaries:
    """TensorBoard's SummaryWriter on ``logdir`` (None: none), opened on a thread of its own;
    scalars written before it is open are dropped."""

    def __init__(self, logdir):
        self.writer = None
        self._opening = threading.Thread(target=self._open, args=(logdir,), daemon=True) if logdir else None
        if self._opening:
            self._opening.start()

    def _open(self, logdir):
        try:
            if "://" not in logdir:
                # TensorBoard's writer loads TensorFlow when it can (800 MB, and its oneDNN and CUDA
                # lines in this job's log); a local directory needs only TensorBoard's own file API,
                # which it takes when told TensorFlow is not there.
                sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("notf"))
            from torch.utils.tensorboard import SummaryWriter
            self.writer = SummaryWriter(logdir)
        except ImportError:  # TensorBoard is optional
            pass

    def scalar(self, name, value, step):
        if self.writer is not None:
            self.writer.add_scalar(name, value, step)

    def close(self):
        if self._opening:
            self._opening.join(timeout=60)
        if self.writer is not None:
            self.writer.close()


def digest(model):
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def job_input(batch_size):
    """The reader of the job's ``train`` input, or None when it declares none."""
    if not os.environ.get("TONY_DATA_MANIFEST"):
        return None
    from tony_workflow.data import dataset
    from tony_workflow.data.manifest import load_manifest
    if "train" not in load_manifest():
        return None
    return dataset("train", batch_size=batch_size, shuffle=True, seed=SEED, columns=["pixels", "label"])


def main(argv=None):
    args = parse_args(argv)
    session = os.environ.get("SESSION_ID", "0")
    checkpoint_dir = os.environ.get("TONY_CHECKPOINT_DIR") or os.path.join(
        tempfile.gettempdir(), "pytorch_ddp_checkpoints")
    os.makedirs(checkpoint_dir, exist_ok=True)
    checkpoint = os.path.join(checkpoint_dir, CHECKPOINT)

    (train_x, train_y), (test_x, test_y) = digits.arrays()
    dataset = TensorDataset(torch.from_numpy(train_x), torch.from_numpy(train_y))
    reader = job_input(args.batch_size)
    device = device_of_process()
    # The same seed everywhere: every rank starts from the same weights (DDP checks).
    torch.manual_seed(SEED)
    model = digits.build_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    state = State(model=model, optimizer=optimizer, step=0, **({"data": reader} if reader else {}))
    if os.path.exists(checkpoint):
        # This container's copy; the group hands every rank the newest copy any rank has.
        state.load_state_dict(torch.load(checkpoint, map_location=device, weights_only=False))
    summaries = None
    loss_fn = torch.nn.CrossEntropyLoss()
    started = time.time()

    def train(state, group):
        nonlocal summaries
        rank, world = group.rank, group.world_size
        if args.batch_size % world:
            raise SystemExit(f"--batch-size {args.batch_size} does not split evenly over {world} ranks")
        # Every rank shards the same shuffled order.
        sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=SEED,
                                     drop_last=True)
        loader = DataLoader(dataset, batch_size=args.batch_size // world, sampler=sampler, drop_last=True)
        steps_per_epoch = len(loader)
        total = args.epochs * steps_per_epoch
        log(f"session={session} rank={rank} world={world} start_step={state.step} "
            f"input={'the job input train' if reader is not None else 'in-memory arrays'}")
        ddp = DistributedDataParallel(state.model) if world > 1 else state.model
        if rank == 0 and summaries is None:
            # Rank 0 writes TensorBoard summaries. The writer's import pulls in TensorFlow when
            # that is installed (seconds), so it is opened beside training rather than before it.
            summaries = Summaries(os.environ.get("TONY_LOG_DIR"))

        def step_on(x, y):
            while args.pause_while and os.path.exists(args.pause_while):
                time.sleep(0.1)
            x, y = x.to(device), y.to(device)
            state.optimizer.zero_grad()
            loss = loss_fn(ddp(x), y)
            loss.backward()
            state.optimizer.step()
            state.step += 1
            step = state.step
            if rank == 0:
                value = loss.item()
                report(step=step, total=total, loss=value)
                if step % 10 == 0:
                    log(f"session={session} step={step} loss={value:.4f}")
                    if summaries is not None:
                        summaries.scalar("loss", value, step)
            if args.step_sleep:
                time.sleep(args.step_sleep)
            # Where a change of the group (an elastic job's) takes effect; it also marks the
            # reader's batches trained, so a save after it resumes at the next batch.
            state.commit()
            if step % args.save_every == 0:
                save_atomically(state.state_dict(), checkpoint)

        if reader is not None:
            # This rank's share of what the group left of the epoch, in steps of its part of
            # the global batch.
            reader.set_group(rank, world)
            reader.batch_size = args.batch_size // world
            total = state.step + sum(reader.steps() if e == reader.epoch else len(reader)
                                     for e in range(reader.epoch, args.epochs))
            while reader.epoch < args.epochs:
                for batch in reader.loader():
                    step_on(batch["pixels"], batch["label"])
            save_atomically(state.state_dict(), checkpoint)
            return rank, world
        while state.step < total:
            epoch, skip = divmod(state.step, steps_per_epoch)
            sampler.set_epoch(epoch)
            for i, (x, y) in enumerate(loader):
                if i < skip:  # resuming mid-epoch: these batches were trained before
                    continue
                step_on(x, y)
        save_atomically(state.state_dict(), checkpoint)
        return rank, world

    rank, world = run(train, state)
    step = state.step
    log(f"session={session} rank={rank} done steps={step} params={digest(model)}")

    # Every rank: whichever container the job's store mirrors holds the final model.
    test_accuracy, test_loss = digits.accuracy(model, test_x, test_y, device)
    final = os.path.join(checkpoint_dir, "final")
    os.makedirs(final, exist_ok=True)
    save_atomically(model.state_dict(), os.path.join(final, "model.pt"))
    metrics = {"steps": step, "accuracy": round(test_accuracy, 4), "loss": round(test_loss, 4),
               "world_size": world, "seconds": round(time.time() - started, 2)}
    tmp = os.path.join(final, f"metrics.json.tmp{os.getpid()}")
    with open(tmp, "w") as handle:
        json.dump(metrics, handle)
    os.replace(tmp, os.path.join(final, "metrics.json"))
    if rank == 0:
        log(f"evaluation: {json.dumps(metrics)}")
        if summaries is not None:
            summaries.scalar("test_accuracy", test_accuracy, step)
    if summaries is not None:
        summaries.close()


if __name__ == "__main__":
    main()

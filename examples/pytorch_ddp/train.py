"""Data-parallel training with PyTorch DistributedDataParallel, written for torchrun.

Every process runs this same script and learns its place from torchrun's
variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), which the
runtime sets exactly as torchrun does: one process per container, or several
under torch's own agent (tony.<type>.processes). The process group uses NCCL
on GPUs and gloo on CPUs.

Every rank saves the training state every --save-every steps into its
$TONY_CHECKPOINT_DIR (the replicas are identical, so any copy will do); the
runtime mirrors the chief's to the job's checkpoint store and restores it into
every container of a relaunched session. On start, the ranks compare their
copies and the newest is handed to every rank, so all replicas continue from
the same step with the same weights and optimizer state: after a relaunch, and
as well when an elastic job's group re-forms with other ranks, a replacement
in it, whose copies differ. At the end every rank evaluates the model on the
held-out test set and writes final/model.pt and final/metrics.json (rank 0
prints the evaluation); every rank prints a digest of its parameters, which
are identical across replicas.

The same script runs unchanged in a fixed job and in an elastic one
(tony.worker.min-instances): its --batch-size must then divide by every world
size the group may have.

Without torchrun's variables the script trains as a single process.
"""

import argparse
import hashlib
import json
import os
import tempfile
import threading
import time

import digits
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

try:  # progress for the job's status, progress bar and hang detection
    from tony_workflow import report
except ImportError:  # run outside tony-workflow
    def report(**_):
        pass

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
    parser.add_argument("--step-sleep", type=float, default=0.0,
                        help="seconds to pause after every step, to stretch a run out")
    return parser.parse_args(argv)


def log(message):
    # Flushed at once: the runtime tails these lines while the task runs.
    print(f"{TAG} {message}", flush=True)


def setup():
    """(rank, world size, device), joining the process group when there is one."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return 0, 1, torch.device("cpu")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    # env:// reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE.
    dist.init_process_group(backend, init_method="env://")
    return rank, world, device


def save_atomically(state, path):
    # The runtime mirrors the directory while training runs: it must never
    # see a half-written file. Ranks that share a container share the directory:
    # each writes a file of its own before the rename.
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_state(checkpoint_dir, rank, world, device):
    """The newest state any rank saved, broadcast from that rank to every rank
    (the containers' copies of the checkpoint directory need not agree), or None."""
    path = os.path.join(checkpoint_dir, CHECKPOINT)
    state = torch.load(path, map_location="cpu", weights_only=False) if os.path.exists(path) else None
    if world == 1:
        return state
    steps = [None] * world
    dist.all_gather_object(steps, -1 if state is None else state["step"])
    newest = max(range(world), key=lambda r: (steps[r], -r))
    if steps[newest] < 0:
        return None
    box = [state if rank == newest else None]
    dist.broadcast_object_list(box, src=newest, device=device if device.type == "cuda" else None)
    return box[0]


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


def main(argv=None):
    args = parse_args(argv)
    session = os.environ.get("SESSION_ID", "0")
    checkpoint_dir = os.environ.get("TONY_CHECKPOINT_DIR") or os.path.join(
        tempfile.gettempdir(), "pytorch_ddp_checkpoints")
    os.makedirs(checkpoint_dir, exist_ok=True)
    rank, world, device = setup()
    if args.batch_size % world:
        raise SystemExit(f"--batch-size {args.batch_size} does not split evenly over {world} ranks")

    (train_x, train_y), (test_x, test_y) = digits.arrays()
    dataset = TensorDataset(torch.from_numpy(train_x), torch.from_numpy(train_y))
    # The same seed everywhere: every rank starts from the same weights (DDP
    # checks) and shards the same shuffled order.
    torch.manual_seed(SEED)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=SEED,
                                 drop_last=True)
    loader = DataLoader(dataset, batch_size=args.batch_size // world, sampler=sampler, drop_last=True)
    steps_per_epoch = len(loader)
    total = args.epochs * steps_per_epoch

    model = digits.build_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    step = 0
    state = load_state(checkpoint_dir, rank, world, device)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    log(f"session={session} rank={rank} world={world} start_step={step}")
    ddp = DistributedDataParallel(model) if world > 1 else model

    # Rank 0 writes TensorBoard summaries. The writer's import pulls in TensorFlow when that is
    # installed (seconds), so it is opened beside training rather than before it: a restart
    # (a relaunch, an elastic group re-forming) trains again as soon as the group is back.
    summaries = Summaries(os.environ.get("TONY_LOG_DIR") if rank == 0 else None)

    loss_fn = torch.nn.CrossEntropyLoss()
    started = time.time()
    while step < total:
        epoch, skip = divmod(step, steps_per_epoch)
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            if i < skip:  # resuming mid-epoch: these batches were trained before the relaunch
                continue
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = loss_fn(ddp(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            if rank == 0:
                value = loss.item()
                report(step=step, total=total, loss=value)
                if step % 10 == 0:
                    log(f"session={session} step={step} loss={value:.4f}")
                    summaries.scalar("loss", value, step)
            if step % args.save_every == 0 or step == total:
                save_atomically({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                 "step": step}, os.path.join(checkpoint_dir, CHECKPOINT))
            if args.step_sleep:
                time.sleep(args.step_sleep)
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
        summaries.scalar("test_accuracy", test_accuracy, step)
    summaries.close()
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""data_input: the training-data reader (tony_workflow.data) against pyarrow alone, on the same files.

A dataset of MNIST-shaped rows (``image``: 784 float32, ``label``: int64; about 1 GB, 40 MB with
``--quick``) is written as uneven Parquet files with row groups of 4,096 rows. Then, side by side
in one run, each in a process of its own (the same interpreter, the same thread settings):

* **One rank.** The reader's epoch in order, batches of 256 rows handed out as numpy arrays,
  against the floor: pyarrow alone, ``ParquetFile.iter_batches`` over the same files with the same
  columns and batch size, each batch turned into the same numpy arrays. Also the reader shuffled
  (units and windows of 16,384 rows), which no floor does.
* **Adapters.** ``as_tf()`` iterated as a ``tf.data.Dataset`` and ``loader()`` as a torch
  DataLoader in the training process, each against the raw reader in the same process; and
  ``loader(num_workers=2)`` against its own floor: a DataLoader of two workers handing out batches
  of the same shape already in memory (what moving batches between processes costs, nothing read).
* **Resume.** A reader made anew from a state saved at 10 %, 50 % and 90 % of a shuffled epoch:
  the time to its first batch (the plan read from the job's manifest included).
* **Many ranks.** 1, 2 and 4 rank processes reading their shares at once: their total rows/s.
* **Training.** The MNIST example's training (its model, batch and input pipelines) in one process
  with the threads a task of the example gets (one vcore): Keras ``fit`` on the reader, shuffled,
  through ``as_tf()`` and its callback, against the example's own in-memory pipeline on the same
  rows (``from_tensor_slices``, shuffled, batched); back-to-back pairs of fits, the median of
  their ratios.
* **Over WebHDFS** (on a Hadoop mini cluster, unless ``--no-hdfs`` or none can run here; ``--quick``
  leaves it out unless ``--hdfs``): the same files copied into HDFS, one rank's epoch in order
  through the reader from ``hdfs://`` against the floor, pyarrow over WebHDFS as a user writes it by
  hand (``iter_batches`` over files opened with fsspec's WebHDFS, read ahead in blocks of the size
  the reader asks for); and the NameNode's own operation counts (its ``NameNodeActivity`` metrics:
  block locations, file infos, listings) for planning the input and for reading it, per unit.

Goals: one rank >= 0.9x pyarrow; tf.data >= 0.8x and torch >= 0.9x of the raw reader; resume
max/min <= 1.5 and under 2 s; training >= 0.95x in-memory. The summary's value is the one-rank
ratio's rows/s.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common
from common import log, rnd

from tony_workflow.frameworks import THREAD_VARIABLES, thread_env

BATCH = 256
ROW_GROUP = 4096
ROW_BYTES = 784 * 4 + 8


def write_dataset(directory: Path, rows: int) -> Path:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    sizes, left = [], rows
    while left > 0:  # uneven files, none a multiple of a batch or a row group
        size = min(left, int(rng.integers(rows // 12, rows // 5)) + 17)
        sizes.append(size)
        left -= size
    start = 0
    for i, size in enumerate(sizes):
        images = rng.random((size, 784), dtype=np.float32)
        table = pa.table({"image": pa.FixedSizeListArray.from_arrays(pa.array(images.reshape(-1)), 784),
                          "label": (np.arange(start, start + size) % 10).astype(np.int64)})
        pq.write_table(table, directory / f"part-{i:05d}.parquet", row_group_size=ROW_GROUP, compression="snappy")
        start += size
    return directory


# -- the measured parts, each run in a process of its own: python data_input.py --part NAME ... --

def part_floor(data: str) -> dict:
    import numpy as np
    import pyarrow.parquet as pq
    rows, t0 = 0, time.perf_counter()
    for path in sorted(Path(data).glob("*.parquet")):
        for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH, columns=["image", "label"]):
            image = batch.column(0)
            arrays = {"image": np.asarray(image.flatten().to_numpy()).reshape(len(image), 784),
                      "label": batch.column(1).to_numpy()}
            rows += len(arrays["label"])
    return {"rows": rows, "seconds": time.perf_counter() - t0}


def _reader(data: str, shuffle: bool = False, rank: int = 0, world: int = 1):
    from tony_workflow.data import dataset
    return dataset(path=data, batch_size=BATCH, shuffle=shuffle, seed=1, rank=rank, world=world,
                   columns=["image", "label"], remainder="partial")


def part_reader(data: str, shuffle: bool = False) -> dict:
    ds = _reader(data, shuffle)
    rows, t0 = 0, time.perf_counter()
    for batch in ds:
        rows += len(batch["label"])
    return {"rows": rows, "seconds": time.perf_counter() - t0}


def part_tf(data: str) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf  # noqa: F401 - imported before the clock starts
    raw = part_reader(data)
    ds = _reader(data)
    rows, t0 = 0, time.perf_counter()
    for batch in ds.as_tf():
        rows += int(batch["label"].shape[0])
    return {"rows": rows, "seconds": time.perf_counter() - t0, "raw": raw}


class _Held:
    """The floor of a DataLoader's workers: batches of the reader's shape, already in memory, split
    among the workers as the reader's are (batch k to worker k % n), nothing read."""

    def __init__(self, batches: int):
        self.batches = batches

    def __iter__(self):
        import numpy as np
        import torch
        from torch.utils.data import get_worker_info
        info = get_worker_info()
        n, k = (info.num_workers, info.id) if info else (1, 0)
        image = np.random.default_rng(k).random((BATCH, 784), dtype=np.float32)
        label = np.arange(BATCH, dtype=np.int64)
        for i in range(self.batches):
            if i % n == k:
                yield {"image": torch.from_numpy(image.copy()), "label": torch.from_numpy(label.copy())}


def part_torch(data: str) -> dict:
    import torch
    from torch.utils.data import DataLoader, IterableDataset
    raw = part_reader(data)
    out = {"raw": raw}
    for workers in (0, 2):
        ds = _reader(data)
        rows, t0 = 0, time.perf_counter()
        for batch in ds.loader(num_workers=workers):
            rows += int(batch["label"].shape[0])
        out[f"workers_{workers}"] = {"rows": rows, "seconds": time.perf_counter() - t0}
    held = type("Held", (_Held, IterableDataset), {})(raw["rows"] // BATCH)
    rows, t0 = 0, time.perf_counter()
    for batch in DataLoader(held, batch_size=None, num_workers=2):
        rows += int(batch["label"].shape[0])
    out["held_workers_2"] = {"rows": rows, "seconds": time.perf_counter() - t0}
    out.update(out["workers_0"])
    del torch
    return out


def part_resume(data: str, manifest: str) -> dict:
    from tony_workflow.data import dataset
    from tony_workflow.data.manifest import plan_input, write_manifest
    from tony_workflow.spec.data import DataInput
    write_manifest({"train": plan_input(DataInput("train", (data,), columns=("image", "label")))}, Path(manifest))
    ds = dataset("train", batch_size=BATCH, shuffle=True, seed=1, manifest=manifest)
    total = len(ds)
    states = {}
    it = iter(ds)
    for step in range(total):
        for fraction in (0.1, 0.5, 0.9):
            if step == int(total * fraction):
                states[fraction] = json.loads(json.dumps(ds.state_dict()))
        next(it)
    out = {}
    for fraction, state in states.items():
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            again = dataset("train", batch_size=BATCH, shuffle=True, seed=1, manifest=manifest)
            again.load_state_dict(state)
            next(iter(again))
            times.append(time.perf_counter() - t0)
        out[str(fraction)] = min(times)
    return out


def part_rank(data: str, rank: int, world: int, go: str) -> dict:
    ds = _reader(data, True, rank, world)
    while not os.path.exists(go):  # every rank imported and planned: they read at once
        time.sleep(0.01)
    rows, start = 0, time.time()
    for batch in ds:
        rows += len(batch["label"])
    return {"rows": rows, "start": start, "end": time.time()}


#: Back-to-back pairs of fits in the training part, and the epochs of each fit.
TRAIN_PAIRS, TRAIN_EPOCHS = 12, 2


def part_train(data: str, pairs: str = str(TRAIN_PAIRS)) -> dict:
    """The MNIST example's training, on the reader (shuffled, ``as_tf`` with its Keras callback, as
    the example's ``input_dataset``) against the example's own in-memory pipeline
    (``make_dataset``: the arrays shuffled whole and batched): back-to-back pairs of fits, the
    order alternating and Keras's state cleared before each (fits in one process otherwise slow
    down one after another, which would favour whichever runs first)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.path.insert(0, str(common.EXAMPLES / "mnist_mwms"))
    import statistics

    import numpy as np
    import pyarrow.parquet as pq
    import synthetic_mnist
    import tensorflow as tf
    import tf_keras as keras

    from tony_workflow.data import dataset

    first = min(Path(data).glob("*.parquet"))
    table = pq.read_table(first, columns=["image", "label"])
    images = np.asarray(table.column("image").combine_chunks().flatten()).reshape(-1, 28, 28)
    labels = table.column("label").to_numpy()
    steps = len(images) // BATCH

    def fit(data_set, callbacks=()) -> float:
        keras.backend.clear_session()
        keras.utils.set_random_seed(7)
        model = synthetic_mnist.build_model(keras)
        t0 = time.perf_counter()
        model.fit(data_set, epochs=TRAIN_EPOCHS, steps_per_epoch=steps, verbose=0, callbacks=list(callbacks))
        return TRAIN_EPOCHS * steps / (time.perf_counter() - t0)

    def in_memory() -> float:  # examples/mnist_mwms/train.py's make_dataset
        memory = tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(len(images), seed=7).repeat()
        return fit(memory.batch(BATCH))

    def through_reader() -> float:  # examples/mnist_mwms/train.py's input_dataset
        ds = dataset(path=str(first), batch_size=BATCH, columns=["image", "label"], shuffle=True, seed=7,
                     remainder="drop")
        assert len(ds) == steps, (len(ds), steps)
        reshape = tf.autograph.experimental.do_not_convert(lambda b: (tf.reshape(b["image"], (-1, 28, 28)), b["label"]))
        return fit(ds.as_tf(map_fn=reshape), [ds.keras_callback(keras)])

    floor, reader = [], []
    for i in range(int(pairs)):
        if i % 2:
            reader.append(through_reader())
            floor.append(in_memory())
        else:
            floor.append(in_memory())
            reader.append(through_reader())
    ratios = [r / f for r, f in zip(reader, floor)]
    return {"floor_steps_per_s": statistics.median(floor), "reader_steps_per_s": statistics.median(reader),
            "pair_ratios": [rnd(x, 3) for x in ratios], "ratio": statistics.median(ratios),
            "steps_per_fit": TRAIN_EPOCHS * steps, "pairs": int(pairs),
            "threads": {k: os.environ.get(k) for k in THREAD_VARIABLES}}


NN_OPS = ("GetBlockLocations", "FileInfoOps", "GetListingOps")


#: The NameNode's metrics reach its JMX page at most this long after the operations (metrics2's cache).
NN_METRICS_SETTLE_S = 11.0


def namenode_ops(http: str) -> dict:
    """The NameNode's own counts of the operations a reader asks of it (its JMX metrics, once
    the operations before have reached them)."""
    import requests
    time.sleep(NN_METRICS_SETTLE_S)
    beans = requests.get(f"http://{http}/jmx", params={"qry": "Hadoop:service=NameNode,name=NameNodeActivity"},
                         timeout=30).json()["beans"][0]
    return {k: int(beans.get(k, 0)) for k in NN_OPS}


def _ops_since(before: dict, after: dict) -> dict:
    return {k: after[k] - before[k] for k in NN_OPS}


def part_hdfs_floor(http: str, directory: str, user: str, count: str = "") -> dict:
    """pyarrow over WebHDFS by hand: fsspec's WebHDFS files, read ahead a block at a time. With
    ``count``, the NameNode's operations too (which waits for its metrics: not in timed runs)."""
    import fsspec
    import numpy as np
    import pyarrow.parquet as pq

    from tony_workflow.data.fs import BLOCK
    host, port = http.rsplit(":", 1)
    before = namenode_ops(http) if count else None
    fs = fsspec.filesystem("webhdfs", host=host, port=int(port), user=user)
    rows, t0 = 0, time.perf_counter()
    for path in sorted(p for p in fs.ls(directory, detail=False) if p.endswith(".parquet")):
        with fs.open(path, "rb", block_size=BLOCK, cache_type="readahead") as f:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=BATCH, columns=["image", "label"]):
                image = batch.column(0)
                arrays = {"image": np.asarray(image.flatten().to_numpy()).reshape(len(image), 784),
                          "label": batch.column(1).to_numpy()}
                rows += len(arrays["label"])
    seconds = time.perf_counter() - t0
    return {"rows": rows, "seconds": seconds,
            "namenode": _ops_since(before, namenode_ops(http)) if before is not None else None}


def part_hdfs_reader(http: str, uri: str, count: str = "") -> dict:
    """The reader from ``hdfs://``: planning (listing, footers, block locations), then one epoch;
    with ``count``, the NameNode's operations of each."""
    before = namenode_ops(http) if count else None
    t0 = time.perf_counter()
    ds = _reader(uri)
    plan_s = time.perf_counter() - t0
    planned = namenode_ops(http) if count else None
    rows, t0 = 0, time.perf_counter()
    for batch in ds:
        rows += len(batch["label"])
    seconds = time.perf_counter() - t0
    out = {"rows": rows, "seconds": seconds, "plan_s": plan_s, "units": len(ds.plan.units),
           "files": len(ds.plan.files)}
    if before is not None and planned is not None:
        out.update(plan_namenode=_ops_since(before, planned), namenode=_ops_since(planned, namenode_ops(http)))
    return out


def over_webhdfs(args, data: str, reps: int) -> dict:
    """The HDFS half: the files copied into a mini cluster's HDFS, the floor and the reader read
    them in turn (see the module's docstring)."""
    from tony_workflow.client import TonyClient
    from tony_workflow.client.data import stage_input
    from tony_workflow.process import user_name

    with common.minicluster(args.minicluster) as info:
        t0 = time.time()
        uri = stage_input(data, TonyClient("yarn").backend, "bench-data-input")
        log(f"  copied into {uri} in {time.time() - t0:.1f} s")
        http, directory = info["webhdfs"].split("://", 1)[-1].rstrip("/"), "/" + uri.split("://", 1)[1].split("/", 1)[1]
        floor = best("hdfs_floor", http, directory, user_name(), reps=reps)
        reader = best("hdfs_reader", http, uri, reps=reps)
        log("  the NameNode's operations (a run of each, waiting for its metrics)")
        floor["namenode"] = run_part("hdfs_floor", http, directory, user_name(), "count")["namenode"]
        reader.update({k: v for k, v in run_part("hdfs_reader", http, uri, "count").items()
                       if k in ("plan_namenode", "namenode")})
    units = reader["units"]
    out = {"floor_rows_per_s": rnd(floor["rows"] / floor["seconds"], 0),
           "reader_rows_per_s": rnd(reader["rows"] / reader["seconds"], 0), "rows": reader["rows"],
           "floor_rows": floor["rows"], "units": units, "files": reader["files"], "plan_s": rnd(reader["plan_s"], 3),
           "plan_namenode": reader["plan_namenode"], "read_namenode": reader["namenode"],
           "floor_namenode": floor["namenode"],
           "namenode_per_unit": {"plan": rnd(sum(reader["plan_namenode"].values()) / units, 2),
                                 "read": rnd(sum(reader["namenode"].values()) / units, 2)}}
    out["ratio"] = rnd(out["reader_rows_per_s"] / out["floor_rows_per_s"], 2)
    return out


PARTS = {"floor": part_floor, "reader": part_reader, "tf": part_tf, "torch": part_torch}


def run_part(*argv: str, env: dict | None = None) -> dict:
    done = subprocess.run([sys.executable, __file__, "--part", *argv], capture_output=True, text=True, check=False,
                          env={**os.environ, **(env or {}),
                               "PYTHONPATH": os.pathsep.join([str(common.REPO), os.environ.get("PYTHONPATH", "")])})
    if done.returncode != 0:
        raise RuntimeError(f"part {argv[0]} failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def best(*argv: str, reps: int) -> dict:
    """The fastest of ``reps`` runs of a part (the machine's noise only ever slows a run down)."""
    runs = [run_part(*argv) for _ in range(reps)]
    return min(runs, key=lambda r: r["seconds"])


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--part":
        name, *rest = sys.argv[2:]
        if name == "reader_shuffled":
            result = part_reader(rest[0], shuffle=True)
        elif name == "resume":
            result = part_resume(rest[0], rest[1])
        elif name == "rank":
            result = part_rank(rest[0], int(rest[1]), int(rest[2]), rest[3])
        elif name == "train":
            result = part_train(*rest)
        elif name == "hdfs_floor":
            result = part_hdfs_floor(*rest)
        elif name == "hdfs_reader":
            result = part_hdfs_reader(*rest)
        else:
            result = PARTS[name](rest[0])
        print(json.dumps(result))
        return 0

    ap = common.parser("data_input", __doc__)
    ap.add_argument("--hdfs", action=argparse.BooleanOptionalAction, default=None,
                    help="read over WebHDFS on a mini cluster too (default: yes, but not with --quick)")
    ap.add_argument("--minicluster", default=None, help="reuse the mini cluster running in this directory")
    args = ap.parse_args()
    host = common.host_info()
    size = (40 << 20) if args.quick else (1 << 30)
    rows = size // ROW_BYTES
    reps = 1 if args.quick else 3
    with tempfile.TemporaryDirectory(prefix="tony-bench-data-") as tmp:
        log(f"writing {rows:,} rows ({size >> 20} MB) as Parquet")
        data = str(write_dataset(Path(tmp) / "data", rows))
        on_disk = sum(p.stat().st_size for p in Path(data).glob("*.parquet"))
        log("one rank: pyarrow alone, then the reader")
        floor = best("floor", data, reps=reps)
        reader = best("reader", data, reps=reps)
        shuffled = best("reader_shuffled", data, reps=reps)
        one_rank = {"floor_rows_per_s": rnd(floor["rows"] / floor["seconds"], 0),
                    "reader_rows_per_s": rnd(reader["rows"] / reader["seconds"], 0),
                    "shuffled_rows_per_s": rnd(shuffled["rows"] / shuffled["seconds"], 0),
                    "rows": reader["rows"], "floor_rows": floor["rows"]}
        one_rank["ratio"] = rnd(one_rank["reader_rows_per_s"] / one_rank["floor_rows_per_s"], 2)
        log(f"  {one_rank}")
        log("adapters: tf.data and a torch DataLoader against the raw reader")
        adapters = {}

        def speed(part: dict) -> float:
            return part["rows"] / part["seconds"]

        for name in ("tf", "torch"):
            r = best(name, data, reps=reps)
            adapters[name] = {"rows_per_s": rnd(speed(r), 0), "raw_rows_per_s": rnd(speed(r["raw"]), 0),
                              "ratio": rnd(speed(r) / speed(r["raw"]), 2)}
            if name == "torch":  # two workers, against two workers handing out batches held in memory
                adapters["torch_2_workers"] = {
                    "rows_per_s": rnd(speed(r["workers_2"]), 0), "floor_rows_per_s": rnd(speed(r["held_workers_2"]), 0),
                    "ratio": rnd(speed(r["workers_2"]) / speed(r["held_workers_2"]), 2)}
        log(f"  {adapters}")
        log("resume at 10, 50 and 90 % of a shuffled epoch")
        resume = run_part("resume", data, str(Path(tmp) / "tony-data.json"))
        spread = max(resume.values()) / max(min(resume.values()), 1e-9)
        log(f"  {resume} max/min {spread:.2f}")
        log("many ranks at once: 1, 2 and 4 processes")
        ranks = {}
        for world in (1, 2, 4):
            go = Path(tmp) / f"go-{world}"
            procs = [subprocess.Popen([sys.executable, __file__, "--part", "rank", data, str(r), str(world), str(go)],
                                      stdout=subprocess.PIPE, text=True,
                                      env={**os.environ, "PYTHONPATH": str(common.REPO)}) for r in range(world)]
            time.sleep(3.0)  # the ranks import and plan; then they read together
            go.touch()
            outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
            wall = max(o["end"] for o in outs) - min(o["start"] for o in outs)
            ranks[str(world)] = {"rows_per_s": rnd(sum(o["rows"] for o in outs) / wall, 0),
                                 "steps_each": sorted({o["rows"] // BATCH for o in outs})}
        log(f"  {ranks}")
        log("training: Keras fit on the reader against in-memory arrays")
        # In the environment a task of the example gets: one vcore, so one thread for each math
        # library (tony_workflow.frameworks.thread_env), for the floor and the reader alike.
        train = run_part("train", data, "2" if args.quick else str(TRAIN_PAIRS), env=thread_env(1, 1, {}))
        train["ratio"] = rnd(train["ratio"], 2)
        log(f"  {train}")
        hdfs: dict = {"skipped": "--no-hdfs" if args.hdfs is False else "--quick without --hdfs"}
        missing = common.minicluster_missing()
        if missing and args.hdfs is not False:
            hdfs = {"skipped": missing}
        elif args.hdfs or (args.hdfs is None and not args.quick):
            log("over WebHDFS: pyarrow by hand, then the reader, on a mini cluster")
            hdfs = over_webhdfs(args, data, reps)
            log(f"  {hdfs}")
    goals = {"one rank >= 0.9x pyarrow": one_rank["ratio"] >= 0.9,
             "tf.data >= 0.8x raw": adapters["tf"]["ratio"] >= 0.8,
             "torch >= 0.9x raw": adapters["torch"]["ratio"] >= 0.9,
             "resume flat and < 2 s": spread <= 1.5 and max(resume.values()) < 2.0,
             "training >= 0.95x in-memory": train["ratio"] >= 0.95}
    if "ratio" in hdfs:
        goals["one rank over WebHDFS >= 0.9x pyarrow"] = hdfs["ratio"] >= 0.9
    result = {"metric": "one rank's rows/s through the reader", "value": one_rank["reader_rows_per_s"],
              "floor": one_rank["floor_rows_per_s"], "ratio": one_rank["ratio"], "unit": "rows/s",
              "goal": "; ".join(goals), "goal_met": all(goals.values()), "goals": goals,
              "dataset": {"rows": rows, "bytes_on_disk": on_disk, "batch": BATCH, "row_group": ROW_GROUP},
              "one_rank": one_rank, "adapters": adapters,
              "resume_s": {k: rnd(v, 3) for k, v in resume.items()}, "resume_spread": rnd(spread, 2),
              "ranks": ranks, "training": train, "hdfs": hdfs}
    common.write_result(args, "data_input", result, host)
    return 0


if __name__ == "__main__":
    sys.exit(main())

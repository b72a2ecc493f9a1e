"""The reader over real files: each rank's share, the epoch's order, the saved state, filters,
projection, bad inputs, and the torch and TensorFlow adapters."""
from __future__ import annotations

import collections
import itertools
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyarrow import orc

from tony_workflow.data import dataset
from tony_workflow.data.reader import Dataset
from tony_workflow.errors import DataError

SIZES = [1000, 333, 2500, 17, 150]  # rows per file: no multiple of anything
N = sum(SIZES)


def write(directory, fmt="parquet", sizes=SIZES):
    """Files of ``fmt`` with an ``id`` column numbering every row of the dataset, and ``x``."""
    directory.mkdir(parents=True, exist_ok=True)
    start = 0
    for i, n in enumerate(sizes):
        ids = np.arange(start, start + n)
        table = pa.table({"id": ids, "x": (ids % 10).astype(np.float32), "label": ids % 3})
        if fmt == "parquet":
            pq.write_table(table, directory / f"part-{i:03d}.parquet", row_group_size=256)
        elif fmt == "orc":
            orc.write_table(table, directory / f"part-{i:03d}.orc", stripe_size=4096)
        elif fmt == "avro":
            import fastavro
            schema = {"type": "record", "name": "row", "fields": [{"name": "id", "type": "long"},
                                                                  {"name": "x", "type": "float"},
                                                                  {"name": "label", "type": "long"}]}
            with open(directory / f"part-{i:03d}.avro", "wb") as f:
                fastavro.writer(f, schema, table.to_pylist(), codec="deflate", sync_interval=2048)
        start += n
    return directory


def ranks(path, world, batch=64, **options):
    return [dataset(path=str(path), batch_size=batch, rank=r, world=world, **options) for r in range(world)]


@pytest.mark.parametrize("fmt", ["parquet", "orc", "avro"])
def test_uneven_files_on_three_ranks_give_equal_steps_and_every_row_once(tmp_path, fmt):
    data = write(tmp_path / fmt, fmt)
    seen, steps = collections.Counter(), []
    for ds in ranks(data, 3, remainder="partial", shuffle=True, seed=4):
        batches = [b["id"] for b in ds]
        steps.append(len(batches))
        seen.update(i for b in batches for i in b.tolist())
    assert len(set(steps)) == 1
    assert sorted(seen) == list(range(N)) and max(seen.values()) == 1


def test_with_drop_every_step_is_whole_and_what_is_dropped_is_less_than_one_step(tmp_path):
    data = write(tmp_path / "d")
    seen = collections.Counter()
    for ds in ranks(data, 3):
        for b in ds:
            assert len(b["id"]) == 64
            seen.update(b["id"].tolist())
    assert max(seen.values()) == 1 and N - len(seen) < 3 * 64


def test_the_order_of_an_epoch_does_not_depend_on_the_number_of_ranks(tmp_path):
    data = write(tmp_path / "d")

    def sequence(world):
        return [i for ds in ranks(data, world, batch=10, shuffle=True, seed=9) for b in ds for i in b["id"].tolist()]

    alone = sequence(1)
    for world in (2, 4):
        together = sequence(world)  # the ranks' pieces laid end to end: the same sequence, less the dropped tail
        assert together == alone[:len(together)] and len(alone) - len(together) < world * 10
    assert sequence(1) == alone


def test_each_epoch_has_its_own_order_and_the_epoch_can_be_set(tmp_path):
    data = write(tmp_path / "d")
    ds = dataset(path=str(data), batch_size=100, shuffle=True, seed=1)
    first = [b["id"].tolist() for b in ds]
    assert ds.epoch == 1
    second = [b["id"].tolist() for b in ds]
    assert first != second and sorted(itertools.chain(*first)) == sorted(itertools.chain(*second))
    ds.epoch = 0
    assert [b["id"].tolist() for b in ds] == first


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9])
def test_a_saved_state_resumes_the_very_next_batch(tmp_path, fraction):
    data = write(tmp_path / "d")
    whole = [b["id"].tolist() for b in dataset(path=str(data), batch_size=50, shuffle=True, seed=3)]
    ds = dataset(path=str(data), batch_size=50, shuffle=True, seed=3)
    at = int(len(whole) * fraction)
    it = iter(ds)
    for _ in range(at):
        next(it)
    state = json.loads(json.dumps(ds.state_dict()))  # as a checkpoint keeps it
    assert len(json.dumps(state)) < 1024
    again = dataset(path=str(data), batch_size=50, shuffle=True, seed=3)
    again.load_state_dict(state)
    assert [b["id"].tolist() for b in again] == whole[at:]


def test_four_ranks_then_three_then_four_within_one_epoch_read_every_row_once(tmp_path):
    data = write(tmp_path / "d")
    seen = collections.Counter()
    state = None
    for world, steps in ((4, 5), (3, 4), (4, None)):
        group = ranks(data, world, batch=40, remainder="partial", shuffle=True, seed=2)
        for ds in group:
            if state:
                ds.load_state_dict(state)
            for b in itertools.islice(ds, steps):
                seen.update(b["id"].tolist())
        state = json.loads(json.dumps(group[0].state_dict()))  # rank 0's alone says what every rank took
    assert sorted(seen) == list(range(N)) and max(seen.values()) == 1


def test_after_commit_the_state_is_the_last_committed_step(tmp_path):
    data = write(tmp_path / "d")
    ds = dataset(path=str(data), batch_size=10)
    it = iter(ds)
    next(it)
    next(it)
    ds.commit()
    next(it)  # handed out, its step never finished
    assert ds.state_dict()["steps"] == 2


def test_a_state_of_other_data_or_another_order_is_refused(tmp_path):
    data = write(tmp_path / "d")
    state = dataset(path=str(data), batch_size=10, seed=1, shuffle=True).state_dict()
    other = write(tmp_path / "e", sizes=[10, 20])
    with pytest.raises(DataError, match="other data"):
        dataset(path=str(other), batch_size=10, seed=1, shuffle=True).load_state_dict(state)
    with pytest.raises(DataError, match="seed"):
        dataset(path=str(data), batch_size=10, seed=2, shuffle=True).load_state_dict(state)


def test_a_filter_skips_row_groups_its_statistics_rule_out_and_the_rest_row_by_row(tmp_path):
    data = write(tmp_path / "d")
    ds = dataset(path=str(data), batch_size=1000, remainder="partial", filter="id < 1200 and label != 1")
    got = sorted(i for b in ds for i in b["id"].tolist())
    assert got == [i for i in range(N) if i < 1200 and i % 3 != 1]
    counted = [rows for _, _, rows in ds.plan.units]
    assert len(counted) < sum(f.info.units.__len__() for f in ds.plan.files)  # whole row groups left out
    assert dataset(path=str(write(tmp_path / "a", "avro")), batch_size=7, remainder="partial",
                   filter="x in (1, 2)").rows == sum(1 for i in range(N) if i % 10 in (1, 2))


def test_columns_are_projected(tmp_path):
    data = write(tmp_path / "d")
    batch = next(iter(dataset(path=str(data), batch_size=5, columns=["label"])))
    assert list(batch) == ["label"]


def test_bad_inputs_are_named_with_the_file_and_the_reason(tmp_path):
    good = write(tmp_path / "good", sizes=[10])
    cases = {
        "nothing": (str(tmp_path / "missing"), "no such file or directory"),
        "unknown format": (str(tmp_path / "x.csv"), "does not say its format"),
        "corrupt": (str(tmp_path / "bad.parquet"), "not a readable Parquet file"),
    }
    (tmp_path / "x.csv").write_text("a,b\n")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 but not really")
    for name, (path, why) in cases.items():
        with pytest.raises(DataError) as e:
            dataset("train", path=path)
        assert why in str(e.value) and "input 'train'" in str(e.value), name
    pq.write_table(pa.table({"id": [1], "y": ["a"]}), tmp_path / "good" / "other.parquet")
    with pytest.raises(DataError, match="part-000.parquet: its schema differs from .*other.parquet's: it lacks y and adds x, label"):
        dataset(path=str(good))
    with pytest.raises(DataError, match="has no column lable .*did you mean label"):
        dataset(path=str(write(tmp_path / "g2", sizes=[5])), columns=["lable"])


def test_the_torch_loader_splits_batches_among_its_workers_in_the_ranks_order(tmp_path):
    pytest.importorskip("torch")
    data = write(tmp_path / "d")
    expected = [b["id"].tolist() for b in dataset(path=str(data), batch_size=32, shuffle=True, seed=5, rank=1, world=2)]
    ds = dataset(path=str(data), batch_size=32, shuffle=True, seed=5, rank=1, world=2)
    got = []
    for k, batch in enumerate(ds.loader(num_workers=2)):
        got.append(batch["id"].tolist())
        if k == 9:
            assert ds.state_dict()["steps"] == 10
    assert got == expected and ds.epoch == 1


@pytest.mark.tf
def test_keras_fit_takes_the_rank_s_batches_and_its_callback_resumes_at_kerass_step(tmp_path):
    import os
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tf_keras as keras
    data = write(tmp_path / "d")
    ds = dataset(path=str(data), batch_size=64, shuffle=True, seed=1)
    tf_data = ds.as_tf(map_fn=lambda b: (b["x"][:, None], b["label"]))
    model = keras.Sequential([keras.layers.Dense(3)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(tf_data, epochs=2, steps_per_epoch=len(ds), callbacks=[ds.keras_callback(keras)], verbose=0)
    assert len(history.history["loss"]) == 2 and ds.epoch == 2
    with pytest.raises(DataError, match="steps_per_epoch=len"):
        model.fit(tf_data, epochs=1, steps_per_epoch=3, callbacks=[ds.keras_callback(keras)], verbose=0)
    # Keras restored at epoch 1, step 5: the dataset starts there, at the batch that step had.
    ds2 = Dataset(ds.plan, 64, shuffle=True, seed=1, rank=0, world=1)
    ds2.epoch = 1
    whole = [b["id"].tolist() for b in ds2]
    ds3 = Dataset(ds.plan, 64, shuffle=True, seed=1, rank=0, world=1)
    callback = ds3.keras_callback(keras)
    callback.on_epoch_begin(1)
    callback.on_train_batch_begin(5)
    batches = iter(ds3.as_tf())
    ids = [next(batches)["id"].numpy().tolist() for _ in range(len(whole) - 5)]
    callback.on_train_end()  # fit's end: the generator waiting for another epoch ends
    del batches
    assert ids == whole[5:]


def test_each_rank_takes_the_piece_whose_replicas_are_on_its_machine_and_shares_stay_equal(tmp_path, monkeypatch):
    # Two machines (127.0.0.2, 127.0.0.3); the units of the first half of the data are kept on the
    # second one, those of the second half on the first: rank 0 (on .2) gets the second piece.
    data = write(tmp_path / "d", sizes=[1200, 1200])
    plan = dataset(path=str(data), batch_size=50).plan
    plan.unit_hosts = [["127.0.0.3"] if f == 0 else ["127.0.0.2"] for f, _, _ in plan.units]
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["127.0.0.2:1", "127.0.0.3:1"]},
                                                "task": {"type": "worker", "index": 0}}))
    got = {}
    for rank in range(2):
        ds = Dataset(plan, 50, rank=rank, world=2)
        got[rank] = [i for b in ds for i in b["id"].tolist()]
    assert min(got[0]) >= 1200 and max(got[1]) < 1200  # each rank's rows are on its own machine
    assert sorted(got[0] + got[1]) == list(range(2400)) and len(got[0]) == len(got[1])
    # The state is no rank's: resuming at another size still reads every row once.
    ds = Dataset(plan, 50, rank=0, world=2, remainder="partial")
    list(itertools.islice(iter(ds), 5))
    state = ds.state_dict()
    monkeypatch.delenv("TF_CONFIG")
    rest = []
    for rank in range(3):
        other = Dataset(plan, 50, rank=rank, world=3, remainder="partial")
        other.load_state_dict(state)
        rest += [i for b in other for i in b["id"].tolist()]
    first = set(range(2400)) - set(rest)
    assert len(first) == 2 * 5 * 50 and len(rest) == len(set(rest))


def test_a_file_that_did_not_change_is_not_walked_again(tmp_path, monkeypatch, data_home):
    from tony_workflow.data.formats.avro import Avro
    data = write(tmp_path / "a", "avro")
    first = dataset(path=str(data), batch_size=10)

    def walked(*args, **kwargs):
        raise AssertionError("walked again")

    monkeypatch.setattr(Avro, "inspect", walked)
    again = dataset(path=str(data), batch_size=10)  # from the index under TONY_HOME
    assert again.plan.fingerprint == first.plan.fingerprint and list(data_home.glob("data/index/*/*.json"))
    (data / "part-000.avro").write_bytes((data / "part-000.avro").read_bytes())  # a new time: walked again
    with pytest.raises(AssertionError, match="walked again"):
        dataset(path=str(data), batch_size=10)

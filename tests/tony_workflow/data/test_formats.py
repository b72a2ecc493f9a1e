"""Every fixture file other projects' writers made reads with the values its own project expects,
or is refused naming the file and the reason; and files written here by pyarrow, fastavro and
TensorFlow read back as they were written."""
from __future__ import annotations

import csv
import datetime
import decimal
import gzip
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tony_workflow.data import dataset
from tony_workflow.errors import DataError


def read_all(path, **options):
    """Every row of ``path`` through the reader, one rank, in the files' order."""
    ds = dataset(path=str(path), batch_size=1 << 20, remainder="partial", **options)
    columns: dict[str, list] = {}
    for batch in ds:
        for name, values in batch.items():
            columns.setdefault(name, []).extend(list(values))
    return columns


def flat(row: dict, prefix: str = "") -> dict:
    """A row of nested records as the reader names its struct fields: ``column.field``."""
    out = {}
    for key, value in row.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def plain(value):
    """A value our reader hands out, in the terms of ORC's expected JSON rows."""
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value]
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], tuple):
        return [{"key": plain(k), "value": plain(v)} for k, v in value]
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, tuple) and len(value) == 2:
        return {"key": plain(value[0]), "value": plain(value[1])}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return list(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def orc_time(ns: int) -> str:
    seconds, fraction = divmod(int(ns), 10**9)
    text = (datetime.datetime(1970, 1, 1) + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")
    return f"{text}.{(f'{fraction:09d}'.rstrip('0') or '0')}"


@pytest.mark.parametrize("name", ["TestOrcFile.test1", "TestOrcFile.testDate1900", "TestOrcFile.testPredicatePushdown",
                                  "decimal", "orc_split_elim_new"])
def test_orc_files_read_as_orcs_own_expected_rows(fixture_data, name):
    with gzip.open(fixture_data / "orc" / "expected" / f"{name}.jsn.gz", "rt") as f:
        expected = [flat(json.loads(line)) for line in f]
    got = read_all(fixture_data / "orc" / f"{name}.orc")
    assert len(next(iter(got.values()))) == len(expected)
    for column, values in got.items():
        want = [row[column] for row in expected]
        if values and isinstance(values[0], np.datetime64) and np.datetime_data(values[0].dtype)[0] == "D":
            assert [str(v) for v in values] == want, column
        elif values and isinstance(values[0], np.datetime64):
            ns = np.asarray(values).astype("datetime64[ns]").astype(np.int64)
            assert [orc_time(v) for v in ns] == want, column
        elif values and isinstance(values[0], decimal.Decimal):
            assert [None if w is None else decimal.Decimal(str(w)) for w in want] == values, column
        else:
            assert [plain(v) for v in values] == want, column


def test_orcs_stripes_are_units_and_one_file_of_many_stripes_feeds_eight_ranks(fixture_data):
    path = str(fixture_data / "orc" / "TestOrcFile.testDate1900.orc")
    ds = dataset(path=path, batch_size=100, columns=["date"])
    assert len(ds.plan.units) == 8 and ds.rows == 70000
    steps, rows = [], 0
    for rank in range(8):
        part = dataset(path=path, batch_size=100, columns=["date"], rank=rank, world=8, remainder="partial")
        batches = [len(b["date"]) for b in part]
        steps.append(len(batches))
        rows += sum(batches)
    assert len(set(steps)) == 1 and rows == 70000


def test_a_corrupt_orc_file_is_refused_naming_it_and_where(fixture_data):
    path = fixture_data / "orc" / "corrupt-negative_dict_entry_lengths.orc"
    with pytest.raises(DataError) as e:
        read_all(path)
    assert path.name in str(e.value) and "stripe 0" in str(e.value) and "at byte" in str(e.value)


def test_an_empty_orc_file_has_no_rows(fixture_data):
    ds = dataset(path=str(fixture_data / "orc" / "TestOrcFile.emptyFile.orc"), batch_size=10)
    assert ds.rows == 0 and list(ds) == []


# What Avro's share/test/data/weather.json holds: the same five records in every codec's file.
WEATHER = [("011990-99999", -619524000000, 0), ("011990-99999", -619506000000, 22),
           ("011990-99999", -619484400000, -11), ("012650-99999", -655531200000, 111),
           ("012650-99999", -655509600000, 78)]


@pytest.mark.parametrize("codec", ["", "-deflate", "-snappy", "-zstd"])
def test_avros_weather_reads_the_same_in_every_codec(fixture_data, codec):
    got = read_all(fixture_data / "avro" / f"weather{codec}.avro")
    assert list(zip(got["station"], got["time"], got["temp"])) == WEATHER


def test_a_sync_marker_in_the_header_does_not_split_the_file(fixture_data):
    # Its metadata holds the marker's bytes (and bytes that are no UTF-8): walking the blocks by
    # their sizes finds every record once, in order.
    got = read_all(fixture_data / "avro" / "syncInMeta.avro")
    assert got["ID"] == list(range(1, 6002)) and got["First"][:2] == ["Dante", "Randal"]


def test_an_avro_union_of_several_types_is_refused_by_name(fixture_data):
    with pytest.raises(DataError) as e:
        dataset(path=str(fixture_data / "avro" / "withUnion-data.avro"))
    message = str(e.value)
    assert "withUnion-data.avro" in message and "data1" in message and "union" in message


def test_parquet_files_read_as_parquet_testing_says(fixture_data):
    d = fixture_data / "parquet"
    with open(d / "delta_byte_array_expect.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    got = read_all(d / "delta_byte_array.parquet")
    for column in rows[0]:
        assert [v if v is None else (v.decode() if isinstance(v, bytes) else v) for v in got[column]] == \
               [r[column] or None for r in rows], column
    assert read_all(d / "alltypes_plain.parquet")["id"] == [4, 5, 6, 7, 2, 3, 0, 1]
    assert read_all(d / "alltypes_plain.snappy.parquet")["id"] == [6, 7]
    assert len(read_all(d / "alltypes_tiny_pages.parquet")["id"]) == 7300
    lz4 = read_all(d / "hadoop_lz4_compressed_larger.parquet")["a"]
    assert len(lz4) == 10000 and lz4[:2] == ["c7ce6bef-d5b0-4863-b199-8ea8c7fb117b", "e8fb9197-cb9f-4118-b67f-fbfa65f61843"]
    nation = read_all(d / "nation.dict-malformed.parquet")
    assert nation["nation_key"] == list(range(25)) and nation["name"][:3] == [b"ALGERIA", b"ARGENTINA", b"BRAZIL"]
    assert read_all(d / "datapage_v2.snappy.parquet")["a"] == ["abc", "abc", "abc", None, "abc"]
    nested = read_all(d / "nested_structs.rust.parquet")  # structs: a column per field, timestamps numpy's
    assert len(nested["roll_num.min"]) == 1 and nested["ul_observation_date.max"][0].dtype.kind == "M"
    assert len(read_all(d / "alltypes_dictionary.parquet")["id"]) == 2


def test_spark_int96_timestamps_keep_their_microseconds_and_their_years(fixture_data):
    # Read at nanoseconds, the year 9999 would wrap around; at Spark's microseconds it does not.
    got = read_all(fixture_data / "parquet" / "int96_from_spark.parquet")["a"]
    assert [str(v) for v in got[:4]] == ["2024-01-01T20:34:56.123456", "2024-01-01T01:00:00.000000",
                                         "9999-12-31T03:00:00.000000", "2024-12-30T23:00:00.000000"]
    assert np.isnat(got[4])


def test_files_written_here_by_pyarrow_fastavro_and_tensorflow_read_back(tmp_path):
    import fastavro
    n = 1000
    ids = np.arange(n)
    pq.write_table(pa.table({"id": ids, "x": np.linspace(0, 1, n)}), tmp_path / "a.parquet", row_group_size=128)
    with open(tmp_path / "a.avro", "wb") as f:
        schema = {"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"},
                                                            {"name": "x", "type": ["null", "double"]},
                                                            {"name": "day", "type": {"type": "int", "logicalType": "date"}}]}
        fastavro.writer(f, schema, ({"id": int(i), "x": None if i % 7 == 0 else float(i), "day": datetime.date(2026, 11, 30)}
                                    for i in ids), codec="deflate", sync_interval=1000)
    got = read_all(tmp_path / "a.parquet")
    assert got["id"] == list(range(n)) and len(dataset(path=str(tmp_path / "a.parquet")).plan.units) == 8
    avro = read_all(tmp_path / "a.avro")
    assert avro["id"] == list(range(n)) and np.isnan(avro["x"][0]) and avro["x"][1] == 1.0
    assert {str(v) for v in avro["day"]} == {"2026-11-30"}


@pytest.mark.tf
def test_tfrecords_written_by_tensorflow_plain_and_gzip_read_back(tmp_path):
    from tests.tony_workflow.data.tfrecords import write_examples
    for compression in ("", "GZIP"):
        path = write_examples(tmp_path / ("a.tfrecord" + (".gz" if compression else "")), 500, compression)
        got = read_all(path)
        assert got["id"] == list(range(500))
        assert got["x"][3].tolist() == [3.0, 4.0, 5.0, 6.0] and got["name"][2] == b"n2"
        assert got["pair"][5].tolist() == [-5, 1 << 40]


@pytest.mark.tf
def test_a_damaged_tfrecord_is_refused_at_the_record_where_it_breaks(tmp_path):
    from tests.tony_workflow.data.tfrecords import write_examples
    path = write_examples(tmp_path / "a.tfrecord", 100, "")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(DataError) as e:
        read_all(path)
    assert "a.tfrecord" in str(e.value) and "checksum" in str(e.value) and "at byte" in str(e.value)


def test_records_that_are_not_examples_are_one_column_of_bytes(tmp_path):
    from tony_workflow.data.formats.tfrecord import masked_crc
    path = tmp_path / "raw.tfrecord"
    with open(path, "wb") as f:
        for i in range(5):
            body = f"record {i}".encode()
            length = len(body).to_bytes(8, "little")
            f.write(length + masked_crc(length).to_bytes(4, "little") + body + masked_crc(body).to_bytes(4, "little"))
    assert read_all(path)["record"] == [f"record {i}".encode() for i in range(5)]
    assert os.path.getsize(path) > 0

"""TFRecord files of tf.train.Example, written by TensorFlow itself, for the reader's tests."""
from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def write_examples(path: Path, n: int, compression: str = "", start: int = 0) -> Path:
    """``n`` Examples: ``id`` (int64), ``x`` (4 floats), ``name`` (bytes), ``pair`` (2 int64s)."""
    import numpy as np
    import tensorflow as tf

    def feature(**kinds):
        (kind, values), = kinds.items()
        return tf.train.Feature(**{kind: {"int64_list": tf.train.Int64List, "float_list": tf.train.FloatList,
                                          "bytes_list": tf.train.BytesList}[kind](value=values)})

    with tf.io.TFRecordWriter(str(path), options=compression or None) as writer:
        for i in range(start, start + n):
            example = tf.train.Example(features=tf.train.Features(feature={
                "id": feature(int64_list=[i]),
                "x": feature(float_list=list(np.arange(4, dtype=np.float32) + i)),
                "name": feature(bytes_list=[b"n%d" % i]),
                "pair": feature(int64_list=[-i, 1 << 40]),
            }))
            writer.write(example.SerializeToString())
    return path

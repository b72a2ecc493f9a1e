"""MNIST-shaped synthetic data and the model shared by train.py and evaluate.py.

The images are generated rather than downloaded so the example runs on
machines without network access and every task sees identical data.
"""

import numpy as np

IMAGE_SHAPE = (28, 28)
NUM_CLASSES = 10

# The class templates must be identical for training and evaluation, so they
# come from their own fixed seed; only the samples drawn around them differ.
_TEMPLATE_SEED = 20240
TRAIN_SEED = 1
VALIDATION_SEED = 2
TEST_SEED = 3


def make_arrays(num_examples, seed):
    """Return (images, labels): float32 in [0, 1] of shape (n, 28, 28), int64.

    Each class owns a sparse random "glyph"; a sample is a faint copy of its
    class glyph buried in strong noise, which keeps the task learnable but
    not solved after the first few steps.
    """
    templates = (
        np.random.RandomState(_TEMPLATE_SEED).rand(NUM_CLASSES, *IMAGE_SHAPE)
        < 0.15
    ).astype("float32")
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, NUM_CLASSES, size=num_examples).astype("int64")
    noise = rng.normal(0.0, 0.5, size=(num_examples,) + IMAGE_SHAPE)
    images = np.clip(0.35 * templates[labels] + noise, 0.0, 1.0)
    return images.astype("float32"), labels


#: The training set's files: uneven on purpose, as real datasets' are (none is a
#: multiple of the number of workers or of the batch).
TRAIN_FILE_SIZES = (1100, 900, 560)


def save_parquet(directory, sizes=TRAIN_FILE_SIZES, row_group_size=128):
    """Write the training set as Parquet files (``image``: 784 floats, ``label``)
    under ``directory``, and return it: what a data-preparation step hands over
    for the job's ``data: train:`` input."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    images, labels = make_arrays(sum(sizes), TRAIN_SEED)
    start = 0
    for i, size in enumerate(sizes):
        flat = pa.array(images[start:start + size].reshape(-1))
        table = pa.table({
            "image": pa.FixedSizeListArray.from_arrays(flat, IMAGE_SHAPE[0] * IMAGE_SHAPE[1]),
            "label": labels[start:start + size],
        })
        pq.write_table(table, os.path.join(directory, f"part-{i:05d}.parquet"),
                       row_group_size=row_group_size)
        start += size
    return directory


def save(path, train_examples=4096, validation_examples=1024):
    """Write a train/validation split to one .npz file (what a data-preparation step hands over)."""
    x_train, y_train = make_arrays(train_examples, TRAIN_SEED)
    x_val, y_val = make_arrays(validation_examples, VALIDATION_SEED)
    np.savez_compressed(path, x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val)
    return path


def load(path):
    """Read what save() wrote: ((x_train, y_train), (x_val, y_val))."""
    with np.load(path) as d:
        return (d["x_train"], d["y_train"]), (d["x_val"], d["y_val"])


def build_model(keras):
    """A tiny classifier; `keras` is passed in so callers pick the Keras flavour."""
    model = keras.Sequential(
        [
            # An explicit input builds the weights up front, which
            # BackupAndRestore needs in order to restore into them.
            keras.Input(shape=IMAGE_SHAPE),
            keras.layers.Flatten(),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(NUM_CLASSES),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model

"""The data and the model shared by train.py and evaluate.py.

The data is scikit-learn's handwritten digits (1,797 8x8 images of the
digits 0-9, from the UCI collection), which ship inside the scikit-learn
package: nothing is downloaded, and every task reads the same arrays.
"""

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

NUM_CLASSES = 10
FEATURES = 64
SPLIT_SEED = 0


def arrays():
    """((train_x, train_y), (test_x, test_y)): float32 pixels in [0, 1], int64
    labels; a fixed, stratified fifth of the images is held out for testing."""
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    train_x, test_x, train_y, test_y = train_test_split(
        x, y, test_size=0.2, random_state=SPLIT_SEED, stratify=y)
    return (train_x, train_y), (test_x, test_y)


def save_parquet(directory, sizes=(500, 400, 337)):
    """Write the training split as Parquet files (``pixels``: 64 floats, ``label``)
    under ``directory``, uneven on purpose, and return it: the job's ``train`` input."""
    import itertools
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    (train_x, train_y), _ = arrays()
    os.makedirs(directory, exist_ok=True)
    cuts = np.cumsum((0,) + tuple(sizes))
    cuts[-1] = len(train_y)
    for i, (start, end) in enumerate(itertools.pairwise(cuts)):
        pixels = pa.FixedSizeListArray.from_arrays(pa.array(train_x[start:end].reshape(-1)), FEATURES)
        pq.write_table(pa.table({"pixels": pixels, "label": train_y[start:end]}),
                       os.path.join(directory, f"part-{i:05d}.parquet"), row_group_size=128)
    return directory


def build_model():
    """A small multi-layer perceptron: 64 pixels, two hidden layers, 10 logits."""
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, NUM_CLASSES))


@torch.no_grad()
def accuracy(model, x, y, device="cpu"):
    """(accuracy, mean cross-entropy loss) of ``model`` on arrays ``x``, ``y``."""
    model.eval()
    logits = model(torch.from_numpy(x).to(device))
    labels = torch.from_numpy(y).to(device)
    loss = torch.nn.functional.cross_entropy(logits, labels).item()
    correct = (logits.argmax(dim=1) == labels).float().mean().item()
    model.train()
    return correct, loss

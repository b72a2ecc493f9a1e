"""Scores the parameters a jax run left in CHECKPOINT_DIR/final on the held-out digits.

Prints one JSON line: {"accuracy": ..., "examples": ..., "trained_steps": ...}; exits 1 when the
directory holds no final parameters.
"""

import argparse
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from train import digits_split, init_params, logits, unflat


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", required=True)
    args = parser.parse_args(argv)
    final = os.path.join(args.checkpoint_dir, "final")
    saved = os.path.join(final, "params.npz")
    if not os.path.exists(saved):
        print(f"no trained parameters in {final}", file=sys.stderr)
        return 1
    with np.load(saved) as f:
        params = unflat({k: f[k] for k in f.files}, init_params(jax.random.PRNGKey(0)))
    _, test_x, _, test_y = digits_split()
    predictions = np.asarray(jnp.argmax(logits(params, jnp.asarray(test_x)), axis=1))
    trained = {}
    if os.path.exists(os.path.join(final, "metrics.json")):
        with open(os.path.join(final, "metrics.json")) as handle:
            trained = json.load(handle)
    print(json.dumps({"accuracy": round(float(np.mean(predictions == test_y)), 4), "examples": len(test_y),
                      "trained_steps": trained.get("steps")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

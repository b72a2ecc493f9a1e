"""Scores the model a pytorch_ddp run left in CHECKPOINT_DIR/final on the held-out digits.

Prints one JSON line: {"accuracy": ..., "loss": ..., "examples": ..., "trained_steps": ...};
exits 1 when the directory holds no final model.
"""

import argparse
import json
import os
import sys

import digits
import torch


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", required=True)
    args = parser.parse_args(argv)
    final = os.path.join(args.checkpoint_dir, "final")
    weights = os.path.join(final, "model.pt")
    if not os.path.exists(weights):
        print(f"no trained model in {final}", file=sys.stderr)
        return 1
    model = digits.build_model()
    model.load_state_dict(torch.load(weights, map_location="cpu"))
    _, (test_x, test_y) = digits.arrays()
    accuracy, loss = digits.accuracy(model, test_x, test_y)
    trained = {}
    if os.path.exists(os.path.join(final, "metrics.json")):
        with open(os.path.join(final, "metrics.json")) as handle:
            trained = json.load(handle)
    print(json.dumps({"accuracy": round(accuracy, 4), "loss": round(loss, 4), "examples": len(test_y),
                      "trained_steps": trained.get("steps")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Score the weights left by train.py on freshly generated test data.

Prints one JSON line on stdout. Exits 1 when there is no final checkpoint,
so a pipeline step that follows training fails loudly instead of scoring an
untrained model.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import synthetic_mnist
import tf_keras as keras

TEST_EXAMPLES = 2048


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--checkpoint-dir", default=os.environ.get("TONY_CHECKPOINT_DIR"),
        help="the training job's checkpoint directory "
             "(default: $TONY_CHECKPOINT_DIR)")
    parser.add_argument("--batch-size", type=int, default=256)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if not args.checkpoint_dir:
        print("evaluate.py: no checkpoint directory; pass --checkpoint-dir "
              "or set TONY_CHECKPOINT_DIR", file=sys.stderr)
        return 1
    final_dir = os.path.join(args.checkpoint_dir, "final")
    weights_path = os.path.join(final_dir, "model.weights.h5")
    if not os.path.isfile(weights_path):
        print(f"evaluate.py: no final checkpoint at {weights_path}; "
              "has training finished?", file=sys.stderr)
        return 1

    model = synthetic_mnist.build_model(keras)
    model.load_weights(weights_path)
    images, labels = synthetic_mnist.make_arrays(
        TEST_EXAMPLES, synthetic_mnist.TEST_SEED)
    loss, accuracy = model.evaluate(
        images, labels, batch_size=args.batch_size, verbose=0)

    result = {
        "checkpoint": weights_path,
        "test_examples": TEST_EXAMPLES,
        "test_loss": float(loss),
        "test_accuracy": float(accuracy),
    }
    # Carry the training-side numbers along so one line tells the whole story.
    metrics_path = os.path.join(final_dir, "metrics.json")
    if os.path.isfile(metrics_path):
        with open(metrics_path) as handle:
            train_metrics = json.load(handle)
        result["train_steps"] = train_metrics.get("steps")
        result["train_accuracy"] = train_metrics.get("accuracy")
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Writes the synthetic MNIST-shaped data set to an .npz file for train.py --data."""
import argparse

import synthetic_mnist

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("output", help="path of the .npz file to write")
    args = parser.parse_args()
    print(synthetic_mnist.save(args.output))

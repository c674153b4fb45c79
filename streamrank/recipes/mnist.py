"""MNIST -> unit-L2 pixel vectors (784 features, CSR) -> class TupleStores.

Writes under ``--out`` (same layout as streamrank.recipes.newsgroups):
``train.zarr`` (Q = D = training images, tuples with q and d+ of the same
digit, d- of another), ``test.zarr`` (Q = test images, D = training images),
``labels_train.npy``, ``labels_test.npy``, ``classes.txt``.

    python -m streamrank.recipes.mnist --out mnist --tuples 1000000 --test-tuples 100000
    python -m streamrank.recipes.mnist --out mnist_small --limit 1000 --tuples 5000
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def build_parser():
    from streamrank.datasets.mnist import DEFAULT_DIR

    p = argparse.ArgumentParser(prog="streamrank recipe mnist", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--data-dir", default=DEFAULT_DIR, help=f"directory of the IDX .gz files (default {DEFAULT_DIR})")
    p.add_argument("--tuples", type=int, default=1_000_000, help="training tuples (default 1,000,000)")
    p.add_argument("--test-tuples", type=int, default=100_000, help="test tuples (default 100,000)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="use the first N images of each split")
    p.add_argument("--seed", type=int, default=0, help="seed of the tuple sampling")
    p.add_argument("--chunk-tuples", type=int, default=1_000_000, help="tuples per append (memory bound)")
    p.add_argument("--overwrite", action="store_true", help="replace existing stores")
    return p


def main(argv=None) -> int:
    """``streamrank recipe mnist``: write the MNIST stores from the options in ``argv``
    (see ``--help``); returns the exit code."""
    args = build_parser().parse_args(argv)
    from streamrank.datasets.mnist import CITATION, load_mnist
    from streamrank.datasets.tuples import write_class_tuple_stores

    print(f"Citation: {CITATION}")
    if not os.path.isdir(args.data_dir):
        print(f"streamrank recipe mnist: error: {args.data_dir} does not exist", file=sys.stderr)
        return 3
    t0 = time.perf_counter()
    d = load_mnist(args.data_dir, limit=args.limit)
    paths = write_class_tuple_stores(args.out, d.X_train, d.y_train, d.X_test, d.y_test,
                                     n_train_tuples=args.tuples, n_test_tuples=args.test_tuples,
                                     random_state=args.seed, chunk_tuples=args.chunk_tuples,
                                     classes=d.classes, overwrite=args.overwrite)
    print(f"{d.X_train.shape[0]:,} train / {d.X_test.shape[0]:,} test images, {d.X_train.shape[1]} pixels, "
          f"{d.X_train.nnz / max(d.X_train.shape[0], 1):.0f} nonzeros per image")
    print(f"wrote {args.tuples:,} training tuples to {paths['train']} and {args.test_tuples:,} test tuples "
          f"to {paths['test']} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

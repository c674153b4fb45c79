"""Reuters-21578 ModApte -> tf-idf (CSR) and 25 binary topic columns -> GroupStores (object ranking / AUC).

Writes under ``--out``: ``train.zarr`` and ``test.zarr`` — sparse
GroupStores with ``n_outputs`` = number of topics, every story in one global
group (qid 0), so each column is an AUC-maximisation task — plus
``topics.txt`` (the column order) and ``vocabulary.txt``.

    python -m streamrank.recipes.reuters --out reuters                     # ModApte 9,603 / 3,299
    python -m streamrank.recipes.reuters --out reuters500 --train-size 500  # Pahikkala et al. 2009, §5.4
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np


def build_parser():
    from streamrank.datasets.reuters import DEFAULT_ARCHIVE

    p = argparse.ArgumentParser(prog="streamrank recipe reuters", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--archive", default=DEFAULT_ARCHIVE, help=f"reuters21578.tar.gz (default {DEFAULT_ARCHIVE})")
    p.add_argument("--topics", type=int, default=25, help="number of most frequent topics (default 25)")
    p.add_argument("--max-features", type=int, default=10_000, help="vocabulary size, 0 = all words (default 10,000)")
    p.add_argument("--train-size", type=int, default=None,
                   help="pool ModApte and draw this many training stories (default: ModApte split)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="first N stories of each split")
    p.add_argument("--seed", type=int, default=0, help="seed of --train-size")
    p.add_argument("--overwrite", action="store_true", help="replace existing stores")
    return p


def main(argv=None) -> int:
    """``streamrank recipe reuters``: write the Reuters-21578 store from the options in ``argv``
    (see ``--help``); returns the exit code."""
    args = build_parser().parse_args(argv)
    import streamrank as sr
    from streamrank.datasets.reuters import CITATION, load_reuters

    print(f"Citation: {CITATION}")
    if not os.path.exists(args.archive):
        print(f"streamrank recipe reuters: error: {args.archive} does not exist", file=sys.stderr)
        return 3
    t0 = time.perf_counter()
    d = load_reuters(args.archive, n_topics=args.topics, max_features=args.max_features or None,
                     limit=args.limit, train_size=args.train_size, random_state=args.seed)
    os.makedirs(args.out, exist_ok=True)
    n_out = len(d.topics)
    for name, X, Y in (("train", d.X_train, d.Y_train), ("test", d.X_test, d.Y_test)):
        store = sr.GroupStore.create(os.path.join(args.out, f"{name}.zarr"), X.shape[1], sparse=True,
                                     n_outputs=n_out, overwrite=args.overwrite)
        y = Y if n_out > 1 else Y[:, 0]
        store.append(X, y, np.zeros(X.shape[0], dtype=np.int64), batch_id=f"reuters-{name}")
    with open(os.path.join(args.out, "topics.txt"), "w") as f:
        f.write("\n".join(d.topics) + "\n")
    with open(os.path.join(args.out, "vocabulary.txt"), "w") as f:
        f.write("\n".join(d.vocabulary.words) + "\n")
    pos = d.Y_train.sum(axis=0).astype(int)
    print(f"{d.X_train.shape[0]:,} train / {d.X_test.shape[0]:,} test stories, {len(d.vocabulary):,} words, "
          f"{n_out} topics (training positives: "
          + ", ".join(f"{t} {p}" for t, p in zip(d.topics[:5], pos[:5])) + ", ...)")
    print(f"wrote {args.out}/train.zarr and {args.out}/test.zarr in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

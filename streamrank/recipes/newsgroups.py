"""20 Newsgroups -> tf-idf (10,000 most frequent training words, L2-normalised) -> class TupleStores.

Writes under ``--out``:

* ``train.zarr`` — TupleStore: Q = D = training documents, tuples (q, d+, d-)
  with q and d+ from the same newsgroup and d- from another (sparse-SGD
  paper, §IV.A);
* ``test.zarr`` — TupleStore: Q = test documents, D = training documents
  (held-out queries against the training collection);
* ``labels_train.npy``, ``labels_test.npy``, ``classes.txt``, ``vocabulary.txt``.

    python -m streamrank.recipes.newsgroups --out 20ng --tuples 1000000 --test-tuples 100000
    python -m streamrank.recipes.newsgroups --out 20ng_small --limit 400 --tuples 5000   # a quick slice
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def build_parser():
    from streamrank.datasets.newsgroups import DEFAULT_ARCHIVE

    p = argparse.ArgumentParser(prog="streamrank recipe newsgroups", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--archive", default=DEFAULT_ARCHIVE, help=f"20news-bydate.tar.gz (default {DEFAULT_ARCHIVE})")
    p.add_argument("--tuples", type=int, default=1_000_000, help="training tuples (default 1,000,000)")
    p.add_argument("--test-tuples", type=int, default=100_000, help="test tuples (default 100,000)")
    p.add_argument("--max-features", type=int, default=10_000, help="vocabulary size (default 10,000)")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="use about N documents per split (N/20 per newsgroup)")
    p.add_argument("--keep-headers", action="store_true", help="keep all message headers (default: Subject only)")
    p.add_argument("--seed", type=int, default=0, help="seed of the tuple sampling")
    p.add_argument("--chunk-tuples", type=int, default=1_000_000, help="tuples per append (memory bound)")
    p.add_argument("--overwrite", action="store_true", help="replace existing stores")
    return p


def main(argv=None) -> int:
    """``streamrank recipe newsgroups``: write the 20 Newsgroups stores from the options in ``argv``
    (see ``--help``); returns the exit code."""
    args = build_parser().parse_args(argv)
    from streamrank.datasets.newsgroups import CITATION, load_newsgroups
    from streamrank.datasets.tuples import write_class_tuple_stores

    print(f"Citation: {CITATION}")
    if not os.path.exists(args.archive):
        print(f"streamrank recipe newsgroups: error: {args.archive} does not exist", file=sys.stderr)
        return 3
    t0 = time.perf_counter()
    c = load_newsgroups(args.archive, max_features=args.max_features, limit=args.limit,
                        keep_headers=args.keep_headers)
    paths = write_class_tuple_stores(args.out, c.X_train, c.y_train, c.X_test, c.y_test,
                                     n_train_tuples=args.tuples, n_test_tuples=args.test_tuples,
                                     random_state=args.seed, chunk_tuples=args.chunk_tuples,
                                     classes=c.classes, overwrite=args.overwrite)
    with open(os.path.join(args.out, "vocabulary.txt"), "w") as f:
        f.write("\n".join(c.vocabulary.words) + "\n")
    print(f"{c.X_train.shape[0]:,} train / {c.X_test.shape[0]:,} test documents, {len(c.classes)} groups, "
          f"{len(c.vocabulary):,} words, {c.X_train.nnz / max(c.X_train.shape[0], 1):.0f} nonzeros per document")
    print(f"wrote {args.tuples:,} training tuples to {paths['train']} and {args.test_tuples:,} test tuples "
          f"to {paths['test']} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

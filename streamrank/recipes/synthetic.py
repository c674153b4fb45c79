"""Synthetic ranking data written streaming to a store (bounded memory).

Two modes:

* groups (default): LETOR-like query groups from a hidden model (linear, or
  nonlinear with ``--nonlinear``), labels graded 0-4, written to a
  GroupStore in chunks of ``--chunk-rows`` rows;
* ``--tuples N``: (q, d+, d-) tuples ordered by a planted sparse bilinear
  ``W`` (q^T W d), written to a TupleStore; the planted ``W`` is saved next
  to the store as ``<out>.W.npz`` (scipy.sparse ``save_npz``, no pickle)
  and is reproducible from ``--model-seed`` with
  ``streamrank.datasets.synthetic.planted_W``.

Examples:

    python -m streamrank.recipes.synthetic --rows 1000000 --features 46 --out letor_like.zarr
    python -m streamrank.recipes.synthetic --rows 200000 --nonlinear --group-size 10 60 --out nl.zarr
    python -m streamrank.recipes.synthetic --tuples 1000000 --features 1000 --out planted.zarr
"""
from __future__ import annotations

import argparse
import sys
import time

CITATION = ("Synthetic data (streamrank.datasets.synthetic); LETOR-like layout after "
            "T. Qin and T.-Y. Liu, Introducing LETOR 4.0 Datasets, arXiv:1306.2597, 2013; "
            "planted bilinear tuples after the setting of X. Chen, B. Bai, Y. Qi, Q. Lin and "
            "J. Carbonell, Learning Preferences with Millions of Parameters by Enforcing Sparsity, "
            "ICDM 2010.")


def build_parser():
    p = argparse.ArgumentParser(prog="streamrank recipe synthetic", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="path of the zarr store to write")
    p.add_argument("--rows", type=int, default=100_000, help="rows (groups mode; default 100,000)")
    p.add_argument("--features", type=int, default=None,
                   help="number of features (default 46 for groups, 1000 for --tuples)")
    p.add_argument("--group-size", type=int, nargs=2, default=(5, 40), metavar=("MIN", "MAX"),
                   help="rows per query, uniform in [MIN, MAX] (default 5 40)")
    p.add_argument("--nonlinear", action="store_true", help="nonlinear hidden model")
    p.add_argument("--noise", type=float, default=0.5, help="label noise std (default 0.5)")
    p.add_argument("--density", type=float, default=1.0, help="fraction of nonzero features (default 1)")
    p.add_argument("--sparse", action="store_true", help="store X as CSR")
    p.add_argument("--chunk-rows", type=int, default=100_000, help="rows per append (memory bound)")
    p.add_argument("--seed", type=int, default=0, help="seed of the rows / tuples")
    p.add_argument("--model-seed", type=int, default=0, help="seed of the hidden model / planted W")
    p.add_argument("--tuples", type=int, default=None, metavar="N",
                   help="write N planted-W bilinear tuples to a TupleStore instead")
    p.add_argument("--nnz", type=int, default=20, help="nonzeros per query/item vector (tuples mode)")
    p.add_argument("--topics", type=int, default=20, help="topics of the planted W (tuples mode)")
    p.add_argument("--chunk-tuples", type=int, default=100_000, help="tuples per append (tuples mode)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store")
    return p


def main(argv=None) -> int:
    """``streamrank recipe synthetic``: write the synthetic store from the options in ``argv``
    (see ``--help``); returns the exit code."""
    args = build_parser().parse_args(argv)
    print(f"Citation: {CITATION}")
    from streamrank.datasets import synthetic as syn

    t0 = time.perf_counter()
    if args.features is None:
        args.features = 1000 if args.tuples is not None else 46
    if args.tuples is not None:
        import scipy.sparse as sp

        store, W = syn.write_planted_bilinear_store(
            args.out, args.tuples, args.features, overwrite=args.overwrite, nnz=args.nnz,
            n_topics=args.topics, chunk_tuples=args.chunk_tuples, random_state=args.seed,
            model_seed=args.model_seed)
        w_path = str(args.out).rstrip("/") + ".W.npz"
        sp.save_npz(w_path, W.tocsr())
        dt = time.perf_counter() - t0
        print(f"wrote {store.n_tuples:,} tuples ({store.n_queries:,} queries, {store.n_items:,} items, "
              f"{args.features} features) to {args.out} in {dt:.1f} s; planted W ({W.nnz:,} nonzeros) "
              f"saved to {w_path}")
        return 0
    store = syn.write_letor_like_store(
        args.out, args.rows, args.features, overwrite=args.overwrite, group_size=tuple(args.group_size),
        nonlinear=args.nonlinear, noise=args.noise, density=args.density, sparse=args.sparse,
        chunk_rows=args.chunk_rows, random_state=args.seed, model_seed=args.model_seed)
    dt = time.perf_counter() - t0
    print(f"wrote {store.n_rows:,} rows in {store.n_groups:,} groups ({args.features} features, "
          f"{'nonlinear' if args.nonlinear else 'linear'} hidden model) to {args.out} in {dt:.1f} s "
          f"({store.n_rows / max(dt, 1e-9):,.0f} rows/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""LETOR text (MQ2008, OHSUMED, or any svmlight file with qid:) -> GroupStore, streaming.

The known datasets are read straight from their distribution archives in
``--data-dir`` (default ../shared/data/letor beside the checkout, or $STREAMRANK_DATA/letor; nothing is unpacked):

    python -m streamrank.recipes.letor --dataset MQ2008 --fold 1 --split train --out mq2008_f1_train.zarr
    python -m streamrank.recipes.letor --dataset OHSUMED --fold 2 --split test --out ohsumed_f2_test.zarr

Any other file (plain, .gz, or a member of a tar archive):

    python -m streamrank.recipes.letor --input my_logs.txt.gz --out logs.zarr
    python -m streamrank.recipes.letor --input MSLR-WEB10K.tar.gz --member Fold1/train.txt --out web10k.zarr

As Parquet with string query ids (how logging pipelines write it), for
``streamrank ingest FILE.parquet --label label --qid qid``:

    python -m streamrank.recipes.letor --dataset MQ2008 --fold 1 --split train --to-parquet \\
        --out mq2008_f1_train.parquet
    python -m streamrank.recipes.letor --dataset MQ2008 --to-parquet --rows-per-file 5000 --out mq2008_parts/

Features are stored dense float32 (LETOR lists every feature); memory is
bounded by ``--chunk-mb`` plus the largest query.
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def build_parser():
    from streamrank.datasets.letor import DATASETS, DEFAULT_DIR, SPLITS

    p = argparse.ArgumentParser(prog="streamrank recipe letor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="path of the GroupStore (or with --to-parquet, the Parquet file "
                   "or directory) to write")
    p.add_argument("--to-parquet", action="store_true",
                   help="write Parquet (columns qid as string 'q<id>', label, f_1..f_n) instead of a GroupStore")
    p.add_argument("--rows-per-file", type=int, default=None, metavar="N",
                   help="--to-parquet: split into part-*.parquet files of N rows in the directory --out")
    p.add_argument("--row-group-rows", type=int, default=4096, metavar="N",
                   help="--to-parquet: rows per Parquet row group (default 4096)")
    p.add_argument("--dataset", choices=sorted(DATASETS), default="MQ2008", help="known dataset (default MQ2008)")
    p.add_argument("--fold", type=int, default=1, choices=range(1, 6), help="fold 1..5 (default 1)")
    p.add_argument("--split", choices=SPLITS, default="train", help="train, vali or test (default train)")
    p.add_argument("--data-dir", default=DEFAULT_DIR, help=f"directory of the archives (default {DEFAULT_DIR})")
    p.add_argument("--input", default=None, help="any LETOR/svmlight file instead of --dataset")
    p.add_argument("--member", default=None, help="member of --input when it is a tar archive")
    p.add_argument("--features", type=int, default=None,
                   help="number of features (default: known dataset's, else inferred from the first chunk)")
    p.add_argument("--null-value", type=float, default=None, help="substitute for NULL values (LETOR 3.0 Feature-null)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="stop after about N rows (whole queries)")
    p.add_argument("--chunk-mb", type=float, default=8.0, help="text read per step in MB (default 8)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store")
    return p


def main(argv=None) -> int:
    """``streamrank recipe letor``: write the LETOR store (or Parquet) from the options in ``argv``
    (see ``--help``); returns the exit code."""
    from streamrank.datasets import letor

    args = build_parser().parse_args(argv)
    if args.input is None:
        spec = letor.DATASETS[args.dataset]
        source = os.path.join(args.data_dir, spec["archive"])
        member = letor.letor_member(args.dataset, args.fold, args.split)
        n_features = args.features or spec["n_features"]
        print(f"Citation: {letor.CITATIONS[args.dataset]}")
    else:
        source, member, n_features = args.input, args.member, args.features
        print("Citation: cite the source of your LETOR/svmlight file (LETOR: Qin & Liu, arXiv:1306.2597, 2013).")
    if not os.path.exists(source):
        print(f"streamrank recipe letor: error: {source} does not exist", file=sys.stderr)
        return 3
    t0 = time.perf_counter()
    if args.to_parquet:
        if os.path.exists(args.out) and not args.overwrite:
            print(f"streamrank recipe letor: error: {args.out} exists; pass --overwrite", file=sys.stderr)
            return 5
        files = letor.write_letor_parquet(args.out, source, member=member, n_features=n_features,
                                          rows_per_file=args.rows_per_file, row_group_rows=args.row_group_rows,
                                          limit_rows=args.limit, chunk_bytes=int(args.chunk_mb * 2**20),
                                          null_value=args.null_value)
        print(f"wrote {len(files)} Parquet file(s) to {args.out} in {time.perf_counter() - t0:.1f} s")
        return 0
    store = letor.write_letor_store(args.out, source, member=member, n_features=n_features,
                                    limit_rows=args.limit, chunk_bytes=int(args.chunk_mb * 2**20),
                                    overwrite=args.overwrite, null_value=args.null_value)
    dt = time.perf_counter() - t0
    name = f"{source}:{member}" if member else source
    print(f"wrote {store.n_rows:,} rows in {store.n_groups:,} queries ({store.n_features} features) "
          f"from {name} to {args.out} in {dt:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

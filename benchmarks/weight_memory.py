"""Peak memory of weighted fits from a store's ``weight`` column: does it grow with the rows?

The product's promise is that peak memory depends on the block and the model,
never on the row count.  Row weights (``with_weights(store, "weight")``) used
to break it for the learners that wanted every row's weight at once: the
whole column (8 bytes a row) was read for PairwiseSGDRanker's pair weights
and for cg's split-group totals (plus an 8-byte-a-row running sum there).
Now pairs carry the weights of their block and cg streams the totals.

For two store sizes (rows × 10 float32 features, groups of 5-40 rows plus a
few groups larger than the block budget, so cg cuts them into pieces), each
learner is fitted twice in this process, unweighted (the baseline) and
weighted, and the Python-heap peak of each fit is taken with ``tracemalloc``
(numpy buffers are traced; the store's O(groups) metadata is read, and both
learners run once on a tiny store to compile, before measuring).  Printed: both peaks, their ratio, and the weighted fit's extra
bytes per row.  Flat memory shows as a ratio near 1 at both sizes and an extra
of ~0 bytes a row; the whole-column read shows as ~8 (sgd) or ~16 (cg) bytes a
row, and a ratio that grows with the rows.

Usage::

    python benchmarks/weight_memory.py --smoke     # seconds
    python benchmarks/weight_memory.py             # 250,000 and 1,000,000 rows
    python benchmarks/weight_memory.py --sizes 1000000 4000000
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import tracemalloc
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import environment, print_environment, print_table  # noqa: E402

N_FEATURES = 10


def write_store(path, n_rows, max_rows, seed=0, chunk=100_000):
    """A store with a ``weight`` column: groups of 5-40 rows, and every 50th chunk's first group 3 x max_rows."""
    import streamrank as sr

    rng = np.random.default_rng(seed)
    st = sr.GroupStore.create(path, n_features=N_FEATURES, row_columns=("weight",))
    beta = rng.normal(size=N_FEATURES)
    done, q = 0, 0
    while done < n_rows:
        k = min(chunk, n_rows - done)
        sizes = []
        if (done // chunk) % 50 == 0 and k > 3 * max_rows:
            sizes.append(3 * max_rows)                 # a group cut across blocks
        while sum(sizes) < k:
            sizes.append(int(rng.integers(5, 41)))
        sizes[-1] -= sum(sizes) - k
        if sizes[-1] <= 0:
            sizes.pop()
        sizes = [s for s in sizes if s > 0]
        X = rng.normal(size=(k, N_FEATURES)).astype(np.float32)
        y = np.round(X @ beta + rng.normal(size=k))
        qid = np.repeat(np.arange(q, q + len(sizes)), sizes)
        w = rng.uniform(0.2, 2.0, size=k)
        st.append(X, y, qid, weight=w)
        done, q = done + k, q + len(sizes)
    return sr.GroupStore.open(path)


def peak_bytes(fn):
    """Python-heap peak (tracemalloc) of ``fn()`` above what was allocated when it started."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def learners(max_rows, n_pairs, cg_iter):
    import streamrank as sr

    def sgd(src):
        sr.PairwiseSGDRanker(random_state=0).fit(src, n_pairs=n_pairs, max_rows=max_rows, batch_size=8192)

    def cg(src):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")              # a few iterations only: not converged, on purpose
            sr.RankRLS(alpha=1.0, solver="cg", max_iter=cg_iter).fit(src, max_rows=max_rows)

    return {"PairwiseSGDRanker": sgd, "RankRLS cg (split groups)": cg}


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny stores, seconds")
    p.add_argument("--sizes", type=int, nargs="+", default=[250_000, 1_000_000], help="store rows")
    p.add_argument("--max-rows", type=int, default=8192, help="block budget (rows)")
    p.add_argument("--pairs", type=int, default=100_000, help="pairs sampled by PairwiseSGDRanker")
    p.add_argument("--cg-iter", type=int, default=3, help="cg iterations (each a pass)")
    p.add_argument("--work-dir", default=None)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.smoke:
        args.sizes, args.max_rows, args.pairs, args.cg_iter = [20_000, 80_000], 2048, 5_000, 2
    from streamrank.io.weighted import with_weights

    print_environment(environment())
    print(f"max_rows={args.max_rows:,}  pairs={args.pairs:,}  cg iterations={args.cg_iter}  "
          f"load={os.getloadavg()[0]:.1f}")
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="streamrank_wmem_"))
    rows = []
    tiny = write_store(work / "warm.zarr", 4 * args.max_rows + 1000, args.max_rows)
    for fit in learners(args.max_rows, 1000, 1).values():    # compile and first-use caches: not measured
        fit(tiny)
        fit(with_weights(tiny, "weight"))
    for n in args.sizes:
        store = write_store(work / f"w{n}.zarr", n, args.max_rows)
        _ = (store.group_ptr, store.qid)                   # O(groups) metadata: read before measuring
        for _ in with_weights(store, "weight").blocks(max_rows=args.max_rows, split_groups=True):
            pass                                           # the store's arrays opened, chunks touched once
        for name, fit in learners(args.max_rows, args.pairs, args.cg_iter).items():
            plain = peak_bytes(lambda: fit(store))
            weighted = peak_bytes(lambda: fit(with_weights(store, "weight")))
            rows.append({"rows": n, "learner": name, "plain": plain / 2**20, "weighted": weighted / 2**20,
                         "ratio": weighted / plain, "extra_mib": (weighted - plain) / 2**20,
                         "extra": (weighted - plain) / n})
    print_table(rows, [("rows", "rows", ","), ("learner", "learner", ""),
                       ("plain", "peak unweighted MiB", ".1f"), ("weighted", "peak weighted MiB", ".1f"),
                       ("ratio", "ratio w/u", ".2f"), ("extra_mib", "extra MiB", ".2f"), ("extra", "extra B/row", ".2f")],
                title="Peak Python-heap memory of one fit (tracemalloc), unweighted vs weight column")
    print("flat memory: the same extra MiB at every size (a chunk of the column), so the extra bytes a row fall "
          "as the rows grow; the whole column read gave 8 (sgd) or 16 (cg) extra bytes a row at every size")
    return 0


if __name__ == "__main__":
    sys.exit(main())

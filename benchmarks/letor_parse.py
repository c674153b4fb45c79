"""Rows/s of streamrank's svmlight/LETOR parser against scikit-learn's, same files, same run.

Files: MQ2008 (LETOR 4.0, ``Querylevelnorm.txt``, unpacked from the shared
tar.gz to a temporary directory) and a larger synthetic LETOR-like file
written by this script.  For each file the best of ``--repeat`` timings of

* ``sklearn.datasets.load_svmlight_file(path, query_id=True)`` (baseline),
* ``streamrank.io.svmlight.iter_svmlight(path)`` streamed in 8 MB chunks,
  dense float32 and CSR, by the numba kernels,

is printed with the ratio to the baseline (target for the kernels: >= 5x).

    python benchmarks/letor_parse.py            # MQ2008 + 300,000-row synthetic file
    python benchmarks/letor_parse.py --smoke    # a few seconds, tiny synthetic file only
"""
from __future__ import annotations

import argparse
import os
import sys
import tarfile
import tempfile
import time

import numpy as np
from streamrank.datasets._paths import data_path

DEFAULT_LETOR = str(data_path("letor", "MQ2008_QueryLevelNorm.tar.gz"))


def write_synthetic(path, n_rows, n_features=46, seed=0):
    """A LETOR-like text file: groups of 5-40 rows, six decimals, a comment per line."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        q, r = 1, 0
        while r < n_rows:
            size = int(min(rng.integers(5, 41), n_rows - r))
            X = rng.random((size, n_features))
            y = rng.integers(0, 3, size)
            for i in range(size):
                feats = " ".join(f"{j + 1}:{v:.6f}" for j, v in enumerate(X[i]))
                f.write(f"{y[i]} qid:{q} {feats} #docid = doc-{r + i}\n")
            q += 1
            r += size


def best_time(fn, repeat):
    best, out = np.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def bench_file(path, label, repeat):
    from sklearn.datasets import load_svmlight_file

    from streamrank.io.svmlight import iter_svmlight

    def ours(dense):
        def run():
            n = 0
            for chunk in iter_svmlight(path, dense=dense):
                n += len(chunk.y)
            return n
        return run

    ours(True)()  # compile (cached kernels load on first call)
    t_sk, (Xs, ys, qs) = best_time(lambda: load_svmlight_file(path, query_id=True), repeat)
    t_dense, n = best_time(ours(True), repeat)
    t_csr, n2 = best_time(ours(False), repeat)
    assert n == n2 == Xs.shape[0], (n, n2, Xs.shape)
    mb = os.path.getsize(path) / 1e6
    print(f"\n{label}: {n:,} rows, {Xs.shape[1]} features, {mb:.1f} MB")
    print(f"  {'reader':<38}{'seconds':>9}{'rows/s':>13}{'MB/s':>8}{'ratio':>8}")
    for name, t in [("sklearn load_svmlight_file (baseline)", t_sk),
                    ("streamrank iter_svmlight dense f32", t_dense),
                    ("streamrank iter_svmlight CSR f32", t_csr)]:
        print(f"  {name:<38}{t:9.3f}{n / t:13,.0f}{mb / t:8.1f}{t_sk / t:7.1f}x")
    return t_sk / t_dense, t_sk / t_csr


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--letor", default=DEFAULT_LETOR, help="MQ2008 tar.gz (skipped if missing)")
    ap.add_argument("--rows", type=int, default=300_000, help="rows of the synthetic file")
    ap.add_argument("--repeat", type=int, default=3, help="timings per reader (best is kept)")
    ap.add_argument("--smoke", action="store_true", help="tiny synthetic file only, one repeat")
    args = ap.parse_args(argv)
    if args.smoke:
        args.rows, args.repeat = 2_000, 1
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        if not args.smoke and os.path.exists(args.letor):
            with tarfile.open(args.letor, "r:gz") as tf:
                member = tf.getmember("MQ2008/Querylevelnorm.txt")
                path = os.path.join(tmp, "MQ2008.txt")
                with open(path, "wb") as out:
                    out.write(tf.extractfile(member).read())
            ratios.append(bench_file(path, "MQ2008 Querylevelnorm.txt", args.repeat))
        path = os.path.join(tmp, "synthetic.txt")
        write_synthetic(path, args.rows)
        ratios.append(bench_file(path, "synthetic LETOR-like", args.repeat))
    worst = min(min(r) for r in ratios)
    print(f"\nworst speed-up over sklearn: {worst:.1f}x (target >= 5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

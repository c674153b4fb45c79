"""cg RankRLS: cost of ties="exclude" on one global group split across blocks, and of the warm-started path.

Data: hashed sparse features (``--features`` dims, ``--nnz`` nonzeros per row),
``qid=None`` (one global group of all rows, so every block is a piece of
it), graded targets in ``--levels`` levels (ties), CSR in memory.

Printed, each measured in the same run (min of ``--repeat``):

1. seconds of one product ``XᵀLX v`` for ties="include" and ties="exclude"
   (class sums cached, one sweep; and forced uncached, two sweeps) against a
   raw streaming pass doing the unavoidable work (read the block, ``X v``,
   ``Xᵀ u``) — the ratios product / raw pass;
2. the regularization path of ``--alphas`` values (warm-started, largest
   first) against as many cold cg fits: passes and seconds, and the ratio.

Usage::

    python benchmarks/rankrls_cg_ties_path.py               # 200,000 rows x 2^18 hashed, 50 nnz/row
    python benchmarks/rankrls_cg_ties_path.py --alphas 4 --max-iter 60    # a shorter path part
    python benchmarks/rankrls_cg_ties_path.py --smoke       # a few seconds
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp


def _hashed(rows, n_features, nnz, levels, seed=0):
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, n_features, size=rows * nnz).astype(np.int32)
    data = rng.normal(size=rows * nnz).astype(np.float32)
    indptr = np.arange(0, rows * nnz + 1, nnz, dtype=np.int64)
    X = sp.csr_matrix((data, indices, indptr), shape=(rows, n_features))
    X.sum_duplicates()
    w = np.zeros(n_features)
    hot = rng.choice(n_features, size=min(1000, n_features), replace=False)
    w[hot] = rng.normal(size=hot.size)
    score = np.asarray(X @ w).ravel() + rng.normal(size=rows)
    y = np.digitize(score, np.quantile(score, np.linspace(0, 1, levels + 1)[1:-1])).astype(np.float64)
    return X, y


def _best(f, repeat):
    best = np.inf
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t)
    return best, out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny data, a few seconds")
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--features", type=int, default=1 << 18)
    p.add_argument("--nnz", type=int, default=50)
    p.add_argument("--levels", type=int, default=5, help="graded targets: number of tie classes")
    p.add_argument("--max-rows", type=int, default=65_536, help="block budget")
    p.add_argument("--alphas", type=int, default=6, help="path length (log grid 2^0 ... 2^12)")
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--max-iter", type=int, default=150, help="CG iteration limit per alpha")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args(argv)
    if a.smoke:
        a.rows, a.features, a.nnz, a.max_rows, a.alphas, a.repeat = 3000, 1 << 12, 20, 700, 4, 1

    import streamrank as sr
    from streamrank.rankrls import _split_groups, cg

    X, y = _hashed(a.rows, a.features, a.nnz, a.levels)
    src = sr.as_source(X, y)
    n_blocks = len(src.plan(a.max_rows, split_groups=True))
    print(f"data: {a.rows} rows x {a.features} hashed features, {X.nnz} nonzeros, one global group in "
          f"{n_blocks} pieces of <= {a.max_rows} rows, {a.levels} target levels")
    v = np.random.default_rng(1).normal(size=(a.features, 1))

    def raw():
        z = np.zeros(a.features)
        for b in src.blocks(max_rows=a.max_rows, split_groups=True):
            u = b.X @ v[:, 0]
            z += b.X.T @ u
        return z

    t_raw, _ = _best(raw, a.repeat)
    rows = [("raw pass (read, Xv, Xᵀu)", t_raw)]
    for label, ties, cache in (("ties=include", "include", None), ("ties=exclude, sums cached", "exclude", None),
                               ("ties=exclude, uncached (2 sweeps)", "exclude", 0)):
        old = _split_groups.TIE_CACHE_ENTRIES
        if cache is not None:
            _split_groups.TIE_CACHE_ENTRIES = cache
        try:
            op = cg.RankingOperator(src, ties=ties, max_rows=a.max_rows)
            t0 = time.perf_counter()
            op.ties_table()
            t_table = time.perf_counter() - t0
            t, _ = _best(lambda: op.matmat(v), a.repeat)
        finally:
            _split_groups.TIE_CACHE_ENTRIES = old
        extra = f" (tie table once: {t_table:.2f} s)" if ties == "exclude" else ""
        rows.append((label + extra, t))
    print("\none product XᵀLX v")
    for label, t in rows:
        print(f"  {label:<55s} {t:7.3f} s   ratio to raw pass {t / t_raw:5.2f}")

    alphas = 2.0 ** np.linspace(0, 12, a.alphas)
    m = sr.RankRLS(alpha=1.0, solver="cg", tol=a.tol, max_iter=a.max_iter, ties="exclude").fit(
        X, y, max_rows=a.max_rows)
    t0 = time.perf_counter()
    P = m.path(alphas, max_rows=a.max_rows)
    t_path = time.perf_counter() - t0
    path_passes = m.path_info_["n_passes"]
    t_cold = 0.0
    cold_passes = 0
    diff = []
    cold_conv = []
    for i, al in enumerate(alphas):
        t0 = time.perf_counter()
        mm = sr.RankRLS(alpha=float(al), solver="cg", tol=a.tol, max_iter=a.max_iter, ties="exclude").fit(
            X, y, max_rows=a.max_rows)
        cold_conv.append(mm.cg_info_["converged"])
        t_cold += time.perf_counter() - t0
        cold_passes += mm.cg_info_["n_passes"]
        diff.append(np.linalg.norm(P[i] - mm.coef_) / max(np.linalg.norm(mm.coef_), 1e-300))
    print(f"\npath of {a.alphas} alphas 2^0..2^12 (ties=exclude, tol {a.tol:g}, max_iter {a.max_iter}): warm-started {t_path:.2f} s, "
          f"{path_passes} passes | {a.alphas} cold fits {t_cold:.2f} s, {cold_passes} passes | "
          f"ratio path / cold fits: time {t_path / t_cold:.2f}, passes {path_passes / cold_passes:.2f}")
    print(f"CG iterations per alpha (alphas ascending; the path solves them from the largest): "
          f"{m.path_info_['n_iter']}; converged: path {m.path_info_['converged']}, cold {cold_conv}")
    print("relative difference path vs cold fit per alpha (both stop at ||r|| <= tol ||b||, so a loose tol "
          "allows different iterates at small alpha): " + ", ".join(f"{d:.1e}" for d in diff))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

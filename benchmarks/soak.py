"""Soak run: very long streams through the online and the streaming learners (issue 9).

Two streams, generated on the fly in chunks (nothing is kept, so memory can
only grow inside the learner):

* ``sgd``: ``--tuples`` random sparse (q, d+, d-) tuples through
  :meth:`SparseSGDRanker.partial_fit` in batches of ``--batch`` tuples;
* ``rankrls``: ``--rows`` rows in query groups through
  :meth:`RankRLS.partial_fit` (primal statistics) in chunks of ``--chunk`` rows.

Every ``--report`` seconds it prints rows (tuples) done, the throughput of the
last interval and the process RSS.  At the end: throughput first interval vs
last (steady: ratio near 1), RSS after warm-up vs end (flat: growth of a few
MiB), and equality with a chunked reference —

* sgd: the first ``--check`` tuples are replayed in a *different* batching
  (a different chunked cut of the same stream) into a fresh model, and its W
  must equal the snapshot of the long run at that point bit for bit;
* rankrls: G = XᵀLX and b = XᵀLy are accumulated by a plain numpy formula per
  chunk (float64) alongside, and the final coefficients must agree to 1e-8.

Examples::

    python benchmarks/soak.py --smoke                  # a few seconds
    python benchmarks/soak.py --tuples 1e7 --rows 1e7  # the run in the issue-9 report
    python benchmarks/soak.py --full                   # 10^8 tuples and 10^8 rows (hours)

Figures depend on the load of the machine (shared by several engineers when
these were taken).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import streamrank as sr  # noqa: E402


def _rss() -> int:
    import psutil

    return psutil.Process(os.getpid()).memory_info().rss


class Monitor:
    """Throughput and RSS per interval of ``every`` seconds."""

    def __init__(self, name, every):
        self.name, self.every = name, every
        self.t0 = self.t_last = time.perf_counter()
        self.n_last = 0
        self.rows = []          # (done, rate, rss)

    def tick(self, done, force=False):
        t = time.perf_counter()
        if t - self.t_last >= self.every or (force and done > self.n_last):
            rate = (done - self.n_last) / max(t - self.t_last, 1e-9)
            rss = _rss()
            self.rows.append((done, rate, rss))
            print(f"  {self.name}: {done:>13,d} done  {rate:>12,.0f}/s  rss {rss / 2**20:8.1f} MiB",
                  flush=True)
            self.t_last, self.n_last = t, done

    def summary(self):
        rows = self.rows
        total = time.perf_counter() - self.t0
        if len(rows) < 3:
            return {"seconds": total, "intervals": len(rows)}
        warm = rows[len(rows) // 10] if len(rows) >= 10 else rows[1]
        rates = np.array([r[1] for r in rows[1:]])
        return {
            "seconds": total,
            "intervals": len(rows),
            "rate_first": rows[1][1], "rate_last": rows[-1][1],
            "rate_median": float(np.median(rates)),
            "rate_cv": float(rates.std() / rates.mean()),
            "rss_warm_mib": warm[2] / 2**20, "rss_end_mib": rows[-1][2] / 2**20,
            "rss_growth_mib": (rows[-1][2] - warm[2]) / 2**20,
        }


# ------------------------------------------------------------------ SGD stream
def tuple_batch(i, batch, n_feat, nnz, seed):
    """Batch ``i`` of the tuple stream (deterministic): Q, D+, D- CSR with ``nnz`` entries a row."""
    rng = np.random.default_rng([seed, i])
    n = batch

    def csr():
        cols = np.sort(rng.choice(n_feat, size=(n, nnz), replace=True), axis=1)
        # distinct columns per row: drop duplicates by bumping (keeps nnz per row exact)
        cols = (cols + np.arange(nnz)) % n_feat
        cols.sort(axis=1)
        data = rng.random((n, nnz)).astype(np.float32) + 0.1
        return sp.csr_matrix((data.ravel(), cols.ravel().astype(np.int32),
                              np.arange(0, n * nnz + 1, nnz, dtype=np.int64)), shape=(n, n_feat))

    return csr(), csr(), csr()


def soak_sgd(n_tuples, batch, check, n_feat, nnz, every, seed=0):
    model = sr.SparseSGDRanker(eta0=1.0, l1=1e-6, init="zeros")
    mon = Monitor("sgd", every)
    done, snap = 0, None
    i = 0
    while done < n_tuples:
        Q, Dp, Dn = tuple_batch(i, batch, n_feat, nnz, seed)
        model.partial_fit(Q, Dp, Dn)
        done += batch
        i += 1
        if done == check:
            snap = model.W_.copy()
        mon.tick(done)
    mon.tick(done, force=True)
    out = mon.summary()
    out.update(nnz_W=int(model.nnz_), memory_bytes_W=int(model.memory_bytes_))
    if snap is not None:
        # the same first `check` tuples, cut into batches of another size
        ref = sr.SparseSGDRanker(eta0=1.0, l1=1e-6, init="zeros")
        parts = [tuple_batch(j, batch, n_feat, nnz, seed) for j in range(check // batch)]
        Q, Dp, Dn = (sp.vstack([p[k] for p in parts], format="csr") for k in range(3))
        other = max(1, batch // 3 + 7)
        for a in range(0, check, other):
            ref.partial_fit(Q[a:a + other], Dp[a:a + other], Dn[a:a + other])
        d = (ref.W_ - snap)
        out["reference_tuples"] = check
        out["reference_max_abs_diff"] = float(abs(d).max()) if d.nnz else 0.0
        out["reference_equal"] = bool(d.nnz == 0 or abs(d).max() == 0)
    return out


# -------------------------------------------------------------- RankRLS stream
def row_chunk(i, chunk, n_feat, seed):
    rng = np.random.default_rng([seed, 10_000 + i])
    sizes = rng.integers(1, 40, chunk // 8)
    sizes = sizes[np.cumsum(sizes) <= chunk]
    m = int(sizes.sum())
    qid = np.repeat(np.arange(sizes.size, dtype=np.int64) + i * chunk, sizes)
    X = rng.normal(size=(m, n_feat)).astype(np.float32)
    y = X @ np.linspace(-1, 1, n_feat, dtype=np.float32) + rng.normal(size=m).astype(np.float32)
    return X, y.astype(np.float64), qid


def reference_stats(X, y, qid):
    """G, b of the pair Laplacian L_g = n_g I - 11ᵀ, plain numpy, float64."""
    X = X.astype(np.float64)
    starts = np.r_[0, np.flatnonzero(qid[1:] != qid[:-1]) + 1]
    n_g = np.diff(np.r_[starts, len(qid)])
    sizes = np.repeat(n_g, n_g).astype(np.float64)
    S = np.add.reduceat(X, starts, axis=0)
    sy = np.add.reduceat(y, starts)
    G = X.T @ (sizes[:, None] * X) - S.T @ S
    b = X.T @ (sizes * y) - S.T @ sy
    return G, b


def soak_rankrls(n_rows, chunk, n_feat, every, alpha=1.0, seed=0):
    model = sr.RankRLS(alpha=alpha, solver="primal")
    mon = Monitor("rankrls", every)
    G = np.zeros((n_feat, n_feat))
    b = np.zeros(n_feat)
    done, i = 0, 0
    while done < n_rows:
        X, y, qid = row_chunk(i, chunk, n_feat, seed)
        model.partial_fit(X, y, qid)
        g, bb = reference_stats(X, y, qid)
        G += g
        b += bb
        done += X.shape[0]
        i += 1
        mon.tick(done)
    mon.tick(done, force=True)
    out = mon.summary()
    w = np.linalg.solve(G + alpha * np.eye(n_feat), b)
    out["rows"] = done
    out["reference_rel_diff"] = float(np.abs(model.coef_ - w).max() / np.abs(w).max())
    out["reference_equal"] = bool(np.allclose(model.coef_, w, rtol=1e-8, atol=1e-12 * np.abs(w).max()))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tuples", type=float, default=1e7, help="tuples through SparseSGDRanker.partial_fit")
    p.add_argument("--rows", type=float, default=1e7, help="rows through RankRLS.partial_fit")
    p.add_argument("--full", action="store_true", help="10^8 tuples and 10^8 rows")
    p.add_argument("--smoke", action="store_true", help="tiny run (seconds)")
    p.add_argument("--batch", type=int, default=10_000, help="tuples per partial_fit call")
    p.add_argument("--chunk", type=int, default=200_000, help="rows per RankRLS.partial_fit call")
    p.add_argument("--features", type=int, default=20, help="RankRLS features")
    p.add_argument("--sgd-features", type=int, default=500, help="query/item features of the SGD stream")
    p.add_argument("--nnz", type=int, default=4, help="nonzeros per query / item vector")
    p.add_argument("--check", type=float, default=1e6, help="tuples replayed for the SGD reference")
    p.add_argument("--report", type=float, default=10.0, help="seconds between progress lines")
    p.add_argument("--only", choices=("sgd", "rankrls"), default=None)
    a = p.parse_args(argv)
    if a.full:
        a.tuples = a.rows = 1e8
    if a.smoke:
        a.tuples, a.rows, a.check, a.batch, a.chunk, a.report = 40_000, 200_000, 20_000, 2_000, 20_000, 0.2
    check = int(a.check) // a.batch * a.batch
    print(f"soak: {int(a.tuples):,} tuples, {int(a.rows):,} rows (numbers taken on a shared, loaded machine)")
    res = {}
    if a.only in (None, "sgd"):
        res["sgd"] = soak_sgd(int(a.tuples), a.batch, check, a.sgd_features, a.nnz, a.report)
    if a.only in (None, "rankrls"):
        res["rankrls"] = soak_rankrls(int(a.rows), a.chunk, a.features, a.report)
    for name, r in res.items():
        print(f"\n{name}:")
        for k, v in r.items():
            print(f"  {k:24s} {v:,.4g}" if isinstance(v, float) else f"  {k:24s} {v}")
    ok = all(r.get("reference_equal", True) for r in res.values())
    print("\nresult equal to the chunked reference:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Kernel RankRLS: dual solver cost vs one eigh, sparse RankRLS vs a pure GEMM (issue 4).

Questions
---------
1. Dual, Gaussian kernel, 50 features, queries of 20 rows, m = 2,000 / 4,000 /
   8,000: wall time of fit + a 31-value λ path + leave-query-out, and peak RSS
   (each size in a fresh subprocess).  Baselines: one ``numpy.linalg.eigh``
   of the same size in the same subprocess (target: total <= 2 x eigh) and
   the reference library's figures on this machine for fit + LQO (26 s /
   113 s / 536 s; 0.3 / 1.0 / 3.5 GiB; target >= 3 x faster).
2. Sparse RankRLS, r = 1,000 basis rows, 1,000,000 rows streamed from a
   GroupStore on disk: wall time against the pure GEMM accumulation of
   Φ_Bᵀ Φ_B over the same block shapes in the same run (target <= 1.5 x;
   float64, ``acc += B.T @ B`` on a (block_rows, r) buffer for every block:
   numpy runs ``B.T @ B`` of one buffer as BLAS SYRK, half the flops of a
   general GEMM, so the baseline is the cheapest float64 way to form ΦᵀΦ and
   excludes reading, kernel evaluation, reservoir sampling and the final
   O(r³) solve, which the fit includes; CPU seconds are printed too, since
   wall times are noisy on a shared machine),
   peak RSS (target < 2 GiB), and ranking quality (NDCG@10, disagreement on
   held-out queries) against the exact dual on an 8,000-row subsample.

Usage::

    python benchmarks/rankrls_kernel.py --smoke        # seconds, tiny sizes
    python benchmarks/rankrls_kernel.py                # the figures above
    python benchmarks/rankrls_kernel.py --only dual    # or --only sparse
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REFERENCE = {2000: (26.0, 0.3), 4000: (113.0, 1.0), 8000: (536.0, 3.5)}   # seconds, GiB (fit + LQO)
N_FEATURES = 50
GROUP = 20
GAMMA = 0.01


def _peak_gib() -> float:
    """Peak RSS of this process in GiB: VmHWM of /proc/self/status (reset by exec, unlike ru_maxrss,
    which on Linux keeps the parent's high-water mark in a child started by subprocess)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20   # Linux: KiB


def _data(rows, seed):
    """LETOR-like synthetic data: 50 features, graded labels 0..4 from a nonlinear score."""
    rng = np.random.default_rng(seed)
    wr = np.random.default_rng(12345)
    w1, w2 = wr.normal(size=N_FEATURES), wr.normal(size=N_FEATURES)
    X = rng.normal(size=(rows, N_FEATURES))
    s = np.sin(X @ w1 / 4.0) * 2.0 + (X @ w2 / 7.0) ** 2 + 0.3 * rng.normal(size=rows)
    y = np.digitize(s, [-1.0, 0.0, 1.0, 2.0]).astype(np.float64)
    qid = np.arange(rows) // GROUP
    return X, y, qid


# --------------------------------------------------------------------- workers
def _worker_dual(m):
    import streamrank as sr
    from streamrank.rankrls.linear import DEFAULT_ALPHAS

    X, y, qid = _data(m, seed=1)
    # load the numba kernels once (a per-process cost, not a per-fit one), as rankrls_linear.py does
    warm = sr.KernelRankRLS(kernel="rbf", gamma=GAMMA, alpha=1.0).fit(X[:60], y[:60], qid[:60])
    warm.path(DEFAULT_ALPHAS[:2])
    warm.leave_query_out()
    t0 = time.perf_counter()
    model = sr.KernelRankRLS(kernel="rbf", gamma=GAMMA, alpha=1.0).fit(X, y, qid)
    t1 = time.perf_counter()
    P = model.path(DEFAULT_ALPHAS)
    t2 = time.perf_counter()
    lqo = model.leave_query_out()
    t3 = time.perf_counter()
    peak = _peak_gib()
    assert P.shape == (31, m) and np.isfinite(lqo).all()
    del model, P
    A = np.random.default_rng(0).normal(size=(m, m))
    A = A + A.T
    t4 = time.perf_counter()
    np.linalg.eigh(A)
    t5 = time.perf_counter()
    return {"m": m, "fit": t1 - t0, "path": t2 - t1, "lqo": t3 - t2, "eigh": t5 - t4, "peak_gib": peak}


def _worker_sparse(store_path, r, alpha, test_rows, block_rows):
    import streamrank as sr

    store = sr.GroupStore.open(store_path)
    Xw, yw, qw = _data(400, seed=5)       # load the numba kernels once (per process, not per fit)
    sr.KernelRankRLS(kernel="rbf", gamma=GAMMA, n_basis=20, random_state=0).fit(
        sr.as_source(Xw.astype(np.float32), yw, qw), max_rows=100)
    t0 = time.perf_counter()
    c0 = time.process_time()
    model = sr.KernelRankRLS(kernel="rbf", gamma=GAMMA, alpha=alpha, n_basis=r, random_state=0)
    model.fit(store, max_rows=block_rows)
    t1 = time.perf_counter()
    c1 = time.process_time()
    peak = _peak_gib()
    # pure GEMM over the same block shapes: acc += Φ_Bᵀ Φ_B
    n = store.n_rows
    Phi = np.random.default_rng(0).random((block_rows, r))
    acc = np.zeros((r, r))
    t2 = time.perf_counter()
    c2 = time.process_time()
    for a in range(0, n, block_rows):
        B = Phi[: min(block_rows, n - a)]
        acc += B.T @ B
    t3 = time.perf_counter()
    c3 = time.process_time()
    Xt, yt, qt = _data(test_rows, seed=99)
    pred = model.predict(Xt)
    return {"rows": n, "r": r, "fit": t1 - t0, "gemm": t3 - t2, "fit_cpu": c1 - c0, "gemm_cpu": c3 - c2,
            "load": os.getloadavg()[0], "peak_gib": peak,
            "ndcg10": float(sr.metrics.ndcg(yt, pred, qt, k=10)),
            "disagreement": float(sr.metrics.disagreement(yt, pred, qt))}


def _run_worker(args):
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(args)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------- questions
def bench_dual(sizes):
    print("== dual: fit + 31-lambda path + leave-query-out (rbf, 50 features, queries of 20) ==")
    print(f"{'m':>6} {'fit s':>7} {'path s':>7} {'lqo s':>7} {'total':>7} {'eigh s':>7} "
          f"{'tot/eigh':>8} {'peak GiB':>8} {'ref s':>6} {'speedup':>7} {'ref GiB':>7}")
    for m in sizes:
        r = _run_worker({"kind": "dual", "m": m})
        total = r["fit"] + r["path"] + r["lqo"]
        ref = REFERENCE.get(m)
        ref_s = f"{ref[0]:6.0f}" if ref else "     -"
        speed = f"{ref[0] / (r['fit'] + r['lqo']):6.1f}x" if ref else "      -"
        ref_g = f"{ref[1]:7.1f}" if ref else "      -"
        print(f"{m:>6} {r['fit']:7.2f} {r['path']:7.3f} {r['lqo']:7.2f} {total:7.2f} {r['eigh']:7.2f} "
              f"{total / r['eigh']:8.2f} {r['peak_gib']:8.2f} {ref_s} {speed} {ref_g}")


def bench_sparse(rows, r, sub_rows, test_rows, workdir):
    import streamrank as sr

    print(f"== sparse RankRLS: r = {r}, {rows:,} rows from a GroupStore on disk ==")
    path = Path(workdir) / "kernel_bench_store"
    t = time.perf_counter()
    store = sr.GroupStore.create(path, n_features=N_FEATURES, overwrite=True)
    batch = 200_000
    for a in range(0, rows, batch):
        X, y, qid = _data(min(batch, rows - a), seed=1000 + a)
        store.append(X.astype(np.float32), y, qid + a // GROUP)
    print(f"   (store written in {time.perf_counter() - t:.1f} s, not timed below)")
    # exact dual on a subsample: alpha by leave-query-out CV, scaled with the number of queries
    Xs, ys, qs = _data(sub_rows, seed=1000)      # the store's first rows
    Xt, yt, qt = _data(test_rows, seed=99)
    dual = sr.KernelRankRLS(kernel="rbf", gamma=GAMMA)
    alphas = 2.0 ** np.arange(-6, 9, 2)
    cv = dual.cross_validate((Xs, ys, qs), alphas, folds="query", scoring="ndcg@10")
    a_sub = cv.best_alpha
    pd_ = dual.predict(Xt)
    sp_sub = sr.KernelRankRLS(kernel="rbf", gamma=GAMMA, alpha=a_sub, n_basis=min(r, sub_rows),
                              random_state=0).fit(Xs, ys, qs)
    ps_ = sp_sub.predict(Xt)
    block_rows = max(256, (1 << 22) // r)
    res = _run_worker({"kind": "sparse", "store": str(path), "r": r, "alpha": a_sub * rows / sub_rows,
                       "test_rows": test_rows, "block_rows": block_rows})
    print(f"   fit {res['fit']:.1f} s | pure GEMM Φᵀ Φ same shapes {res['gemm']:.1f} s | "
          f"ratio {res['fit'] / res['gemm']:.2f} (target <= 1.5) | peak RSS {res['peak_gib']:.2f} GiB "
          f"(target < 2)")
    print(f"   CPU seconds: fit {res['fit_cpu']:.1f} | GEMM {res['gemm_cpu']:.1f} | ratio "
          f"{res['fit_cpu'] / res['gemm_cpu']:.2f}   (load average {res['load']:.1f} on {os.cpu_count()} cores)")
    print(f"   test queries: {test_rows // GROUP}; alpha from LQO-CV on the subsample = {a_sub:g} "
          f"(x rows/{sub_rows} for the full data)")
    print(f"   {'model':<40} {'NDCG@10':>8} {'disagr.':>8}")
    print(f"   {f'exact dual, {sub_rows:,} rows':<40} {sr.metrics.ndcg(yt, pd_, qt, k=10):8.4f} "
          f"{sr.metrics.disagreement(yt, pd_, qt):8.4f}")
    print(f"   {f'sparse r={min(r, sub_rows)}, {sub_rows:,} rows':<40} {sr.metrics.ndcg(yt, ps_, qt, k=10):8.4f} "
          f"{sr.metrics.disagreement(yt, ps_, qt):8.4f}")
    print(f"   {f'sparse r={r}, {rows:,} rows (streamed)':<40} {res['ndcg10']:8.4f} {res['disagreement']:8.4f}")
    shutil.rmtree(path, ignore_errors=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    p.add_argument("--only", choices=["dual", "sparse"], help="run one question")
    p.add_argument("--sizes", type=int, nargs="*", help="dual sizes (default 2000 4000 8000)")
    p.add_argument("--rows", type=int, help="sparse: rows in the store (default 1,000,000)")
    p.add_argument("--basis", type=int, help="sparse: basis rows r (default 1000)")
    p.add_argument("--workdir", default=None, help="where the temporary store goes (default: a tmp dir)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        args = json.loads(a.worker)
        if args["kind"] == "dual":
            out = _worker_dual(args["m"])
        else:
            out = _worker_sparse(args["store"], args["r"], args["alpha"], args["test_rows"], args["block_rows"])
        print(json.dumps(out))
        return 0
    sizes = a.sizes or ([200, 400] if a.smoke else [2000, 4000, 8000])
    rows = a.rows or (8_000 if a.smoke else 1_000_000)
    r = a.basis or (50 if a.smoke else 1000)
    sub = 600 if a.smoke else 8000
    test_rows = 1000 if a.smoke else 4000
    print("note: figures depend on machine load; on a shared machine they are noisy")
    if a.only in (None, "dual"):
        bench_dual(sizes)
    if a.only in (None, "sparse"):
        tmp = tempfile.mkdtemp(dir=a.workdir)
        try:
            bench_sparse(rows, r, sub, test_rows, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Linear RankRLS from a GroupStore on disk: fit time and peak RSS against reading and BLAS.

Questions (issue 3):

1. ``fit`` of N rows x 50 dense features in groups of 20 from a GroupStore:
   wall time and peak RSS, against (a) a raw read of the same arrays with
   zarr (``X[a:b]``, ``y[a:b]`` chunk by chunk) and (b) numpy's GEMM XᵀX on
   the same data in memory.  Target: fit <= 1.3 x max(a, b).  Also printed:
   streamrank's own block pass (it decodes chunk files directly, about 3x
   less CPU than zarr) and the float64 GEMM, the floor of the accumulation.
2. A λ path of 31 values: cost relative to the fit (target < 5 %).
3. ``--big``: 10,000,000 rows: peak RSS of fit (target < 1 GiB).
4. ``--cg``: conjugate gradient on hashed sparse features (2^20 dims, ~50
   nonzeros per row): seconds per iteration against one raw streaming pass
   (target <= 1.5 x) and iterations to 1e-6.

Usage::

    python benchmarks/rankrls_linear.py --smoke          # seconds, tiny data
    python benchmarks/rankrls_linear.py                  # 1,000,000 x 50
    python benchmarks/rankrls_linear.py --big            # + 10,000,000 x 50 RSS
    python benchmarks/rankrls_linear.py --cg             # + sparse cg
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_dense_store  # noqa: E402


def _write_sparse_store(path, rows, n_features, nnz_per_row, group_size, seed=0, batch=100_000):
    import streamrank as sr

    rng = np.random.default_rng(seed)
    w = rng.normal(size=n_features)
    store = sr.GroupStore.create(path, n_features=n_features, sparse=True, overwrite=True)
    for a in range(0, rows, batch):
        b = min(a + batch, rows)
        r = b - a
        indices = rng.integers(0, n_features, size=r * nnz_per_row)
        data = rng.normal(size=r * nnz_per_row).astype(np.float32)
        indptr = np.arange(0, r * nnz_per_row + 1, nnz_per_row)
        X = sp.csr_matrix((data, indices, indptr), shape=(r, n_features))
        X.sum_duplicates()
        y = X @ w + rng.normal(size=r)
        qid = np.arange(a, b) // group_size
        store.append(X, y, qid)
    return sr.GroupStore.open(path)


def _raw_read(store, max_rows, cpu=False):
    t = time.perf_counter()
    c = time.process_time()
    s = 0.0
    for b in store.blocks(max_rows=max_rows, split_groups=True):
        s += float(b.y[0]) if b.n_rows else 0.0
    return (time.perf_counter() - t, time.process_time() - c) if cpu else time.perf_counter() - t


def _zarr_read(path, cpu=False):
    """(a): the store's arrays read with zarr itself, one chunk-sized slice after another."""
    import zarr

    t = time.perf_counter()
    c = time.process_time()
    X = zarr.open_array(str(Path(path) / "X"), mode="r")
    y = zarr.open_array(str(Path(path) / "y"), mode="r")
    step = X.chunks[0]
    s = 0.0
    for a in range(0, X.shape[0], step):
        xb = X[a : a + step]
        yb = y[a : a + step]
        s += float(xb[0, 0]) + float(yb[0])
    return (time.perf_counter() - t, time.process_time() - c) if cpu else time.perf_counter() - t


def _raw_pass_sparse(store, max_rows, v):
    """One streaming pass doing the unavoidable work of a matvec: read, X v, Xᵀ u."""
    t = time.perf_counter()
    z = np.zeros(store.n_features)
    for b in store.blocks(max_rows=max_rows, split_groups=True):
        u = b.X @ v
        z += b.X.T @ u
    return time.perf_counter() - t


def dense_case(rows, n_features, group_size, workdir, max_rows, label, repeat=3):
    import streamrank as sr
    from streamrank._memory import PeakRSS

    path = Path(workdir) / f"dense_{rows}"
    t = time.perf_counter()
    store = write_dense_store(path, rows, n_features, group_size)
    print(f"[{label}] wrote store {rows:,} x {n_features} ({store.n_groups:,} groups) "
          f"in {time.perf_counter() - t:.1f} s")
    _raw_read(store, max_rows)  # warm the page cache and numba
    sr.RankRLS().fit(sr.as_source(np.zeros((40, n_features), np.float32), np.arange(40.0),
                                  np.repeat(np.arange(2), 20)))
    _zarr_read(path)
    zreads = [_zarr_read(path, cpu=True) for _ in range(repeat)]
    t_zarr, c_zarr = min(r[0] for r in zreads), min(r[1] for r in zreads)
    reads = [_raw_read(store, max_rows, cpu=True) for _ in range(repeat)]
    t_read, c_read = min(r[0] for r in reads), min(r[1] for r in reads)
    with PeakRSS() as mem:
        t = time.perf_counter()
        c = time.process_time()
        m = sr.RankRLS(alpha=1.0).fit(store, max_rows=max_rows)
        t_fit = time.perf_counter() - t
        c_fit = time.process_time() - c
    for _ in range(repeat - 1):   # min of `repeat` fits, as for the read (the machine may be shared)
        t = time.perf_counter()
        c = time.process_time()
        sr.RankRLS(alpha=1.0).fit(store, max_rows=max_rows)
        t_fit = min(t_fit, time.perf_counter() - t)
        c_fit = min(c_fit, time.process_time() - c)
    alphas = 2.0 ** np.arange(-15, 16)
    t_path = np.inf
    for _ in range(3):  # min of 3, each with a fresh eigendecomposition
        m._eigen = None
        t = time.perf_counter()
        m.path(alphas)
        t_path = min(t_path, time.perf_counter() - t)
    out = {"zarr_read": t_zarr, "read": t_read, "fit": t_fit, "read_cpu": c_read, "fit_cpu": c_fit, "fit_peak_mib": mem.peak / 2**20,
           "fit_delta_mib": (mem.peak - mem.start) / 2**20, "path": t_path}
    if rows <= 2_000_000:
        X = np.concatenate([b.X for b in store.blocks(max_rows=max_rows, prefetch=False)])
        X64 = X.astype(np.float64)
        out["gemm32"] = out["gemm64"] = np.inf
        for _ in range(repeat):
            t = time.perf_counter()
            X.T @ X
            out["gemm32"] = min(out["gemm32"], time.perf_counter() - t)
            t = time.perf_counter()
            X64.T @ X64
            out["gemm64"] = min(out["gemm64"], time.perf_counter() - t)
        del X, X64
        base = max(t_zarr, out["gemm32"])
        print(f"[{label}] (a) raw zarr read of X, y {t_zarr:.2f} s | streamrank block pass {t_read:.2f} s | "
              f"(b) numpy GEMM XᵀX float32 {out['gemm32']:.2f} s, float64 {out['gemm64']:.2f} s")
        print(f"[{label}] fit {t_fit:.2f} s = {t_fit / base:.2f} x max(a, b) (target <= 1.3); "
              f"{t_fit / max(t_read, out['gemm32']):.2f} x max(block pass, b); "
              f"{t_fit / out['gemm64']:.2f} x GEMM64 (the float64 accumulation's floor); "
              f"peak RSS {out['fit_peak_mib']:.0f} MiB (+{out['fit_delta_mib']:.0f} MiB during fit)")
        print(f"[{label}] CPU seconds (all threads): zarr read {c_zarr:.2f}, block pass {c_read:.2f}, "
              f"fit {c_fit:.2f}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
              f"(min of {repeat} runs each)")
    else:
        print(f"[{label}] raw read {t_read:.2f} s | fit {t_fit:.2f} s = {t_fit / t_read:.2f} x read; "
              f"peak RSS {out['fit_peak_mib']:.0f} MiB (+{out['fit_delta_mib']:.0f} MiB during fit; target < 1024)")
    print(f"[{label}] path of 31 alphas {t_path * 1e3:.1f} ms = {100 * t_path / t_fit:.2f} % of fit (target < 5 %)")
    shutil.rmtree(path, ignore_errors=True)
    return out


def cg_case(rows, n_features, nnz, group_size, workdir, max_rows, label, tol=1e-6, max_iter=300):
    import streamrank as sr

    path = Path(workdir) / f"sparse_{rows}"
    t = time.perf_counter()
    store = _write_sparse_store(path, rows, n_features, nnz, group_size)
    print(f"[{label}] wrote sparse store {rows:,} x 2^{int(np.log2(n_features))} "
          f"(~{nnz} nnz/row) in {time.perf_counter() - t:.1f} s")
    v = np.random.default_rng(1).normal(size=n_features)
    _raw_pass_sparse(store, max_rows, v)
    t_pass = min(_raw_pass_sparse(store, max_rows, v) for _ in range(2))
    print(f"[{label}] raw streaming pass (read + Xv + Xᵀu) {t_pass:.2f} s", flush=True)
    times = []
    last = [time.perf_counter()]

    def cb(it, res, W):
        now = time.perf_counter()
        times.append(now - last[0])
        last[0] = now
        if it % 10 == 0:
            print(f"[{label}]   iteration {it}: relative residual {res:.2e}, {times[-1]:.2f} s", flush=True)

    t = time.perf_counter()
    m = sr.RankRLS(alpha=1.0, solver="cg", tol=tol, max_iter=max_iter)
    last[0] = time.perf_counter()
    m.fit(store, max_rows=max_rows, callback=cb)
    t_fit = time.perf_counter() - t
    per_it = float(np.median(times)) if times else float("nan")
    print(f"[{label}] raw streaming pass (read + Xv + Xᵀu) {t_pass:.2f} s | cg {per_it:.2f} s/iteration "
          f"= {per_it / t_pass:.2f} x pass (target <= 1.5)")
    print(f"[{label}] cg: {m.n_iter_} iterations to tol {tol:g} (converged={m.cg_info_['converged']}), "
          f"total {t_fit:.1f} s, {m.cg_info_['n_passes']} passes")
    shutil.rmtree(path, ignore_errors=True)
    return {"pass": t_pass, "per_iter": per_it, "n_iter": m.n_iter_}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny data, a few seconds")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--features", type=int, default=50)
    p.add_argument("--group-size", type=int, default=20)
    p.add_argument("--max-rows", type=int, default=65_536, help="block budget")
    p.add_argument("--repeat", type=int, default=3, help="dense: times are the min of this many runs")
    p.add_argument("--big", action="store_true", help="also 10,000,000 rows (peak RSS)")
    p.add_argument("--big-rows", type=int, default=10_000_000)
    p.add_argument("--cg", action="store_true", help="also cg on hashed sparse features")
    p.add_argument("--cg-rows", type=int, default=1_000_000)
    p.add_argument("--cg-max-iter", type=int, default=300)
    p.add_argument("--skip-dense", action="store_true", help="only the --big / --cg parts")
    p.add_argument("--workdir", default=None, help="directory for the temporary stores (default: a temp dir)")
    a = p.parse_args(argv)
    if a.smoke:
        a.rows, a.big_rows, a.cg_rows = 20_000, 50_000, 5_000
    workdir = Path(a.workdir) if a.workdir else Path(tempfile.mkdtemp(prefix="sr_bench_rankrls_"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        if not a.skip_dense:
            dense_case(a.rows, a.features, a.group_size, workdir, a.max_rows, "dense", repeat=a.repeat)
        if a.big or a.smoke:
            dense_case(a.big_rows, a.features, a.group_size, workdir, a.max_rows, "big", repeat=1)
        if a.cg or a.smoke:
            nfeat = 2**20 if not a.smoke else 2**14
            cg_case(a.cg_rows, nfeat, 50, a.group_size, workdir, a.max_rows, "cg",
                    max_iter=a.cg_max_iter if not a.smoke else 50)
    finally:
        if not a.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Primal RankRLS statistics on a dask LocalCluster: speedup, bytes moved, equality (issue 6).

Questions:

0. Workers are started by ``sr.distributed.local_cluster``, which leaves
   ``MALLOC_TRIM_THRESHOLD_`` unset; one run with dask's defaults (the nanny
   sets it to 65536) shows what that costs.
1. Speedup of ``sr.distributed.statistics`` (map over planned blocks, each
   worker reading its own blocks from the store, tree reduction) with 2
   worker processes against 1 (target >= 1.6x on a 2-core machine), and
   against the local single-process ``RankRLS.fit`` (BLAS limited to one
   thread, as dask does for its workers).
2. Bytes moved: worker -> worker (the tree reduction) and workers -> client
   (the reduced statistics).  Both are O(n²) per reduction node — independent
   of the number of rows; the table prints them next to the data size.
3. Equality: the coefficients from the distributed statistics against the
   local fit (max relative difference; reduction order only).
4. An estimate for 10¹⁰ rows on 100 workers from the measured per-worker rate.

Usage::

    python benchmarks/distributed_scaling.py --smoke                # seconds, tiny data
    python benchmarks/distributed_scaling.py                        # 5,000,000 rows x 20 features
    python benchmarks/distributed_scaling.py --store /path/s.zarr   # reuse/keep a store
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import scratch_dir, write_dense_store  # noqa: E402


def _serialized_bytes(obj) -> int:
    from distributed.protocol import serialize_bytelist

    return int(sum(len(memoryview(b).cast("B")) for b in serialize_bytelist(obj)))


def _outgoing(client) -> int:
    return int(sum(client.run(lambda dask_worker: dask_worker.transfer_outgoing_bytes_total).values()))


def _fit_in_task(path, max_rows):
    """The local streaming fit, run as one task inside a worker (same process environment)."""
    import streamrank as sr

    c0, t0 = time.process_time(), time.perf_counter()
    sr.RankRLS(solver="primal").fit(sr.GroupStore.open(path), max_rows=max_rows)
    return time.perf_counter() - t0, time.process_time() - c0


def _time_cluster(n_workers, store, warm, max_rows, split_every, tuned=True, repeat=1):
    import distributed

    import streamrank as sr
    from streamrank import distributed as srd

    est = sr.RankRLS(solver="primal")
    # tuned: streamrank's local_cluster (MALLOC_TRIM_THRESHOLD_ unset); else dask's defaults
    cluster = (srd.local_cluster(n_workers) if tuned else
               distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                        dashboard_address=":0"))
    with cluster as cl, distributed.Client(cl) as c:
        c.run(_fit_in_task, warm.path, 1_000)      # every worker: imports, numba kernels loaded
        srd.statistics(est, warm, c, max_rows=1_000, split_every=split_every)
        best = None
        for _ in range(max(1, int(repeat))):   # best of `repeat` runs: the least disturbed by other load
            before = _outgoing(c)
            cpu0 = c.run(time.process_time)
            t0 = time.perf_counter()
            stats = srd.statistics(est, store, c, max_rows=max_rows, split_every=split_every)
            dt = time.perf_counter() - t0
            cpu1 = c.run(time.process_time)
            w2w = _outgoing(c) - before
            if best is None or dt < best[0]:
                best = (dt, cpu0, cpu1, w2w)
        dt, cpu0, cpu1, w2w = best
        in_task = c.submit(_fit_in_task, store.path, max_rows, pure=False).result() if n_workers == 1 else None
    cpu = sorted(cpu1[w] - cpu0[w] for w in cpu1)
    return dt, stats, w2w, cpu, in_task


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=5_000_000)
    p.add_argument("--features", type=int, default=20)
    p.add_argument("--group-size", type=int, default=20)
    p.add_argument("--max-rows", type=int, default=65_536, help="block budget")
    p.add_argument("--split-every", type=int, default=8)
    p.add_argument("--store", default=None, help="store path (created if missing; kept)")
    p.add_argument("--repeat", type=int, default=3,
                   help="time every run this many times and keep the fastest (default 3)")
    p.add_argument("--smoke", action="store_true", help="tiny data, a few seconds")
    args = p.parse_args(argv)
    if args.smoke:
        args.rows, args.features, args.max_rows, args.repeat = 20_000, 10, 2_000, 1

    from threadpoolctl import threadpool_limits

    import streamrank as sr

    with scratch_dir("sr-dist-bench-") as tmp:
        path = Path(args.store) if args.store else tmp / "store.zarr"
        t0 = time.perf_counter()
        store = None
        if path.exists():
            store = sr.GroupStore.open(path)
            if store.n_rows != args.rows or store.n_features != args.features:
                store = None
        if store is None:
            store = write_dense_store(path, args.rows, args.features, args.group_size, batch=250_000,
                                      batch_id_prefix="b")
        t_write = time.perf_counter() - t0
        warm = write_dense_store(tmp / "warm.zarr", 4_000, args.features, args.group_size, seed=1, batch=250_000,
                                 batch_id_prefix="b")
        data_bytes = store.n_rows * (store.n_features * 4 + 8)
        n_blocks = len(store.plan(args.max_rows, split_groups=True))

        with threadpool_limits(1):
            sr.RankRLS(solver="primal").fit(warm)
            t_local = math.inf
            for _ in range(max(1, args.repeat)):
                t0 = time.perf_counter()
                local = sr.RankRLS(solver="primal").fit(store, max_rows=args.max_rows)
                t_local = min(t_local, time.perf_counter() - t0)

        with threadpool_limits(1):
            c0 = time.process_time()
            sr.RankRLS(solver="primal").fit(store, max_rows=args.max_rows)
            cpu_local = time.process_time() - c0
        t1, s1, w1, cpu1, in_task = _time_cluster(1, store, warm, args.max_rows, args.split_every,
                                                  repeat=args.repeat)
        t2, s2, w2, cpu2, _ = _time_cluster(2, store, warm, args.max_rows, args.split_every, repeat=args.repeat)
        # last: dask's nanny exports MALLOC_TRIM_THRESHOLD_ into this process's environment
        t1d, _, _, cpu1d, _ = _time_cluster(1, store, warm, args.max_rows, args.split_every, tuned=False)
        to_client = _serialized_bytes(s2)
        est = sr.RankRLS(solver="primal").fit_statistics(s2)
        diff = float(np.max(np.abs(est.coef_ - local.coef_)) / np.max(np.abs(local.coef_)))
        est1 = sr.RankRLS(solver="primal").fit_statistics(s1)
        diff1 = float(np.max(np.abs(est1.coef_ - local.coef_)) / np.max(np.abs(local.coef_)))

        n = args.features
        print(f"store: {store.n_rows:,} rows x {n} features, {store.n_groups:,} groups, "
              f"{n_blocks} blocks of <= {args.max_rows:,} rows, {data_bytes / 2**20:.0f} MiB "
              f"(written in {t_write:.1f} s)")
        print(f"{'run':28s} {'seconds':>9s} {'Mrows/s':>8s} {'vs local':>9s}")
        for name, t in (("local fit (1 BLAS thread)", t_local), ("local fit inside 1 worker", in_task[0]),
                        ("dask, 1 worker", t1), ("dask, 2 workers", t2),
                        ("dask defaults, 1 worker", t1d)):
            print(f"{name:28s} {t:9.2f} {store.n_rows / t / 1e6:8.2f} {t_local / t:8.2f}x")
        print(f"speedup 2 workers / 1 worker: {t1 / t2:.2f}x  (target >= 1.6x; best of {args.repeat} runs each; "
              f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores — above ~0.5 the ratio "
              "measures the share of CPU the OS gives 1 vs 2 processes, not the scaling)")
        print(f"cores used by 1 worker: {sum(cpu1) / t1:.2f} (CPU s / wall s; read-ahead and zarr decode threads "
              f"overlap the compute); load-independent bound from CPU seconds: "
              f"{sum(cpu1) / max(max(cpu2), 1e-9):.2f}x")
        print(f"CPU seconds: local fit {cpu_local:.2f}; the same inside a worker {in_task[1]:.2f}; "
              f"dask 1 worker {sum(cpu1):.2f} (with dask's MALLOC_TRIM_THRESHOLD_: {sum(cpu1d):.2f}); 2 workers "
              f"{' + '.join(f'{x:.2f}' for x in cpu2)} (load-independent view: the work is split "
              f"{min(cpu2) / max(max(cpu2), 1e-9):.2f} : 1 between the workers, overhead vs local "
              f"{sum(cpu2) / max(cpu_local, 1e-9):.2f}x)")
        print(f"bytes worker->worker (tree reduction, 2 workers): {w2:,}; workers->client: {to_client:,} "
              f"(statistics of n={n}: G {8 * n * n:,} B; data {data_bytes:,} B; ratio data/moved "
              f"{data_bytes / max(w2 + to_client, 1):,.0f})")
        print(f"coef max relative difference vs local fit: 1 worker {diff1:.2e}, 2 workers {diff:.2e}")
        # estimate for 10^10 rows on 100 workers from the measured single-worker rate
        rate = store.n_rows / t1
        rows, workers = 1e10, 100
        blocks = math.ceil(rows / args.max_rows)
        levels = math.ceil(math.log(max(blocks, 2), args.split_every))
        stat_bytes = _serialized_bytes(s1)
        map_s = rows / (workers * rate)
        red_s = levels * (args.split_every * stat_bytes / 100e6 + 1e-3)   # 100 MB/s links, 1 ms per merge
        print(f"estimate 10^10 rows, 100 workers, n={n}: map {map_s / 60:.1f} min at {rate / 1e6:.2f} Mrows/s "
              f"per worker (I/O-bound if the store cannot deliver {workers * rate * (n * 4 + 8) / 1e9:.1f} GB/s), "
              f"reduction {levels} levels x {args.split_every} x {stat_bytes:,} B = {red_s:.2f} s; "
              f"client solve O(n^3)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

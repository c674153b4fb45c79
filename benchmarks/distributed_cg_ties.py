"""Distributed cg RankRLS with ties="exclude" on one global group split across blocks (issue 6 / issue 3).

Data: a sparse GroupStore on disk, hashed features (``--features`` dims,
``--nnz`` nonzeros per row), all rows in one query (``qid=None`` semantics:
every block is a piece of the group), graded targets in ``--levels`` levels.

Printed, each measured in the same run (min of ``--repeat``):

1. seconds of one product ``(XᵀLX + λI) v`` with the local operator
   (:class:`streamrank.rankrls.cg.RankingOperator`, one process) and with
   :class:`streamrank.distributed._cg.DistributedRankingOperator` on a
   LocalCluster of ``--workers`` single-threaded processes reading their own
   blocks from the store, for ties="include", ties="exclude" with the class
   sums cached (one sweep) and forced uncached (two sweeps) — and the ratio
   distributed / local;
2. the one-off TieTable setup (local pass vs distributed map + tree sum);
3. bytes moved per product (worker -> worker transfers of the tree sum, and
   the reduced result the client receives), next to the size of the data:
   they depend on n, k and the number of tie classes, not on rows;
4. max relative difference of the distributed product from the local one.

Usage::

    python benchmarks/distributed_cg_ties.py --smoke      # a few seconds, tiny data
    python benchmarks/distributed_cg_ties.py              # 400,000 rows x 2^18 hashed, 50 nnz/row
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import scratch_dir  # noqa: E402
from rankrls_cg_ties_path import _hashed  # noqa: E402


def _best(f, repeat):
    best, out = np.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t)
    return best, out


def _outgoing(client) -> int:
    return int(sum(client.run(lambda dask_worker: dask_worker.transfer_outgoing_bytes_total).values()))


def _serialized_bytes(obj) -> int:
    from distributed.protocol import serialize_bytelist

    return int(sum(len(memoryview(b).cast("B")) for b in serialize_bytelist(obj)))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny data, a few seconds")
    p.add_argument("--rows", type=int, default=400_000)
    p.add_argument("--features", type=int, default=1 << 18)
    p.add_argument("--nnz", type=int, default=50)
    p.add_argument("--levels", type=int, default=5, help="graded targets: number of tie classes")
    p.add_argument("--max-rows", type=int, default=65_536, help="block budget")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--split-every", type=int, default=8)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dir", default=None, help="scratch directory for the store")
    a = p.parse_args(argv)
    if a.smoke:
        a.rows, a.features, a.nnz, a.max_rows, a.repeat = 4000, 1 << 12, 20, 600, 1

    import distributed

    import streamrank as sr
    from streamrank.distributed import _cg as dcg
    from streamrank.distributed._cluster import _ship_source
    from streamrank import distributed as srd
    from streamrank.rankrls import _split_groups, cg

    X, y = _hashed(a.rows, a.features, a.nnz, a.levels)
    with scratch_dir("sr-dcg-ties-", a.dir) as tmp:
        store = sr.GroupStore.create(tmp / "s.zarr", n_features=a.features, sparse=True)
        store.append(X, y, np.zeros(a.rows, np.int64), batch_id="all")
        store = sr.GroupStore.open(tmp / "s.zarr")
        data_bytes = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes + y.nbytes
        plan = store.plan(a.max_rows, split_groups=True)
        pieces = dcg.pieces_of_plan(plan, store.group_ptr)
        print(f"data: {a.rows} rows x {a.features} hashed features, {X.nnz} nonzeros ({data_bytes / 2**20:.1f} MiB), "
              f"one query in {len(pieces)} pieces of <= {a.max_rows} rows, {a.levels} target levels; "
              f"{a.workers} worker processes, split_every {a.split_every}")
        v = np.random.default_rng(1).normal(size=(a.features, 1))
        rows = []
        with srd.local_cluster(a.workers) as cluster, distributed.Client(cluster) as client:
            ref = _ship_source(client, store)
            for label, ties, cache in (("ties=include", "include", None),
                                       ("ties=exclude, class sums cached", "exclude", None),
                                       ("ties=exclude, uncached (2 sweeps)", "exclude", 0)):
                old = _split_groups.TIE_CACHE_ENTRIES
                if cache is not None:
                    _split_groups.TIE_CACHE_ENTRIES = cache
                try:
                    loc = cg.RankingOperator(store, alpha=1.0, ties=ties, max_rows=a.max_rows)
                    t_lt, _ = _best(loc.ties_table, 1)
                    dist = dcg.DistributedRankingOperator(client, ref, plan, a.features, 1, alpha=1.0,
                                                          group_weight="pair", ties=ties,
                                                          split_every=a.split_every, pieces=pieces,
                                                          max_rows=a.max_rows)
                    t_dt, _ = _best(dist.ties_table, 1)
                    t_loc, z_loc = _best(lambda: loc.matmat(v), a.repeat)
                    dist.matmat(v)          # warm the workers' store handles
                    b0 = _outgoing(client)
                    t_dist, z_dist = _best(lambda: dist.matmat(v), a.repeat)
                    moved = (_outgoing(client) - b0) / a.repeat
                finally:
                    _split_groups.TIE_CACHE_ENTRIES = old
                diff = np.abs(z_dist - z_loc).max() / np.abs(z_loc).max()
                rows.append((label, t_loc, t_dist, t_lt, t_dt, moved, diff))
            result_bytes = _serialized_bytes(np.zeros((a.features, 1)))
        print("\none product (XᵀLX + λI) v, seconds (min of %d)" % a.repeat)
        print(f"  {'':<36s} {'local':>8s} {'distrib.':>9s} {'ratio d/l':>9s} {'table l/d':>13s} "
              f"{'w->w MiB/product':>17s} {'max rel diff':>12s}")
        for label, tl, td, ttl, ttd, moved, diff in rows:
            tab = f"{ttl:5.2f}/{ttd:5.2f}" if "exclude" in label else "-"
            print(f"  {label:<36s} {tl:8.3f} {td:9.3f} {td / tl:9.2f} {tab:>13s} {moved / 2**20:17.2f} {diff:12.1e}")
        print(f"reduced result sent to the client per product: ~{result_bytes / 2**20:.2f} MiB (n x k float64) "
              f"+ O(classes); data {data_bytes / 2**20:.1f} MiB")
        print(f"ratio distributed / local per product (ties=exclude, cached): {rows[1][2] / rows[1][1]:.2f}; "
              f"uncached: {rows[2][2] / rows[2][1]:.2f}  (cpus: {os.cpu_count()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

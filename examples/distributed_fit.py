"""A fit on a dask cluster equals the local fit: two worker processes each read their own blocks of the store and
sum statistics; the client only solves.  Point ``client=`` at your scheduler instead of the LocalCluster.

    python examples/distributed_fit.py [WORKDIR]
"""
import sys
import tempfile
from pathlib import Path

import numpy as np
from dask.distributed import Client, LocalCluster

import streamrank as sr
from streamrank.datasets.synthetic import make_letor_like


def main(workdir):
    X, y, qid = make_letor_like(n_rows=8_000, n_features=15, random_state=2)
    store = sr.GroupStore.create(Path(workdir) / "logs.zarr", n_features=15, overwrite=True)
    store.append(X, y, qid, batch_id="day-1")

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        remote = sr.distributed.fit(sr.RankRLS(alpha=1.0), store, client=client, max_rows=1_000)
    local = sr.RankRLS(alpha=1.0).fit(store)
    diff = float(np.max(np.abs(remote.coef_ - local.coef_)))
    print(f"cluster fit == local fit: max |coef difference| = {diff:.2e}")
    return diff


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as d:
            main(d)

"""One real LocalCluster per test module (module-scoped fixture)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    from streamrank.distributed import local_cluster

    # LocalCluster(n_workers=2, processes=True, threads_per_worker=1), MALLOC_TRIM_THRESHOLD_ left unset
    with local_cluster(2) as cluster, distributed.Client(cluster) as c:
        yield c

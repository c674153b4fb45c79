"""sample_weight through the cluster (issue 23): a weighted source's statistics summed on real workers."""
from __future__ import annotations

import numpy as np

import streamrank as sr
from streamrank import distributed as srd
from streamrank.io.weighted import with_weights


def test_distributed_weighted_fit_and_folds_equal_local(client):
    rng = np.random.default_rng(5)
    sizes = rng.integers(2, 9, size=30)
    X = rng.normal(size=(int(sizes.sum()), 5))
    y = rng.integers(0, 3, size=len(X)).astype(float)
    qid = np.repeat(np.arange(30), sizes)
    w = rng.uniform(0.0, 2.0, size=len(X))
    src = with_weights(sr.as_source(X, y, qid), w)
    for ties in ("include", "exclude"):
        local = sr.RankRLS(alpha=0.5, solver="primal", ties=ties).fit(X, y, qid, sample_weight=w)
        dist = srd.fit(sr.RankRLS(alpha=0.5, solver="primal", ties=ties), src, client, max_rows=20,
                       split_every=2)
        np.testing.assert_allclose(dist.coef_, local.coef_, rtol=1e-10, atol=1e-12)
        unweighted = sr.RankRLS(alpha=0.5, solver="primal", ties=ties).fit(X, y, qid)
        assert not np.allclose(dist.coef_, unweighted.coef_, rtol=1e-3)   # the weights did reach the workers
    folds = srd.statistics(sr.RankRLS(solver="primal"), src, client, max_rows=20, folds=3)
    from streamrank.rankrls.selection import accumulate_folds

    ref = accumulate_folds(sr.RankRLS(solver="primal"), src, 3, 20)
    for a, b in zip(folds, ref):
        np.testing.assert_allclose(a.G, b.G, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(a.B, b.B, rtol=1e-10, atol=1e-10)

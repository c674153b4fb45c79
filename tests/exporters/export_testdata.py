"""Shared by the export tests: feature names of the MQ2008 slice and the serving comparison."""
from __future__ import annotations

import numpy as np

NAMES = [f"mq_f{j + 1}" for j in range(46)]


def assert_serves_like_predict(served, predicted, qid, rtol=1e-5):
    """Scores equal to ``rtol`` of the largest score, and every query ranked the same.

    Ranking: every pair of one query whose predicted scores differ by more
    than the tolerance is ordered the same way by the served scores.
    """
    served = np.asarray(served, dtype=np.float64).ravel()
    predicted = np.asarray(predicted, dtype=np.float64).ravel()
    tol = rtol * max(float(np.abs(predicted).max()), 1e-30)
    err = np.abs(served - predicted).max()
    assert err <= tol, f"max |served - predict| = {err:.3g} > {tol:.3g}"
    for g in np.unique(qid):
        i = np.flatnonzero(qid == g)
        dp = predicted[i][:, None] - predicted[i][None, :]
        ds = served[i][:, None] - served[i][None, :]
        clear = np.abs(dp) > 2 * tol
        assert (np.sign(ds[clear]) == np.sign(dp[clear])).all(), f"query {g} is ranked differently"

"""cg's held-out loss has one formula for the pieces of split groups, weighted or not (w ≡ 1 unweighted).

The unweighted case must stay bit for bit what it was: there ``wR`` is ``R`` itself and ``W_g`` the integer
n_g, so every product and sum is the one the unweighted branch computed.  Checked here as: unit row weights
(W_g = Σ 1.0 = n_g exactly, 1.0 · r = r exactly) give exactly the unweighted loss, on pieces, for every
group weighting and both tie rules — and both equal the dense rᵀLr (to rounding) so the test can fail.
"""
from __future__ import annotations

import numpy as np
import pytest

import streamrank as sr
from streamrank.io.weighted import with_weights
from streamrank.rankrls.cg import validation_loss


def _dense_loss(R, y, qid, gw, ties):
    tot = 0.0
    for q in np.unique(qid):
        rows = np.flatnonzero(qid == q)
        n_g = len(rows)
        s = {"pair": 1.0, "query": 2.0 / max(n_g * (n_g - 1), 1), "size": 1.0 / n_g}[gw]
        for a in range(n_g):
            for b in range(a + 1, n_g):
                i, j = rows[a], rows[b]
                if ties == "exclude" and y[i] == y[j]:
                    continue
                tot += s * (R[i] - R[j]) ** 2
    return tot


@pytest.mark.parametrize("ties", ["include", "exclude"])
@pytest.mark.parametrize("gw", ["pair", "query", "size"])
def test_unit_weights_give_the_unweighted_loss_bit_for_bit(gw, ties):
    rng = np.random.default_rng(4)
    sizes = [31, 4, 19, 2, 45]
    m = sum(sizes)
    X = rng.normal(size=(m, 3))
    y = rng.integers(0, 3, size=m).astype(float)
    qid = np.repeat(np.arange(len(sizes)), sizes)
    W = rng.normal(size=(3, 2))
    plain = sr.as_source(X, y, qid)
    ones = with_weights(sr.as_source(X, y, qid), np.ones(m))
    for max_rows in (5, 8, 13, 100):                 # groups cut into pieces (and, at 100, whole)
        a = validation_loss(plain, W, group_weight=gw, ties=ties, max_rows=max_rows)
        b = validation_loss(ones, W, group_weight=gw, ties=ties, max_rows=max_rows)
        np.testing.assert_array_equal(a, b)
        for j in range(W.shape[1]):
            np.testing.assert_allclose(a[j], _dense_loss(y - X @ W[:, j], y, qid, gw, ties), rtol=1e-10)

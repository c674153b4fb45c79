"""``average_pairwise``: the client-side average of data-parallel PairwiseSGDRanker shards."""
from __future__ import annotations

import numpy as np

import streamrank as sr
from streamrank.distributed._sgd import average_pairwise


def _shard(seed, X, y, qid, **kw):
    m = sr.PairwiseSGDRanker(eta0=0.5, l1=1e-2, l2=1e-3, random_state=seed, **kw)
    return m.partial_fit(X, y, qid)


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(120, 6))
    return X, X[:, 0] - X[:, 1] + 0.1 * rng.normal(size=120), np.repeat(np.arange(12), 10)


def test_one_shard_is_the_model_itself():
    m = _shard(0, *_data())
    a = average_pairwise([m])
    np.testing.assert_allclose(a.coef_, m.coef_, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(a._q, m._q)
    assert a.t_ == m.t_


def test_weights_and_received_penalty_are_averaged_clock_is_the_latest():
    X, y, qid = _data()
    a, b = _shard(0, X, y, qid), _shard(1, X, y, qid)
    b.partial_fit(X[:20], y[:20], qid[:20])            # b moved further
    avg = average_pairwise([a, b])
    np.testing.assert_allclose(avg.coef_, (a.coef_ + b.coef_) / 2, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(avg._q, (a._q + b._q) / 2, rtol=1e-12, atol=1e-15)
    assert avg.t_ == max(a.t_, b.t_) > a.t_
    np.testing.assert_array_equal(avg._fstate[1:], b._fstate[1:])  # u and the window sum of the latest clock
    c = avg.partial_fit(X, y, qid)                       # the average keeps learning
    assert np.isfinite(c.coef_).all()

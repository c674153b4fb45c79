"""Weighted NDCG and disagreement (``sample_weight``): kernels against brute force, edge cases, streaming."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import metrics_reference as ref
import streamrank as sr
from streamrank import metrics as M
from streamrank.io.weighted import with_weights
from streamrank.metrics import RankingEvaluator
from streamrank.metrics import _kernels as K


def _ro(a, dtype=np.float64):
    a = np.array(a, dtype=dtype)
    a.setflags(write=False)
    return a


def _f64(a):
    return np.require(a, dtype=np.float64, requirements=["C", "W"])


def _draw(sizes, rng, levels=3, score_levels=4, zero_frac=0.2):
    sizes = np.asarray(sizes, dtype=np.int64)
    m = int(sizes.sum())
    y = rng.integers(0, levels, m).astype(np.float64)
    s = rng.integers(0, score_levels, m).astype(np.float64)
    w = rng.exponential(size=m) * (rng.random(m) >= zero_frac)
    gp = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    return y, s, w, gp


def _kernels(y, s, w, gp, k):
    y, s, w, gp = _f64(y), _f64(s), _f64(w), np.require(gp, np.int64, ["C", "W"])
    g = len(gp) - 1
    nd = np.empty((g, 1))
    K.ndcg_groups(y, s, gp, y, gp, np.array([k], np.int64), True, nd, w=w)
    d, t, p, c = (np.empty(g) for _ in range(4))
    K.cindex_groups(y, s, gp, d, t, p, w=w, count=c)
    return nd[:, 0], d, t, p, c


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(0, 9), min_size=1, max_size=6), seed=st.integers(0, 2**32 - 1),
       k=st.integers(0, 6), levels=st.integers(1, 5), score_levels=st.integers(1, 10), f32=st.booleans())
def test_weighted_kernels_match_bruteforce(sizes, seed, k, levels, score_levels, f32):
    rng = np.random.default_rng(seed)
    y, s, w, gp = _draw(sizes, rng, levels, score_levels)
    dt = np.float32 if f32 else np.float64
    s, w = s.astype(dt), w.astype(dt)
    nd, d, t, p, c = _kernels(_ro(y), _ro(s, dt), _ro(w, dt), _ro(gp, np.int64), k)
    for g in range(len(gp) - 1):
        a, b = gp[g], gp[g + 1]
        yy, ss, ww = y[a:b], s[a:b].astype(np.float64), w[a:b].astype(np.float64)
        np.testing.assert_allclose(nd[g], ref.weighted_ndcg_expected(yy, ss, ww, None if k <= 0 else k),
                                   rtol=1e-12, equal_nan=True)
        wrong_d, total, count = ref.weighted_pairs(yy, ss, ww, tie=0.0)
        wrong_t = ref.weighted_pairs(yy, ss, ww, tie=1.0)[0] - wrong_d
        assert c[g] == count
        np.testing.assert_allclose([d[g], t[g], p[g]], [wrong_d, wrong_t, total], rtol=1e-12, atol=1e-12)


def test_weighted_ndcg_ties_equal_exhaustive_average():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(1, 7))
        y, s, w, gp = _draw([n], rng, 4, 3)
        for k in (1, 3, None):
            nd = _kernels(y, s, w, gp, 0 if k is None else k)[0]
            np.testing.assert_allclose(nd[0], ref.weighted_ndcg_bruteforce(y, s, w, k), rtol=1e-12,
                                       equal_nan=True)


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(0, 12), min_size=1, max_size=8), seed=st.integers(0, 2**32 - 1),
       k=st.integers(1, 8), levels=st.integers(1, 5), score_levels=st.integers(1, 10))
def test_weights_all_one_give_the_unweighted_values_exactly(sizes, seed, k, levels, score_levels):
    rng = np.random.default_rng(seed)
    y, s, _, gp = _draw(sizes, rng, levels, score_levels)
    qid = np.repeat(np.arange(len(gp) - 1), np.diff(gp))
    ones = np.ones(len(y))
    for fn, kw in ((M.ndcg, {"k": k}), (M.ndcg, {"k": None, "gain": "linear", "empty": "zero"}),
                   (M.disagreement, {}), (M.disagreement, {"ties": "error"})):
        a = fn(y, s, qid, return_details=True, **kw)
        b = fn(y, s, qid, return_details=True, sample_weight=ones, **kw)
        assert (a.value == b.value) or (np.isnan(a.value) and np.isnan(b.value))
        assert (a.n_queries, a.n_skipped) == (b.n_queries, b.n_skipped)
        np.testing.assert_array_equal(a.per_query, b.per_query)


def test_weighted_array_metrics_against_reference():
    rng = np.random.default_rng(4)
    y, s, w, gp = _draw(rng.integers(1, 9, 25), rng, 4, 6)
    qid = np.repeat(np.arange(len(gp) - 1) + 7, np.diff(gp))
    for tie, name in ((0.5, "half"), (1.0, "error")):
        assert M.disagreement(y, s, qid, ties=name, sample_weight=w) == pytest.approx(
            ref.weighted_disagreement(y, s, w, qid, tie), rel=1e-12)
    per = [ref.weighted_ndcg_expected(y[a:b], s[a:b], w[a:b], 5) for a, b in zip(gp[:-1], gp[1:])]
    assert M.ndcg(y, s, qid, k=5, sample_weight=w) == pytest.approx(np.nanmean(per), rel=1e-12)
    # a weight constant within a query cancels in NDCG; it counts c**2 in the disagreement's mean
    c = np.repeat(rng.uniform(0.5, 3, len(gp) - 1), np.diff(gp))
    assert M.ndcg(y, s, qid, k=5, sample_weight=c * w) == pytest.approx(M.ndcg(y, s, qid, k=5, sample_weight=w),
                                                                       rel=1e-12)
    assert M.disagreement(y, s, qid, sample_weight=c) == pytest.approx(
        ref.weighted_disagreement(y, s, c, qid), rel=1e-12)
    assert M.disagreement(y, s, qid, sample_weight=c) != pytest.approx(M.disagreement(y, s, qid), rel=1e-6)


def test_weighted_edge_cases():
    # an empty group, a one-row group, all-tied scores, a group whose weights are all zero
    y = np.array([1.0, 2, 0, 1, 2, 0, 1, 2, 0])
    s = np.array([0.5, 7, 7, 7, 1, 2, 3, 5, 4])
    w = np.array([2.0, 1, 3, 0.5, 0, 0, 0, 1, 1])
    gp = np.array([0, 0, 1, 4, 7, 9])
    nd, d, t, p, c = _kernels(_ro(y), _ro(s), _ro(w), _ro(gp, np.int64), 10)
    assert np.isnan(nd[0]) and (p[0], c[0]) == (0, 0)                 # empty group
    assert nd[1] == 1.0 and (p[1], c[1]) == (0, 0)                    # one row
    assert d[2] == 0 and t[2] == pytest.approx(1 * 3 + 0.5 * 3 + 0.5 * 1) and t[2] == p[2]   # all tied
    assert np.isnan(nd[3]) and p[3] == 0 and c[3] == 3                # all weights 0: no weighted pair
    assert nd[4] == 1.0 and p[4] == 1 and d[4] == 0                   # the zero-weight rows carry nothing
    qid = np.repeat(np.arange(5), np.diff(gp))
    res = M.disagreement(y, s, qid, sample_weight=w, return_details=True)
    assert np.isnan(res.by_qid().get(3, np.nan)) and np.isnan(res.per_query[2]) and res.n_queries == 2
    # query 2: value 1/2 (all tied), mean pair weight 5/3; query 4: value 0, mean pair weight 1
    assert res.value == pytest.approx((0.5 * 5 / 3) / (5 / 3 + 1)) == ref.weighted_disagreement(y, s, w, qid)
    # a relevant row of weight 0 is not relevant for empty=
    r = M.ndcg([1.0, 0.0], [1.0, 0.0], sample_weight=[0.0, 1.0], empty="zero", return_details=True)
    assert r.value == 0.0 and r.n_queries == 1
    assert np.isnan(M.ndcg([1.0, 0.0], [1.0, 0.0], sample_weight=[0.0, 1.0]))
    # no rows at all
    assert np.isnan(M.disagreement(np.zeros(0), np.zeros(0), sample_weight=np.zeros(0)))


def test_float32_and_read_only_weights_at_the_api():
    rng = np.random.default_rng(2)
    y, s, w, gp = _draw([6, 9, 4], rng, 4, 5)
    qid = np.repeat([1, 2, 3], [6, 9, 4])
    w32 = w.astype(np.float32)
    exact = M.ndcg(y, s, qid, sample_weight=w32.astype(np.float64))
    assert M.ndcg(_ro(y), _ro(s), qid, sample_weight=_ro(w32, np.float32)) == exact
    assert M.disagreement(y, s, qid, sample_weight=_ro(w32, np.float32)) == M.disagreement(
        y, s, qid, sample_weight=w32.astype(np.float64))


@pytest.mark.parametrize("bad, match", [
    (np.array([1.0, -0.5, 1.0]), r"sample_weight\[1\] = -0.5: weights must be finite and >= 0"),
    (np.array([1.0, 1.0, np.nan]), r"sample_weight\[2\] = nan"),
    (np.array([1.0, np.inf, 1.0]), r"sample_weight\[1\] = inf"),
    (np.array([1.0, 1.0]), r"sample_weight has 2 rows but y_true has 3"),
    (np.ones((3, 2)), r"sample_weight must be 1-D"),
])
def test_bad_weights_are_named(bad, match):
    for fn in (M.ndcg, M.disagreement):
        with pytest.raises(ValueError, match=match):
            fn([2.0, 1.0, 0.0], [0.3, 0.2, 0.1], sample_weight=bad)


def test_weighted_evaluator_api_errors():
    with pytest.raises(ValueError, match="map has no weighted form"):
        RankingEvaluator(10, "ndcg,map", weighted=True)
    with pytest.raises(ValueError, match="qrels"):
        RankingEvaluator(10, "ndcg", weighted=True, qrels={1: {"a": 1}})
    with pytest.raises(ValueError, match="pass weight"):
        RankingEvaluator(10, "ndcg", weighted=True).update([1.0, 0.0], [0.0, 1.0])
    with pytest.raises(ValueError, match=r"weight\[0\] = -1.0"):
        RankingEvaluator(10, "ndcg", weighted=True).update([1.0, 0.0], [0.0, 1.0], weight=[-1.0, 1.0])
    with pytest.raises(ValueError, match="weighted=True"):
        RankingEvaluator(10, "ndcg").update([1.0, 0.0], [0.0, 1.0], weight=[1.0, 1.0])
    with pytest.raises(ValueError, match="same metrics and options"):
        RankingEvaluator(10, "ndcg", weighted=True).merge(RankingEvaluator(10, "ndcg"))
    src = sr.as_source(np.eye(3), [1.0, 0.0, 2.0], [1, 1, 1])
    with pytest.raises(ValueError, match="block.weight is None"):
        M.evaluate(src, lambda X: X[:, 0], metrics="ndcg", weighted=True)


class _Lin:
    def __init__(self, w):
        self.w = w

    def predict(self, X):
        return X @ self.w


def _weighted_problem(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 12, 25)
    m = int(sizes.sum())
    X = np.round(rng.normal(size=(m, 3)), 1)
    y = np.clip(np.round(X @ [1.0, -0.5, 0.3] + rng.normal(size=m)), 0, 3)
    w = rng.exponential(size=m) * (rng.random(m) > 0.15)
    qid = np.repeat(np.arange(25) + 50, sizes)
    return X, y, w, qid, _Lin(rng.normal(size=3))


@settings(max_examples=25, deadline=None)
@given(max_rows=st.integers(1, 50), shuffle=st.booleans(), seed=st.integers(0, 200), split=st.integers(0, 3))
def test_weighted_evaluator_over_any_block_cutting_equals_the_array_functions(max_rows, shuffle, seed, split):
    X, y, w, qid, model = _weighted_problem(seed)
    s = model.predict(X)
    src = with_weights(sr.as_source(X, y, qid), w)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        blocks = list(src.blocks(max_rows=max_rows, shuffle=shuffle, random_state=seed, split_groups=True))
    # the blocks dealt to split + 1 evaluators (as dask workers would), then merged
    evs = [RankingEvaluator(4, ("ndcg", "disagreement"), weighted=True, keep_per_query=True)
           for _ in range(split + 1)]
    for i, b in enumerate(blocks):
        evs[i % len(evs)].update_block(b, model.predict(b.X))
    ev = evs[0]
    for other in evs[1:]:
        ev.merge(other)
    res = ev.result()
    nd = M.ndcg(y, s, qid, k=4, sample_weight=w, return_details=True)
    dis = M.disagreement(y, s, qid, sample_weight=w, return_details=True)
    assert res["ndcg@4"].value == pytest.approx(nd.value, rel=1e-12)
    assert res["disagreement"].value == pytest.approx(dis.value, rel=1e-12)
    assert (res["ndcg@4"].n_queries, res["disagreement"].n_skipped) == (nd.n_queries, dis.n_skipped)
    assert res["disagreement"].by_qid() == pytest.approx(dis.by_qid(), rel=1e-12)
    got = M.evaluate(blocks, model, k=4, metrics=("ndcg", "disagreement"), weighted=True)
    assert got["ndcg@4"].value == pytest.approx(nd.value, rel=1e-12)
    assert got["disagreement"].value == pytest.approx(dis.value, rel=1e-12)


def test_unweighted_evaluate_ignores_the_source_weights():
    X, y, w, qid, model = _weighted_problem(3)
    s = model.predict(X)
    src = with_weights(sr.as_source(X, y, qid), w)
    res = M.evaluate(src, model, k=5, metrics=("ndcg", "disagreement"), max_rows=30)
    assert res["ndcg@5"].value == pytest.approx(M.ndcg(y, s, qid, k=5), rel=1e-12)
    assert res["disagreement"].value == pytest.approx(M.disagreement(y, s, qid), rel=1e-12)
    weighted = M.evaluate(src, model, k=5, metrics=("ndcg", "disagreement"), max_rows=30, weighted=True)
    assert weighted["disagreement"].value != pytest.approx(res["disagreement"].value, rel=1e-6)

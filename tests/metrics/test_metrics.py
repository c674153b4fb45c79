"""Public metric functions: definitions, peers (scikit-learn), validation, streaming."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import metrics_reference as ref
import streamrank as sr
from streamrank.metrics import MetricResult, RankingEvaluator

M = sr.metrics


def _data(seed=0, n_groups=12, max_size=9, levels=3, score_levels=6):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, max_size + 1, n_groups)
    m = int(sizes.sum())
    y = rng.integers(0, levels, m).astype(float)
    s = rng.integers(0, score_levels, m).astype(float) + rng.normal(size=m) * (score_levels > 50)
    qid = np.repeat(rng.permutation(1000)[:n_groups] + 5, sizes)
    return y, s, qid


def test_ndcg_matches_reference_and_counts_skipped():
    y, s, qid = _data(1)
    per = ref.per_group(ref.ndcg_expected, y, s, qid, 5)
    res = M.ndcg(y, s, qid, k=5, return_details=True)
    assert isinstance(res, MetricResult)
    assert res.n_skipped == int(np.isnan(per).sum())
    assert res.n_queries == int((~np.isnan(per)).sum())
    assert res.value == pytest.approx(np.nanmean(per), rel=1e-12)
    np.testing.assert_allclose(M.ndcg(y, s, qid, k=5, per_query=True), per, rtol=1e-12)
    assert float(res) == M.ndcg(y, s, qid, k=5)


def test_ndcg_matches_sklearn_on_queries_with_relevant_items():
    from sklearn.metrics import ndcg_score

    y, s, qid = _data(2, score_levels=4)
    vals = M.ndcg(y, s, qid, k=3, per_query=True)
    starts = np.concatenate(([0], np.flatnonzero(qid[1:] != qid[:-1]) + 1, [len(qid)]))
    for g, (a, b) in enumerate(zip(starts[:-1], starts[1:])):
        if b - a < 2 or np.all(y[a:b] == 0):
            continue
        gains = 2.0 ** y[a:b] - 1.0  # sklearn uses y_true as the gain itself
        want = ndcg_score(gains[None], s[a:b][None], k=3, ignore_ties=False)
        assert vals[g] == pytest.approx(want, rel=1e-12)


def test_disagreement_and_map_match_references():
    y, s, qid = _data(3)
    d = ref.per_group(ref.disagreement_pairs, y, s, qid)
    assert M.disagreement(y, s, qid) == pytest.approx(np.nanmean(d), rel=1e-12)
    np.testing.assert_allclose(M.disagreement(y, s, qid, per_query=True), d, rtol=1e-12)
    d1 = ref.per_group(ref.disagreement_pairs, y, s, qid, 1.0)
    assert M.disagreement(y, s, qid, ties="error") == pytest.approx(np.nanmean(d1), rel=1e-12)
    src = sr.as_source(np.zeros((len(y), 1)), y, qid)
    got = M.evaluate(src, lambda X: s, metrics=["disagreement"], disagreement_ties="error")["disagreement"]
    assert got.value == pytest.approx(np.nanmean(d1), rel=1e-12)
    with pytest.raises(ValueError, match="ties must be"):
        M.disagreement(y, s, qid, ties="full")
    a = ref.per_group(ref.average_precision_expected, y, s, qid)
    r = M.mean_average_precision(y, s, qid, return_details=True)
    assert r.value == pytest.approx(np.nanmean(a), rel=1e-12)
    assert r.n_skipped == int(np.isnan(a).sum())


def test_map_matches_sklearn_average_precision():
    """Without tied scores AP is scikit-learn's; with ties scikit-learn lets tied items enter together
    (step-wise), streamrank takes the expected value over their orders (issue 21)."""
    from sklearn.metrics import average_precision_score

    rng = np.random.default_rng(4)
    y = rng.integers(0, 3, 200)
    s = rng.permutation(200).astype(float)
    assert M.mean_average_precision(y, s) == pytest.approx(average_precision_score(y > 0, s), rel=1e-12)
    s = rng.integers(0, 20, 200).astype(float)
    assert M.mean_average_precision(y, s) == pytest.approx(ref.average_precision_expected(y, s), rel=1e-12)
    assert abs(M.mean_average_precision(y, s) - average_precision_score(y > 0, s)) > 1e-4


def test_auc_matches_sklearn_and_pairs():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(5)
    y = rng.integers(0, 2, 300)
    s = rng.integers(0, 30, 300).astype(np.float32)
    assert M.auc(y, s) == pytest.approx(roc_auc_score(y, s), rel=1e-12)
    assert M.auc(y, s) == pytest.approx(ref.auc_pairs(y, s), rel=1e-12)
    assert M.auc(y, s) == pytest.approx(1 - M.disagreement(y, s), rel=1e-12)
    Y = rng.integers(0, 2, (300, 3))
    S = rng.normal(size=(300, 3))
    np.testing.assert_allclose(M.auc(Y, S), [roc_auc_score(Y[:, j], S[:, j]) for j in range(3)], rtol=1e-12)
    with pytest.raises(ValueError, match="both positive"):
        M.auc(np.ones(4), np.arange(4.0))


def test_tuple_error():
    assert M.tuple_error([1.0, 2.0, 3.0, 1.0], [0.0, 2.0, 4.0, 0.5]) == 0.5
    assert np.isnan(M.tuple_error([], []))
    with pytest.raises(ValueError, match="score_neg has 1 rows but score_pos has 2"):
        M.tuple_error([1.0, 2.0], [1.0])


def test_global_group_and_empty_input():
    y = np.array([0.0, 1, 2, 0])
    s = np.array([0.1, 0.5, 0.9, 0.2])
    assert M.ndcg(y, s) == 1.0 and M.disagreement(y, s) == 0.0
    res = M.ndcg(np.zeros(0), np.zeros(0), return_details=True)
    assert np.isnan(res.value) and res.n_queries == 0
    assert np.isnan(M.disagreement(np.ones(3), np.arange(3.0)))   # all labels tied: no pair
    assert M.disagreement(y, np.ones(4)) == 0.5                   # all scores tied


def test_read_only_and_float32_inputs():
    y, s, qid = _data(6)
    want = M.ndcg(y, s, qid)
    for a in (y, s, qid):
        a.setflags(write=False)
    assert M.ndcg(y, s.astype(np.float32), qid) == pytest.approx(want, rel=1e-12)
    assert M.ndcg(y, s, qid) == want


@pytest.mark.parametrize("fn", [M.ndcg, M.disagreement, M.mean_average_precision])
def test_validation_errors(fn):
    y, s, qid = np.array([1.0, 0, 2]), np.array([0.1, 0.2, 0.3]), np.array([1, 1, 2])
    with pytest.raises(ValueError, match="y_score has 2 rows but y_true has 3"):
        fn(y, s[:2], qid)
    with pytest.raises(ValueError, match="y_score contains NaN or infinity at row 1"):
        fn(y, np.array([0.1, np.nan, 0.3]), qid)
    with pytest.raises(ValueError, match="y_true contains NaN"):
        fn(np.array([1.0, np.inf, 0]), s, qid)
    with pytest.raises(ValueError, match="qid is not contiguous"):
        fn(y, s, np.array([1, 2, 1]))
    with pytest.raises(ValueError, match="qid has 2 rows"):
        fn(y, s, np.array([1, 2]))
    with pytest.raises(ValueError, match="must be 1-D"):
        fn(np.ones((3, 2)), s, qid)
    with pytest.raises(TypeError, match="dtype"):
        fn(np.array(["a", "b", "c"]), s, qid)


def test_bad_k():
    with pytest.raises(ValueError, match="k must be"):
        M.ndcg([1.0], [1.0], k=0)
    assert M.ndcg([1.0, 0], [0.0, 1.0], k=None) == pytest.approx(1 / np.log2(3))


# ------------------------------------------------------------------ streaming
class _Lin:
    def __init__(self, w):
        self.w = w

    def predict(self, X):
        return X @ self.w


def _problem(seed=0, sparse=False):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 12, 30)
    m = int(sizes.sum())
    X = rng.normal(size=(m, 4))
    X[rng.random(X.shape) < 0.5] = 0.0
    w = rng.normal(size=4)
    y = np.clip(np.round(X @ w + rng.normal(size=m)), 0, 4)
    qid = np.repeat(np.arange(30) + 100, sizes)
    return (sp.csr_matrix(X) if sparse else X), y, qid, _Lin(w)


@settings(max_examples=25, deadline=None)
@given(max_rows=st.integers(1, 60), shuffle=st.booleans(), seed=st.integers(0, 100), sparse=st.booleans())
def test_streaming_equals_in_memory(max_rows, shuffle, seed, sparse):
    X, y, qid, model = _problem(seed, sparse)
    s = model.predict(X)
    src = sr.as_source(X, y, qid)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        blocks = list(src.blocks(max_rows=max_rows, shuffle=shuffle, random_state=seed))
    res = M.evaluate(blocks, model, k=5)
    assert res["ndcg@5"].value == pytest.approx(M.ndcg(y, s, qid, k=5), rel=1e-12)
    assert res["disagreement"].value == pytest.approx(M.disagreement(y, s, qid), rel=1e-12)
    assert res["map"].value == pytest.approx(M.mean_average_precision(y, s, qid), rel=1e-12)
    assert res["ndcg@5"].n_skipped == M.ndcg(y, s, qid, k=5, return_details=True).n_skipped
    assert M.evaluate(blocks, model, k=5, metrics=["ndcg"])["ndcg@5"].value == pytest.approx(
        M.ndcg(y, s, qid, k=5), rel=1e-12)
    with pytest.raises(TypeError, match="metrics.evaluate"):
        M.ndcg(blocks, model, k=5)


@settings(max_examples=15, deadline=None)
@given(max_rows=st.integers(1, 40), shuffle=st.booleans(), seed=st.integers(0, 100))
def test_split_global_group_equals_in_memory(max_rows, shuffle, seed):
    X, y, _, model = _problem(seed)
    s = model.predict(X)
    src = sr.as_source(X, y, None)
    ev = RankingEvaluator(k=10)
    for b in src.blocks(max_rows=max_rows, shuffle=shuffle, random_state=seed, split_groups=True):
        ev.update_block(b, model.predict(b.X))
    res = ev.result()
    assert res["disagreement"].value == pytest.approx(M.disagreement(y, s), rel=1e-12)
    assert res["ndcg@10"].value == pytest.approx(M.ndcg(y, s), rel=1e-12)


def test_source_form_and_merge_and_per_query():
    X, y, qid, model = _problem(9)
    s = model.predict(X)
    src = sr.as_source(X, y, qid)
    assert M.evaluate(src, model, metrics="disagreement", max_rows=17)["disagreement"].value == pytest.approx(
        M.disagreement(y, s, qid), rel=1e-12)
    assert M.evaluate(src, lambda X: X @ model.w, k=3, metrics=["ndcg"])["ndcg@3"].value == pytest.approx(
        M.ndcg(y, s, qid, k=3), rel=1e-12)
    det = M.evaluate(src, model, metrics="ndcg@10", keep_per_query=True, max_rows=12)["ndcg@10"]
    np.testing.assert_allclose(det.per_query, M.ndcg(y, s, qid, per_query=True), rtol=1e-12)
    np.testing.assert_array_equal(det.qid, np.unique(qid))
    a, b = RankingEvaluator(), RankingEvaluator()
    blocks = list(src.blocks(max_rows=20))
    for i, blk in enumerate(blocks):
        (a if i % 2 else b).update_block(blk, model.predict(blk.X))
    res = a.merge(b).result()
    assert res["map"].value == pytest.approx(M.mean_average_precision(y, s, qid), rel=1e-12)
    got = M.evaluate(sr.as_source(X, (y > 1).astype(float)), model, metrics=["auc"])["auc"].value
    assert got == pytest.approx(M.auc(y > 1, s), rel=1e-12)
    with pytest.raises(TypeError, match="takes arrays"):
        M.ndcg(src, model, qid)


def test_incomplete_split_group_is_an_error_and_merge_completes_it():
    ev = RankingEvaluator()
    ev.update([1.0, 0.0], [0.5, 0.1], [0, 2], qid=[7], group_size=[5], group_offset=[0])
    with pytest.raises(ValueError, match="group 7 is incomplete: 2 of 5"):
        ev.result()
    other = RankingEvaluator().update([2.0, 0.0, 1.0], [0.9, 0.0, 0.3], [0, 3], qid=[7], group_size=[5],
                                      group_offset=[2])
    res = ev.merge(other).result()
    want = M.disagreement([1.0, 0.0, 2.0, 0.0, 1.0], [0.5, 0.1, 0.9, 0.0, 0.3])
    assert res["disagreement"].value == pytest.approx(want) and ev.n_rows == 5
    with pytest.raises(ValueError, match="one entry per group"):
        RankingEvaluator().update([1.0, 0.0], [0.5, 0.1], [0, 2], qid=[7], group_size=[5, 1])


def test_tuple_error_streams_a_tuple_source():
    from streamrank.io.tuples import as_tuple_source

    rng = np.random.default_rng(0)
    Q = sp.random(30, 6, density=0.5, random_state=1, format="csr")
    D = sp.random(40, 6, density=0.5, random_state=2, format="csr")
    t = np.stack([rng.integers(0, 30, 500), rng.integers(0, 40, 500), rng.integers(0, 40, 500)], axis=1)
    W = rng.normal(size=(6, 6))

    def score(Qb, Db):
        return np.asarray((Qb @ W) * Db.toarray()).sum(axis=1)

    want = M.tuple_error(score(Q[t[:, 0]], D[t[:, 1]]), score(Q[t[:, 0]], D[t[:, 2]]))
    assert M.evaluate_tuples(as_tuple_source(Q, D, t), score, batch_size=64) == pytest.approx(want)
    with pytest.raises(TypeError, match="evaluate"):
        M.tuple_error(as_tuple_source(Q, D, t), score)


def test_class_retrieval_map_matches_per_query_reference():
    rng = np.random.default_rng(1)
    Q, D = rng.normal(size=(13, 4)), rng.normal(size=(50, 4))
    yq, yd = rng.integers(0, 3, 13), rng.integers(0, 3, 50)
    S = Q @ D.T
    want = np.mean([ref.average_precision_expected((yd == yq[i]).astype(float), S[i]) for i in range(13)])
    got = M.class_retrieval_map(lambda Qb, D_: Qb @ D_.T, Q, yq, D, yd, batch_size=5, return_details=True)
    assert got.value == pytest.approx(want, rel=1e-12) and got.n_queries == 13
    with pytest.raises(ValueError, match="y_q has 3 rows"):
        M.class_retrieval_map(lambda a, b: a @ b.T, Q, yq[:3], D, yd)

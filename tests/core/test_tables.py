"""Tables in, by name (issue 18): DataFrames / Arrow tables as X, feature names, string qids."""
import numpy as np
import pytest

import streamrank as sr
from _lazy_modules import LazyModule, needs

pd = LazyModule("pandas")           # imported by the first test that uses it, not at collection
pa = LazyModule("pyarrow")
pytestmark = needs("pandas", "pyarrow")


def _data(seed=0, m=60, n=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, n))
    y = rng.integers(0, 3, size=m).astype(float)
    qid = np.repeat(np.arange(m // 6), 6)
    return X, y, qid


def _frame(X, y, qid, *, qid_strings=True):
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    df["label"] = y
    df["qid"] = [f"q-{q:03d}" for q in qid] if qid_strings else qid
    return df


LEARNERS = [
    lambda: sr.RankRLS(alpha=0.5),
    lambda: sr.RankRLS(alpha=0.5, solver="cg", tol=1e-12),
    lambda: sr.KernelRankRLS(alpha=0.5, kernel="rbf", gamma=0.1),
    lambda: sr.PairwiseSGDRanker(random_state=0),
]


@pytest.mark.parametrize("make", LEARNERS)
@pytest.mark.parametrize("kind", ["pandas", "arrow"])
def test_fit_table_equals_fit_arrays_and_names(make, kind):
    X, y, qid = _data()
    df = _frame(X, y, qid)
    table = df if kind == "pandas" else pa.Table.from_pandas(df, preserve_index=False)
    m_tab = make().fit(table, "label", qid="qid")
    m_arr = make().fit(X, y, qid=qid)
    assert list(m_tab.feature_names_in_) == ["f0", "f1", "f2", "f3"]
    assert m_tab.n_features_in_ == 4
    np.testing.assert_allclose(m_tab.predict(X), m_arr.predict(X), rtol=1e-10, atol=1e-12)
    # predict on a table with the columns in another order: reordered by name
    shuffled = df[["f2", "f0", "f3", "f1"]]
    np.testing.assert_allclose(m_tab.predict(shuffled), m_arr.predict(X), rtol=1e-10, atol=1e-12)
    arrow_shuffled = pa.Table.from_pandas(shuffled, preserve_index=False)
    np.testing.assert_allclose(m_tab.predict(arrow_shuffled), m_arr.predict(X), rtol=1e-10, atol=1e-12)


def test_series_and_arrays_for_y_and_qid():
    X, y, qid = _data(1)
    df = _frame(X, y, qid)
    feats = df[["f0", "f1", "f2", "f3"]]
    a = sr.RankRLS(alpha=1.0).fit(feats, df["label"], qid=df["qid"])
    b = sr.RankRLS(alpha=1.0).fit(feats, y, qid=qid)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-12)
    assert list(a.feature_names_in_) == ["f0", "f1", "f2", "f3"]


def test_missing_or_extra_column_at_predict_is_a_clear_error():
    X, y, qid = _data(2)
    df = _frame(X, y, qid)
    model = sr.RankRLS(alpha=1.0).fit(df, "label", qid="qid")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['f3'\]"):
        model.predict(df[["f0", "f1", "f2"]])
    extra = df[["f0", "f1", "f2", "f3"]].assign(f9=1.0)
    with pytest.raises(ValueError, match=r"unexpected column\(s\) \['f9'\]"):
        model.predict(extra)


@pytest.mark.parametrize("col", ["qid", "query_id", "group", "QID"])
def test_qid_column_without_qid_argument_raises(col):
    """The footgun of issue 18: a qid column must never train as a feature."""
    X, y, qid = _data(3)
    df = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    df[col] = qid
    for make in LEARNERS:
        with pytest.raises(ValueError, match=f"column named '{col}' but qid= was not given.*qid='{col}'"):
            make().fit(df, y)
    with pytest.raises(ValueError, match="qid= was not given"):
        sr.RankRLS().partial_fit(pa.Table.from_pandas(df, preserve_index=False), y)


def test_partial_fit_table_reorders_to_fitted_names():
    X, y, qid = _data(4)
    df = _frame(X, y, qid)
    a = sr.RankRLS(alpha=1.0)
    a.partial_fit(df.iloc[:30], "label", qid="qid")
    a.partial_fit(df.iloc[30:][["label", "f3", "qid", "f1", "f0", "f2"]], "label", qid="qid")
    b = sr.RankRLS(alpha=1.0).fit(X, y, qid)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-10)
    with pytest.raises(ValueError, match="missing"):
        a.partial_fit(df.iloc[30:].drop(columns="f1"), "label", qid="qid")


def test_non_numeric_and_null_feature_columns_are_named():
    X, y, qid = _data(5)
    df = _frame(X, y, qid)
    df["city"] = "x"
    with pytest.raises(TypeError, match="X column 'city'"):
        sr.RankRLS().fit(df, "label", qid="qid")
    t = pa.table({"f0": pa.array([1.0, None, 2.0]), "label": [1.0, 0.0, 1.0], "qid": ["a", "a", "a"]})
    with pytest.raises(ValueError, match="X column 'f0' is null at row 1"):
        sr.RankRLS().fit(t, "label", qid="qid")
    with pytest.raises(KeyError, match="qid='query' is not a column"):
        sr.RankRLS().fit(df, "label", qid="query")


def test_string_qids_equal_integer_qids_everywhere():
    X, y, qid = _data(6)
    sq = np.array([f"q{q}" for q in qid], dtype=object)
    a = sr.RankRLS(alpha=1.0).fit(X, y, sq)
    b = sr.RankRLS(alpha=1.0).fit(X, y, qid)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-12)
    # cross-validation folds of string ids: splitmix of the BLAKE2b key (same in every process)
    import hashlib

    from streamrank._qid import qid_keys
    from streamrank.rankrls.selection import fold_of

    key = int.from_bytes(hashlib.blake2b(b"q7", digest_size=8).digest(), "little", signed=True)
    assert qid_keys(np.array(["q7"], dtype=object))[0] == key
    np.testing.assert_array_equal(fold_of(["q7"], 5), fold_of([key], 5))
    sr.RankRLS().cross_validate(sr.as_source(X, y, sq), alphas=[0.1, 1.0], folds=3)
    with pytest.raises(ValueError, match="'q0' appears at row 0 and again at row 60"):
        sr.as_source(np.vstack([X, X[:6]]), np.concatenate([y, y[:6]]), np.concatenate([sq, sq[:6]]))
    with pytest.raises(ValueError, match="missing at row 2"):
        sr.as_source(X[:3], y[:3], ["a", "a", None])


def test_metrics_per_query_keyed_by_original_string_id():
    y = np.array([2.0, 1.0, 0.0, 0.0, 1.0, 3.0])
    s = np.array([3.0, 2.0, 1.0, 1.0, 2.0, 3.0])
    qid = pd.Series(["alpha", "alpha", "alpha", "beta", "beta", "beta"])
    res = sr.metrics.ndcg(y, s, qid, k=10, return_details=True)
    ref = sr.metrics.ndcg(y, s, [1, 1, 1, 2, 2, 2], k=10, return_details=True)
    assert list(res.qid) == ["alpha", "beta"]
    np.testing.assert_allclose(res.per_query, ref.per_query)

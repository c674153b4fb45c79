"""GroupStore row columns ``weight`` / ``click`` / ``position`` (streamrank.io.row_columns) and the sources
reading them (``with_weights(store, "weight")``, ``ips_weighted(store, p)``; streamrank.io.weighted).

Real zarr stores on disk (and on a real S3 server on loopback); every fit from a store is compared with the
in-memory weighted fit of the same rows and, for IPS, with the explicit (clicked, unclicked) edge list.
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import streamrank as sr
from streamrank.clicks import ips_edges, ips_weights
from streamrank.io.row_columns import column_check
from streamrank.io.schema import StoreFormatError
from streamrank.io.sources import as_source
from streamrank.io.weighted import ColumnWeightedSource, IPSWeightedSource, ips_weighted, with_weights

COLS = ("weight", "click", "position")


def _log(n_groups=30, seed=0, n_features=4):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 9, size=n_groups)
    n = int(sizes.sum())
    X = rng.normal(size=(n, n_features)).astype(np.float32)
    y = rng.integers(0, 3, size=n).astype(np.float64)
    qid = np.repeat(np.arange(n_groups) + 100, sizes)
    pos = np.concatenate([np.arange(1, s + 1) for s in sizes]).astype(np.int64)
    click = (rng.random(n) < 0.35).astype(np.int64)
    w = rng.uniform(0.0, 3.0, size=n)
    w[rng.random(n) < 0.1] = 0.0
    return X, y, qid, w, click, pos


def _store(path, data, cuts=(0, 0.4, 1.0), chunk_rows=16, sparse=False, storage_options=None, cols=COLS):
    X, y, qid, w, click, pos = data
    store = sr.GroupStore.create(path, X.shape[1], chunk_rows=chunk_rows, row_columns=cols, sparse=sparse,
                                 storage_options=storage_options)
    gp = np.r_[0, np.flatnonzero(np.diff(qid)) + 1, len(qid)]
    bounds = [int(gp[int(round(c * (len(gp) - 1)))]) for c in cuts]
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        Xa = sp.csr_matrix(X[a:b]) if sparse else X[a:b]
        given_cols = {"weight": w[a:b], "click": click[a:b], "position": pos[a:b]}
        assert store.append(Xa, y[a:b], qid[a:b], batch_id=f"day-{i}", **{c: given_cols[c] for c in cols})
    return store


def test_columns_round_trip_are_verified_and_reopen(tmp_path):
    data = _log()
    X, y, qid, w, click, pos = data
    _store(tmp_path / "s.zarr", data, cuts=(0, 0.3, 0.3, 1.0))      # an empty middle batch too
    s = sr.GroupStore.open(tmp_path / "s.zarr")
    assert s.row_columns == COLS and s.n_rows == len(y)
    np.testing.assert_array_equal(s.read_column("weight"), w)
    np.testing.assert_array_equal(s.read_column("click"), click)
    np.testing.assert_array_equal(s.read_column("position", 5, 40), pos[5:40])
    assert s.read_column("click").dtype == np.uint8 and s.read_column("position").dtype == np.int32
    assert s.verify() == 3
    # appending again (a reopened handle) keeps every column in step with the rows
    a = sr.GroupStore.open(tmp_path / "s.zarr", mode="a")
    assert not a.append(X[:2], y[:2], [1, 1], batch_id="day-0", weight=[1, 1], click=[0, 1], position=[1, 2])
    assert a.append(X[:2], y[:2], [1, 1], batch_id="day-9", weight=[1, 2], click=[0, 1], position=[1, 2])
    s = sr.GroupStore.open(tmp_path / "s.zarr")
    np.testing.assert_array_equal(s.read_column("weight")[-3:], [w[-1], 1, 2])
    assert s.verify() == 4
    with pytest.raises(IndexError, match="outside"):
        s.read_column("weight", 0, s.n_rows + 1)


def test_a_store_without_columns_is_as_before(tmp_path):
    X, y, qid, w, click, pos = _log(5)
    s = sr.GroupStore.create(tmp_path / "s.zarr", X.shape[1])
    assert s.append(X, y, qid)
    assert s.row_columns == () and "row_columns" not in s._attrs
    with pytest.raises(ValueError, match="keeps no 'weight' column"):
        s.read_column("weight")
    with pytest.raises(ValueError, match=r"weight= given, but the store .* keeps no 'weight' column"):
        s.append(X, y, qid + 1000, weight=w)
    with pytest.raises(ValueError, match="keeps no 'click' column"):
        ips_weighted(s, [1.0])
    with pytest.raises(ValueError, match="keeps no 'weight' column"):
        with_weights(s, "weight")
    with pytest.raises(TypeError, match="GroupStore"):
        with_weights(as_source(X, y, qid), "weight")
    assert s.verify() == 1


@pytest.mark.parametrize("kw, match", [
    ({"weight": [1, -1, 1]}, r"weight\[1\] = -1.0: weights must be finite and >= 0"),
    ({"weight": [1, 1, np.nan]}, r"weight\[2\] = nan"),
    ({"click": [0, 2, 1]}, r"click\[1\] = 2: clicks are 0 or 1"),
    ({"click": [0, 0.5, 1]}, r"click\[1\] = 0.5: expected an integer"),
    ({"position": [1, 0, 2]}, r"position\[1\] = 0: positions are 1-based ranks"),
    ({"position": [1, 2.5, 2]}, r"position\[1\] = 2.5: expected an integer"),
    ({"position": [1, 2]}, r"position has shape \(2,\); expected one value per row, \(3,\)"),
    ({"click": ["a", "b", "c"]}, r"click has dtype <U1; expected numbers"),
    ({"position": None}, r"keeps a 'position' column .* pass position="),
])
def test_bad_columns_are_refused_before_anything_is_written(tmp_path, kw, match):
    s = sr.GroupStore.create(tmp_path / "s.zarr", 2, row_columns=COLS)
    good = {"weight": [1, 2, 0], "click": [0, 1, 1], "position": [1, 2, 3]}
    err = TypeError if "dtype" in match else ValueError
    with pytest.raises(err, match=match):
        s.append(np.ones((3, 2)), [1, 0, 1], [4, 4, 5], **{**good, **kw})
    assert s.n_rows == 0 and sr.GroupStore.open(tmp_path / "s.zarr").n_rows == 0
    assert s.append(np.ones((3, 2)), [1, 0, 1], [4, 4, 5], **good)   # the store still takes good batches


def test_create_refuses_unknown_columns(tmp_path):
    with pytest.raises(ValueError, match="unknown row column 'clicks'"):
        sr.GroupStore.create(tmp_path / "s.zarr", 2, row_columns=("clicks",))
    s = sr.GroupStore.create(tmp_path / "t.zarr", 2, row_columns=["position", "click"])
    assert s.row_columns == ("click", "position")


def test_a_damaged_or_foreign_column_chunk_is_an_error(tmp_path):
    data = _log(60, seed=1)
    _store(tmp_path / "a.zarr", data, chunk_rows=64)
    a = tmp_path / "a.zarr"
    # a valid chunk of a twin store (weights reversed) at this place: only the binding can tell
    b = sr.GroupStore.create(tmp_path / "c.zarr", 4, chunk_rows=64, row_columns=COLS)
    X, y, qid, w, click, pos = data
    b.append(X, y, qid, weight=w[::-1].copy(), click=click, position=pos)
    (a / "weight" / "c" / "0").write_bytes((tmp_path / "c.zarr" / "weight" / "c" / "0").read_bytes())
    with pytest.raises(StoreFormatError, match="weight/c/0: chunk 0 of array 'weight'"):
        sr.GroupStore.open(a).read_column("weight")
    with pytest.raises(StoreFormatError, match="batch 'day-0'"):
        sr.GroupStore.open(a).verify()


@pytest.mark.parametrize("name, values, match", [
    ("weight", np.array([1.0, -2.0]), "row 11 holds -2.0, but the store keeps finite weights >= 0"),
    ("weight", np.array([np.inf, 1.0]), "row 10 holds inf"),
    ("click", np.array([1, 3], dtype=np.uint8), "row 11 holds 3, but the store keeps clicks 0 or 1"),
    ("position", np.array([0, 1], dtype=np.int32), "row 10 holds 0, but the store keeps positions >= 1"),
])
def test_read_checks_name_the_row(name, values, match):
    with pytest.raises(StoreFormatError, match=f"'{name}' {match}"):
        column_check("s.zarr", name)(10, values)
    column_check("s.zarr", name)(10, np.abs(values[:0]))          # nothing to check


def test_columns_edited_outside_streamrank_fail_the_read(tmp_path):
    """Out-of-range values written by zarr itself (chunk CRC and bindings rewritten by a second commit)."""
    import zarr

    X, y, qid, w, click, pos = _log(4)
    s = sr.GroupStore.create(tmp_path / "s.zarr", X.shape[1], row_columns=("click", "position"))
    s.append(X, y, qid, click=click, position=pos)
    zarr.open_array(str(tmp_path / "s.zarr" / "click"), mode="r+")[1] = 7
    with pytest.raises(StoreFormatError, match="'click'"):
        sr.GroupStore.open(tmp_path / "s.zarr").read_column("click")


def test_a_torn_append_cuts_the_columns_back(tmp_path, monkeypatch):
    from streamrank.io import _group_append    # its write_attrs: the commit point of an append

    X, y, qid, w, click, pos = _log(10)
    s = sr.GroupStore.create(tmp_path / "s.zarr", X.shape[1], chunk_rows=8, row_columns=COLS)
    s.append(X[:20], y[:20], qid[:20], weight=w[:20], click=click[:20], position=pos[:20], batch_id="a")
    q2 = qid[20:] + 1000

    def killed(*_a, **_k):
        raise KeyboardInterrupt("killed at the commit")
    monkeypatch.setattr(_group_append, "write_attrs", killed)
    with pytest.raises(KeyboardInterrupt):
        s.append(X[20:], y[20:], q2, weight=w[20:] + 5, click=click[20:], position=pos[20:], batch_id="b")
    monkeypatch.undo()
    import zarr

    assert zarr.open_array(str(tmp_path / "s.zarr" / "weight"), mode="r").shape[0] == len(y)   # written, uncommitted
    r = sr.GroupStore.open(tmp_path / "s.zarr")
    assert r.n_rows == 20 and np.array_equal(r.read_column("weight"), w[:20])
    a = sr.GroupStore.open(tmp_path / "s.zarr", mode="a")
    assert a.repair() >= 3
    assert zarr.open_array(str(tmp_path / "s.zarr" / "position"), mode="r").shape[0] == 20
    a.append(X[20:], y[20:], q2, weight=w[20:], click=click[20:], position=pos[20:], batch_id="b")
    r = sr.GroupStore.open(tmp_path / "s.zarr")
    np.testing.assert_array_equal(r.read_column("weight"), w)
    assert r.verify() == 2


# ----------------------------------------------------------------- sources and fits


@settings(max_examples=12, deadline=None)
@given(max_rows=st.integers(1, 60), sparse=st.booleans())
@pytest.mark.slow   # several learners fitted twice: ~4 s warm
def test_weighted_fit_from_the_store_equals_the_in_memory_fit(tmp_path_factory, max_rows, sparse):
    data = _log(25, seed=3)
    X, y, qid, w, click, pos = data
    path = tmp_path_factory.mktemp("w") / "s.zarr"
    store = _store(path, data, sparse=sparse)
    src = with_weights(sr.GroupStore.open(path), "weight")
    assert isinstance(src, ColumnWeightedSource)
    got = sr.RankRLS(alpha=0.5).fit(src, max_rows=max_rows)
    want = sr.RankRLS(alpha=0.5).fit(X.astype(np.float64), y, qid, sample_weight=w)
    np.testing.assert_allclose(got.coef_, want.coef_, rtol=0, atol=1e-10)
    # brute force: the weighted all-pairs objective, Σ_q Σ_{i<j} w_i w_j ((y_i - y_j) - (f_i - f_j))², solved densely
    L = np.zeros((len(y), len(y)))
    for g in np.unique(qid):
        r = np.flatnonzero(qid == g)
        wg = w[r]
        L[np.ix_(r, r)] += wg.sum() * np.diag(wg) - np.outer(wg, wg)
    Xd = X.astype(np.float64)
    brute = np.linalg.solve(Xd.T @ L @ Xd + 0.5 * np.eye(X.shape[1]), Xd.T @ L @ y)
    np.testing.assert_allclose(got.coef_, brute, rtol=0, atol=1e-8)
    assert store.n_rows == len(y)


@settings(max_examples=10, deadline=None)
@given(max_rows=st.integers(1, 60), clip=st.sampled_from([None, 0.3]))
@pytest.mark.slow   # IPS fits from a store and in memory: ~2 s warm
def test_ips_fit_from_the_store_equals_the_in_memory_ips_fit_and_the_edge_list(tmp_path_factory, max_rows, clip):
    data = _log(25, seed=4)
    X, y, qid, w, click, pos = data
    path = tmp_path_factory.mktemp("ips") / "s.zarr"
    _store(path, data, cols=("click", "position"))
    p = sr.clicks.position_based_propensity(int(pos.max()), eta=1.0)
    src = ips_weighted(sr.GroupStore.open(path), p, clip=clip)
    got = sr.RankRLS(alpha=0.5, ties="exclude").fit(src, max_rows=max_rows)
    Xd = X.astype(np.float64)
    want = sr.RankRLS(alpha=0.5, ties="exclude").fit(Xd, click.astype(float), qid,
                                                     sample_weight=ips_weights(click, pos, p, clip=clip))
    np.testing.assert_allclose(got.coef_, want.coef_, rtol=0, atol=1e-10)
    E, W = ips_edges(click, qid, pos, p, clip=clip)
    # brute force on the explicit edges: Σ_e W_e (1 - (f_i - f_j))²
    D = Xd[E[:, 0]] - Xd[E[:, 1]]
    brute = np.linalg.solve(D.T @ (W[:, None] * D) + 0.5 * np.eye(X.shape[1]), D.T @ W)
    np.testing.assert_allclose(got.coef_, brute, rtol=0, atol=1e-8)


def test_ips_source_blocks_carry_clicks_and_ips_weights(tmp_path):
    data = _log(12, seed=5)
    X, y, qid, w, click, pos = data
    _store(tmp_path / "s.zarr", data)
    p = np.array([1.0, 0.5, 0.4, 0.3, 0.25, 0.2, 0.15, 0.1])
    src = ips_weighted(sr.GroupStore.open(tmp_path / "s.zarr"), p)
    assert isinstance(src, IPSWeightedSource) and src.n_outputs == 1
    blocks = list(src.blocks(max_rows=10))
    np.testing.assert_array_equal(np.concatenate([b.y for b in blocks]), click)
    np.testing.assert_allclose(np.concatenate([b.weight for b in blocks]), ips_weights(click, pos, p), rtol=1e-15)
    np.testing.assert_allclose(src.weight, ips_weights(click, pos, p), rtol=1e-15)
    np.testing.assert_array_equal(src.read_y(3, 9), click[3:9])
    # a range of groups (tonight's) reads the same weights
    g = src.groups(3, 7)
    gp = sr.GroupStore.open(tmp_path / "s.zarr").group_ptr
    np.testing.assert_allclose(np.concatenate([b.weight for b in g.blocks(max_rows=7)]),
                               ips_weights(click, pos, p)[gp[3]:gp[7]])
    # a pickled view (to dask workers) holds the store's path, not the rows
    raw = pickle.dumps(src)
    assert len(raw) < 4000 and b"_all" not in raw          # the loaded weights do not travel
    back = pickle.loads(raw)
    np.testing.assert_allclose(back.weight, src.weight)
    r = int(np.flatnonzero(pos > 3)[0])
    with pytest.raises(ValueError, match=rf"s.zarr: row {r} was shown at position {pos[r]}, but the propensity "
                                         "has 3 entries"):
        ips_weighted(sr.GroupStore.open(tmp_path / "s.zarr"), p[:3]).weight
    with pytest.raises(ValueError, match="propensities must be in"):
        ips_weighted(sr.GroupStore.open(tmp_path / "s.zarr"), [1.0, 0.0])
    with pytest.raises(ValueError, match="already carries row weights"):
        ips_weighted(with_weights(sr.GroupStore.open(tmp_path / "s.zarr"), "weight"), p)


def test_sgd_pairwise_and_dual_kernel_take_the_store_weights(tmp_path):
    """Learners that need every weight at once read the whole column (.weight) and match in-memory weights."""
    data = _log(15, seed=6)
    X, y, qid, w, click, pos = data
    _store(tmp_path / "s.zarr", data)
    src = with_weights(sr.GroupStore.open(tmp_path / "s.zarr"), "weight")
    np.testing.assert_array_equal(src.weight, w)
    mem = with_weights(as_source(X, y, qid), w)
    a = sr.PairwiseSGDRanker(random_state=0).fit(src)
    b = sr.PairwiseSGDRanker(random_state=0).fit(mem)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=0, atol=1e-12)
    ka = sr.KernelRankRLS(alpha=1.0, kernel="rbf").fit(src)
    kb = sr.KernelRankRLS(alpha=1.0, kernel="rbf").fit(mem)
    np.testing.assert_allclose(ka.dual_coef_, kb.dual_coef_, rtol=0, atol=1e-10)


def test_columns_on_object_storage(s3_server, s3_url, tmp_path):
    data = _log(20, seed=7)
    X, y, qid, w, click, pos = data
    so = s3_server.storage_options
    url = s3_url + "/clicks.zarr"
    _store(url, data, storage_options=so)
    _store(tmp_path / "l.zarr", data)
    r = sr.GroupStore.open(url, storage_options=so)
    assert r.row_columns == COLS and r.verify() == 2
    for c, v in zip(COLS, (w, click, pos)):
        np.testing.assert_array_equal(r.read_column(c), v)
    a = sr.RankRLS(alpha=1.0).fit(with_weights(r, "weight"), max_rows=20)
    b = sr.RankRLS(alpha=1.0).fit(with_weights(sr.GroupStore.open(tmp_path / "l.zarr"), "weight"), max_rows=20)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert pickle.loads(pickle.dumps(with_weights(r, "weight"))).inner.path == url


@pytest.mark.slow   # SGD fits on a store and on arrays: 2.1 s wall under load 15
def test_pairwise_sgd_on_a_range_of_a_weighted_store_keeps_the_weights(tmp_path):
    """``with_weights(store, "weight").groups(g0, g1)`` (tonight's groups): PairwiseSGDRanker samples its pairs
    with the range's weights (it trained unweighted before, silently)."""
    data = _log(20, seed=8)
    X, y, qid, w, click, pos = data
    _store(tmp_path / "s.zarr", data)
    src = with_weights(sr.GroupStore.open(tmp_path / "s.zarr"), "weight")
    gp = src.group_ptr
    r0, r1 = int(gp[4]), int(gp[15])
    got = sr.PairwiseSGDRanker(random_state=1).fit(src.groups(4, 15))
    want = sr.PairwiseSGDRanker(random_state=1).fit(with_weights(as_source(X[r0:r1], y[r0:r1], qid[r0:r1]),
                                                                 w[r0:r1]))
    np.testing.assert_allclose(got.coef_, want.coef_, rtol=0, atol=1e-12)
    plain = sr.PairwiseSGDRanker(random_state=1).fit(as_source(X[r0:r1], y[r0:r1], qid[r0:r1]))
    assert np.abs(plain.coef_ - got.coef_).max() > 1e-6


def test_exact_kernel_on_a_range_of_a_weighted_store_keeps_the_weights(tmp_path):
    """The exact dual KernelRankRLS on ``with_weights(store, "weight").groups(g0, g1)`` uses the range's weights
    (it read the rows and dropped the weights before)."""
    data = _log(20, seed=9)
    X, y, qid, w, click, pos = data
    _store(tmp_path / "s.zarr", data)
    src = with_weights(sr.GroupStore.open(tmp_path / "s.zarr"), "weight")
    r0, r1 = int(src.group_ptr[3]), int(src.group_ptr[12])
    got = sr.KernelRankRLS(alpha=1.0, kernel="rbf").fit(src.groups(3, 12))
    want = sr.KernelRankRLS(alpha=1.0, kernel="rbf").fit(with_weights(as_source(X[r0:r1], y[r0:r1], qid[r0:r1]),
                                                                      w[r0:r1]))
    np.testing.assert_allclose(got.dual_coef_, want.dual_coef_, rtol=0, atol=1e-10)
    plain = sr.KernelRankRLS(alpha=1.0, kernel="rbf").fit(as_source(X[r0:r1], y[r0:r1], qid[r0:r1]))
    assert np.abs(plain.dual_coef_ - got.dual_coef_).max() > 1e-6

"""pairs_from_groups: all pairs == brute force; sampling is uniform as documented."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import streamrank as sr


def _groups(rng, n_groups, max_size=7, levels=3, n_features=3):
    sizes = rng.integers(1, max_size + 1, n_groups)
    qid = np.repeat(np.arange(n_groups) * 3 + 1, sizes)
    m = len(qid)
    return rng.normal(size=(m, n_features)), rng.integers(0, levels, m).astype(float), qid


def _brute_pairs(y, qid):
    out = set()
    for i in range(len(y)):
        for j in range(len(y)):
            if qid[i] == qid[j] and y[i] > y[j]:
                out.add((i, j))
    return out


def _collect(batches):
    rows = np.concatenate([b.rows for b in batches]) if batches else np.zeros((0, 2), int)
    return rows


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n_groups=st.integers(0, 8), max_rows=st.integers(1, 30),
       batch=st.integers(1, 50), levels=st.integers(1, 4))
def test_all_pairs_equal_brute_force(seed, n_groups, max_rows, batch, levels):
    rng = np.random.default_rng(seed)
    X, y, q = _groups(rng, n_groups, levels=levels)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batches = list(sr.pairs_from_groups(sr.as_source(X, y, q), max_rows=max_rows, batch_size=batch))
    rows = _collect(batches)
    assert len(rows) == len({tuple(r) for r in rows})
    assert {tuple(r) for r in rows} == _brute_pairs(y, q)
    for b in batches:
        assert len(b) <= batch
        np.testing.assert_array_equal(b.X_pos, X[b.rows[:, 0]])
        np.testing.assert_array_equal(b.X_neg, X[b.rows[:, 1]])
        np.testing.assert_array_equal(b.qid, q[b.rows[:, 0]])
        np.testing.assert_array_equal(b.y_diff, y[b.rows[:, 0]] - y[b.rows[:, 1]])
        assert (b.y_diff > 0).all()


def test_one_global_group_in_strips():
    """qid=None, a group far larger than the batch: memory bounded, pairs complete."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 5, 300).astype(float)
    src = sr.as_source(np.arange(300.0)[:, None], y, None)
    with pytest.warns(sr.io.blocks.OversizedGroupWarning):
        batches = list(sr.pairs_from_groups(src, max_rows=100, batch_size=500))
    assert max(len(b) for b in batches) <= 500
    rows = _collect(batches)
    assert {tuple(r) for r in rows} == _brute_pairs(y, np.zeros(300))


def test_sparse_store_source(tmp_path):
    rng = np.random.default_rng(1)
    X, y, q = _groups(rng, 6)
    Xs = sp.csr_matrix(np.where(X > 0, X, 0))
    store = sr.GroupStore.create(tmp_path / "s.zarr", 3, sparse=True)
    store.append(Xs, y, q)
    batches = list(sr.pairs_from_groups(store, batch_size=7))
    for b in batches:
        assert sp.issparse(b.X_pos)
        np.testing.assert_array_equal(b.X_pos.toarray(), Xs[b.rows[:, 0]].toarray().astype(np.float32))
    assert {tuple(r) for r in _collect(batches)} == _brute_pairs(y, q)


def test_sampled_pairs_are_valid_reproducible_and_counted():
    rng = np.random.default_rng(2)
    X, y, q = _groups(rng, 20)
    src = sr.as_source(X, y, q)
    a = list(sr.pairs_from_groups(src, n_pairs=500, random_state=3, batch_size=64))
    b = list(sr.pairs_from_groups(src, n_pairs=500, random_state=3, batch_size=64))
    ra, rb = _collect(a), _collect(b)
    assert len(ra) == 500 and np.array_equal(ra, rb)
    valid = _brute_pairs(y, q)
    assert all(tuple(r) in valid for r in ra)
    c = _collect(list(sr.pairs_from_groups(src, n_pairs=500, random_state=4)))
    assert not np.array_equal(ra, c)
    sh = _collect(list(sr.pairs_from_groups(src, n_pairs=500, random_state=3, shuffle=True)))
    assert len(sh) == 500 and all(tuple(r) in valid for r in sh)


def test_sampling_distribution():
    """Uniform over eligible queries, then uniform over a query's ordered pairs (chi-square-free check)."""
    # query 1: y = [2, 1, 1, 0] -> pairs (0,1),(0,2),(0,3),(1,3),(2,3): 5 pairs
    # query 2: all tied -> not eligible; query 3: y = [0, 1] -> 1 pair (5... see below)
    y = np.array([2.0, 1, 1, 0, 3, 3, 0, 1])
    q = np.array([1, 1, 1, 1, 2, 2, 3, 3])
    X = np.zeros((8, 1))
    rows = _collect(list(sr.pairs_from_groups(sr.as_source(X, y, q), n_pairs=60_000, random_state=0)))
    per_query = np.bincount(q[rows[:, 0]], minlength=4)
    assert per_query[2] == 0
    np.testing.assert_allclose(per_query[[1, 3]] / 60_000, [0.5, 0.5], atol=0.01)
    g1 = rows[q[rows[:, 0]] == 1]
    keys, counts = np.unique(g1[:, 0] * 10 + g1[:, 1], return_counts=True)
    assert set(keys) == {1, 2, 3, 13, 23}
    np.testing.assert_allclose(counts / counts.sum(), 0.2, atol=0.01)
    assert {tuple(r) for r in rows[q[rows[:, 0]] == 3]} == {(7, 6)}


def test_multi_output_and_errors(tmp_path):
    rng = np.random.default_rng(5)
    X, y, q = _groups(rng, 4)
    Y = np.c_[y, -y]
    src = sr.as_source(X, Y, q)
    r1 = {tuple(r) for r in _collect(list(sr.pairs_from_groups(src, output=1)))}
    assert r1 == {(j, i) for i, j in _brute_pairs(y, q)}
    with pytest.raises(ValueError, match="output=2 is out of range"):
        list(sr.pairs_from_groups(src, output=2))
    with pytest.raises(ValueError, match="n_pairs must be"):
        list(sr.pairs_from_groups(src, n_pairs=-1))
    tied = sr.as_source(np.zeros((3, 1)), np.ones(3), [1, 1, 2])
    with pytest.raises(ValueError, match="no query group has two different scores"):
        list(sr.pairs_from_groups(tied, n_pairs=3))
    assert list(sr.pairs_from_groups(tied)) == []
    with pytest.raises(TypeError, match="BlockSource"):
        list(sr.pairs_from_groups(X))
    # (X, y, qid) tuples are wrapped
    assert len(_collect(list(sr.pairs_from_groups((X, y, q))))) == len(_brute_pairs(y, q))

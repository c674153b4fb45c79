"""TupleStore / TupleSource: append, validation, bounded-buffer shuffled batches."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import streamrank as sr
from streamrank.io.tuples import TupleSource, as_tuple_source


def _data(rng, n_q=5, n_d=8, l_=30, fq=6, fd=7):
    Q = sp.random(n_q, fq, density=0.5, format="csr", random_state=rng)
    D = sp.random(n_d, fd, density=0.5, format="csr", random_state=rng)
    t = np.c_[rng.integers(0, n_q, l_), rng.integers(0, n_d, l_), rng.integers(0, n_d, l_)]
    return Q, D, t


def _check_batches(batches, Q, D, t, mag=None):
    """Every tuple once, rows aligned with the tuple indices."""
    seen = np.concatenate([b.index for b in batches]) if batches else np.zeros(0, int)
    assert np.array_equal(np.sort(seen), np.arange(len(t)))
    for b in batches:
        np.testing.assert_array_equal(b.tuples, t[b.index])
        np.testing.assert_array_equal(b.Q.toarray(), Q[t[b.index, 0]].toarray().astype(np.float32))
        np.testing.assert_array_equal(b.D_pos.toarray(), D[t[b.index, 1]].toarray().astype(np.float32))
        np.testing.assert_array_equal(b.D_neg.toarray(), D[t[b.index, 2]].toarray().astype(np.float32))
        if mag is not None:
            np.testing.assert_array_equal(b.magnitude, mag[b.index])
        assert sp.isspmatrix_csr(b.Q) or isinstance(b.Q, sp.csr_array)
    return seen


def test_append_roundtrip_local_and_global(tmp_path):
    rng = np.random.default_rng(0)
    ts = sr.TupleStore.create(tmp_path / "t.zarr", 6, 7)
    Q1, D1, t1 = _data(rng)
    Q2, D2, t2 = _data(rng, n_q=3, n_d=4, l_=10)
    m2 = rng.uniform(0.5, 2, 10)
    assert ts.append(Q1, D1, t1, batch_id="a")
    assert ts.append(Q2, D2, t2, magnitudes=m2, batch_id="b")
    assert not ts.append(Q2, D2, t2, magnitudes=m2, batch_id="b")
    # global indices: tuples over vectors committed earlier, no new vectors
    t3 = np.array([[0, 0, 11], [7, 3, 1]])
    assert ts.append(None, None, t3, rows="global", batch_id="c")
    ro = sr.TupleStore.open(tmp_path / "t.zarr")
    assert (ro.n_tuples, ro.n_queries, ro.n_items) == (42, 8, 12)
    assert (ro.n_query_features, ro.n_item_features, ro.format_version) == (6, 7, 1)
    Q, D = sp.vstack([Q1, Q2]).tocsr(), sp.vstack([D1, D2]).tocsr()
    t = np.r_[t1, t2 + [5, 8, 8], t3]
    mag = np.r_[np.ones(30), m2, np.ones(2)]
    for buf in (0, 7, 1000):
        batches = list(ro.batches(batch_size=4, shuffle_buffer=buf, random_state=1))
        seen = _check_batches(batches, Q, D, t, mag)
        if buf == 0:
            assert np.array_equal(seen, np.arange(42))
        else:
            assert not np.array_equal(seen, np.arange(42))
    assert ro.verify() == 3
    assert [e["batch_id"] for e in ro.batches_log] == ["a", "b", "c"]


def test_reproducible_and_seed_dependent(tmp_path):
    rng = np.random.default_rng(1)
    Q, D, t = _data(rng, l_=200)
    src = TupleSource.from_arrays(Q, D, t)
    a = [b.index for b in src.batches(batch_size=16, shuffle_buffer=50, random_state=3)]
    b = [b.index for b in src.batches(batch_size=16, shuffle_buffer=50, random_state=3)]
    c = [b.index for b in src.batches(batch_size=16, shuffle_buffer=50, random_state=4)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b)) and len(a) == len(b)
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    assert len(src) == 200 and as_tuple_source(src) is src


@pytest.mark.slow   # 25 hypothesis stores: 3.1 s wall under load 11
@settings(max_examples=25, deadline=None)
@given(l_=st.integers(0, 300), batch=st.integers(1, 40), buf=st.integers(0, 120), seed=st.integers(0, 10))
def test_every_tuple_exactly_once(l_, batch, buf, seed):
    rng = np.random.default_rng(seed)
    Q, D, t = _data(rng, l_=l_)
    src = as_tuple_source(Q, D, t)
    src._chunk_size = lambda: 37  # small read chunks to exercise the buffer across chunks
    batches = list(src.batches(batch_size=batch, shuffle_buffer=buf, random_state=seed))
    _check_batches(batches, Q, D, t)
    sizes = [len(b) for b in batches]
    assert all(s == batch for s in sizes[:-1]) or buf > 0
    assert all(s <= batch for s in sizes)


def test_shuffle_mixes_across_the_store(tmp_path):
    """With a buffer, the first batch is not just the first tuples of the file."""
    rng = np.random.default_rng(2)
    Q, D, t = _data(rng, l_=5000)
    src = as_tuple_source(Q, D, t)
    src._chunk_size = lambda: 500
    first = next(iter(src.batches(batch_size=100, shuffle_buffer=1000, random_state=0))).index
    assert first.max() - first.min() > 500


@pytest.mark.parametrize(
    "kw, err, match",
    [
        (dict(tuples=[[0, 1, 99]]), ValueError, r"tuples row 0 column 2 = 99 is not a valid other item row"),
        (dict(tuples=[[-1, 1, 2]]), ValueError, r"column 0 = -1 is not a valid query row"),
        (dict(tuples=[[0, 1]]), ValueError, r"shape \(l, 3\)"),
        (dict(tuples=[["a", "b", "c"]]), TypeError, r"tuples has dtype"),
        (dict(magnitudes=[1.0, 2.0]), ValueError, r"magnitudes must have shape \(1,\)"),
        (dict(magnitudes=[np.nan]), ValueError, r"magnitudes contains NaN"),
        (dict(Q=sp.eye(2, 5, format="csr")), ValueError, r"Q has 5 features, but 6"),
        (dict(D=sp.csr_matrix(np.array([[np.inf] * 7]))), ValueError, r"D contains NaN or infinity at row 0"),
    ],
)
def test_validation(tmp_path, kw, err, match):
    ts = sr.TupleStore.create(tmp_path / "t.zarr", 6, 7)
    args = dict(Q=sp.eye(2, 6, format="csr"), D=sp.eye(3, 7, format="csr"), tuples=[[0, 1, 2]])
    args.update(kw)
    with pytest.raises(err, match=match):
        ts.append(args.pop("Q"), args.pop("D"), args.pop("tuples"), **args)
    assert ts.n_tuples == 0 and ts.n_queries == 0


def test_torn_tail_repair_and_format(tmp_path):
    import json

    import zarr

    p = tmp_path / "t.zarr"
    ts = sr.TupleStore.create(p, 2, 2)
    ts.append(sp.eye(2, format="csr"), sp.eye(2, format="csr"), [[0, 0, 1]], batch_id="a")
    zarr.open_array(str(p / "tuples"), mode="r+").resize((5, 3))
    zarr.open_array(str(p / "D" / "indptr"), mode="r+").resize((9,))
    ro = sr.TupleStore.open(p)
    assert ro.n_tuples == 1 and len(list(ro.batches())) == 1
    ts2 = sr.TupleStore.open(p, mode="a")
    assert ts2.append(None, sp.eye(2, format="csr"), [[1, 2, 3]], rows="global", batch_id="b")
    ro = sr.TupleStore.open(p)
    assert ro.verify() == 2 and ro.n_items == 4
    np.testing.assert_array_equal(np.concatenate([b.tuples for b in ro.batches(shuffle_buffer=0)]),
                                  [[0, 0, 1], [1, 2, 3]])
    doc = json.loads((p / "zarr.json").read_text())
    doc["attributes"]["format_version"] = 7
    (p / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(sr.StoreFormatError, match="format_version 7"):
        sr.TupleStore.open(p)
    with pytest.raises(sr.StoreFormatError, match="format is 'streamrank.tuple_store'"):
        doc["attributes"]["format_version"] = 1
        (p / "zarr.json").write_text(json.dumps(doc))
        sr.GroupStore.open(p)


def test_dense_inputs_accepted():
    Q = np.eye(3)
    D = np.eye(4, 2)
    src = as_tuple_source(Q, D, [[0, 1, 2], [2, 3, 0]])
    b = next(iter(src.batches(batch_size=10, shuffle_buffer=0)))
    assert sp.issparse(b.Q) and b.D_pos.shape == (2, 2)


def test_public_range_reads(tmp_path):
    rng = np.random.default_rng(4)
    Q, D, t = _data(rng, l_=25)
    mag = rng.uniform(1, 2, 25)
    ts = sr.TupleStore.create(tmp_path / "t.zarr", 6, 7)
    ts.append(Q, D, t, magnitudes=mag)
    for src in (ts, as_tuple_source(Q, D, t, mag)):
        tup, m = src.read_tuples(3, 9)
        np.testing.assert_array_equal(tup, t[3:9])
        np.testing.assert_array_equal(m, mag[3:9])
        b = src.take(5, 12)
        np.testing.assert_array_equal(b.index, np.arange(5, 12))
        np.testing.assert_array_equal(b.D_neg.toarray(), D[t[5:12, 2]].toarray().astype(np.float32))
        Qm, Dm = src.matrices()
        assert Qm.shape == (5, 6) and Dm.shape == (8, 7)
        assert len(src.take()) == 25
        with pytest.raises(IndexError, match="outside 0:25"):
            src.read_tuples(20, 30)


# ------------------------------------------------------- row cache (bounded memory)
def _multi_store(tmp_path, rng, n_appends=3, n_q=40, n_d=60, l_=300):
    ts = sr.TupleStore.create(tmp_path / "rc.zarr", 12, 15)
    for _ in range(n_appends):
        Q = sp.random(n_q, 12, density=0.3, format="csr", random_state=rng)
        D = sp.random(n_d, 15, density=0.3, format="csr", random_state=rng)
        Q = sp.vstack([Q, sp.csr_matrix((1, 12))]).tocsr()   # an empty row
        t = np.c_[rng.integers(0, n_q + 1, l_), rng.integers(0, n_d, l_), rng.integers(0, n_d, l_)]
        ts.append(Q, D, t)
    return ts


def _assert_same_batch(x, y):
    assert np.array_equal(x.index, y.index) and np.array_equal(x.tuples, y.tuples)
    np.testing.assert_array_equal(x.magnitude, y.magnitude)
    for f in ("Q", "D_pos", "D_neg"):
        m, n = getattr(x, f), getattr(y, f)
        assert type(m) is type(n) and m.shape == n.shape
        for arr in ("indptr", "indices", "data"):
            u, v = getattr(m, arr), getattr(n, arr)
            assert u.dtype == v.dtype and np.array_equal(u, v), (f, arr)


# budgets of 0 and 300 bytes re-read every row from its chunk (~3-4 CPU-s each): the quick loop keeps 5000
_SLOW = pytest.mark.slow


@pytest.mark.parametrize("cache_bytes", [pytest.param(0, marks=_SLOW), pytest.param(300, marks=_SLOW), 5000])
@pytest.mark.parametrize("shuffle_buffer", [0, 50])
@pytest.mark.slow   # row-cache passes per budget: ~2 s warm
def test_row_cache_batches_equal_whole_matrix_path(tmp_path, cache_bytes, shuffle_buffer):
    ts = _multi_store(tmp_path, np.random.default_rng(5), l_=60)
    whole = sr.TupleStore.open(ts.path)
    assert whole._csr_nbytes() <= 64 << 20   # the default budget takes the whole-matrix path
    ref = list(whole.batches(batch_size=29, shuffle_buffer=shuffle_buffer, random_state=11))
    assert whole.cache_info() is None
    small = sr.TupleStore.open(ts.path)
    got = list(small.batches(batch_size=29, shuffle_buffer=shuffle_buffer, random_state=11,
                             cache_bytes=cache_bytes))
    assert small._cache is None   # Q and D were never read whole
    assert len(got) == len(ref)
    for x, y in zip(ref, got):
        _assert_same_batch(x, y)
    _assert_same_batch(whole.take(13, 150), small.take(13, 150, cache_bytes=cache_bytes))
    assert small.cache_info()["peak_nbytes"] <= cache_bytes


@pytest.mark.slow   # a store big enough to measure the cache's peak: ~3 CPU-s
def test_row_cache_memory_bounded_by_budget(tmp_path):
    ts = _multi_store(tmp_path, np.random.default_rng(6), n_appends=4, n_q=150, n_d=250, l_=50)
    ro = sr.TupleStore.open(ts.path)
    budget = 4096
    assert ro._csr_nbytes() > 10 * budget   # Q and D are much larger than the budget
    Q, D = sr.TupleStore.open(ts.path).matrices()
    t, _ = ro.read_tuples()
    peak = 0
    n = 0
    for b in ro.batches(batch_size=40, shuffle_buffer=100, random_state=2, cache_bytes=budget):
        info = ro.cache_info()
        assert info["nbytes"] <= budget and info["peak_nbytes"] <= budget
        peak = max(peak, info["nbytes"])
        assert (b.Q != Q[t[b.index, 0]]).nnz == 0 and (b.D_neg != D[t[b.index, 2]]).nnz == 0
        n += len(b)
    info = ro.cache_info()
    assert n == ro.n_tuples and ro._cache is None
    assert peak > budget // 2                      # the cache was used ...
    assert info["evictions"] > 0                    # ... and had to evict
    # the held bytes are the real bytes of the held pieces
    held = sum(a.nbytes for piece in ro._row_cache._lru.values() for a in piece)
    assert held == info["nbytes"] <= budget


def test_row_cache_bad_budget(tmp_path):
    ts = _multi_store(tmp_path, np.random.default_rng(7), n_appends=1)
    for bad in (-1, 1.5, True, "64M"):
        with pytest.raises(ValueError, match="cache_bytes"):
            next(ts.batches(cache_bytes=bad))
        with pytest.raises(ValueError, match="cache_bytes"):
            ts.take(0, 3, cache_bytes=bad)


@pytest.mark.slow   # ~4 CPU-s of small chunk reads
def test_row_cache_sees_appends(tmp_path):
    rng = np.random.default_rng(8)
    ts = _multi_store(tmp_path, rng, n_appends=1)
    first = list(ts.batches(batch_size=40, shuffle_buffer=0, cache_bytes=100))
    Q2 = sp.random(5, 12, density=0.5, format="csr", random_state=rng)
    D2 = sp.random(5, 15, density=0.5, format="csr", random_state=rng)
    ts.append(Q2, D2, [[4, 4, 0], [0, 1, 2]])
    b = ts.take(ts.n_tuples - 2, cache_bytes=100)
    Q, D = sr.TupleStore.open(ts.path).matrices()
    assert (b.Q != Q[b.tuples[:, 0]]).nnz == 0 and (b.D_pos != D[b.tuples[:, 1]]).nnz == 0
    assert (b.Q[0] != Q2[4].astype(np.float32)).nnz == 0 and len(first) > 0

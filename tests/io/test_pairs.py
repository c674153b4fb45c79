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


# --- the vectorised per-block sampler (_sampled_local) ------------------------------------------

from streamrank.io.pairs import _sampled_local  # noqa: E402


def _sample(y, gp, counts, seed, chunk=None):
    rng = np.random.default_rng(seed)
    kw = {} if chunk is None else {"chunk": chunk}
    pieces = list(_sampled_local(y, np.asarray(gp, dtype=np.int64), np.asarray(counts, dtype=np.int64), rng, **kw))
    if not pieces:
        z = np.zeros(0, np.int64)
        return z, z, z
    return tuple(np.concatenate(a) for a in zip(*pieces))


def _check_sample(y, gp, counts, i, j, g):
    gp = np.asarray(gp)
    assert len(i) == len(j) == len(g) == int(np.sum(counts))
    assert np.array_equal(np.bincount(g, minlength=len(counts)), counts)   # exactly counts[g] per group
    assert (np.diff(g) >= 0).all()                                          # grouped, in group order
    assert ((gp[g] <= i) & (i < gp[g + 1])).all() and ((gp[g] <= j) & (j < gp[g + 1])).all()  # never cross
    assert (y[i] > y[j]).all()


def test_sampler_exact_frequencies_with_ties():
    """One group with ties: every valid ordered pair equally likely (chi-square, fixed seed)."""
    from scipy.stats import chisquare

    y = np.array([2.0, 1, 1, 0, 1, 3, 0])
    valid = sorted((a, b) for a in range(7) for b in range(7) if y[a] > y[b])
    n = 200_000
    i, j, g = _sample(y, [0, 7], [n], seed=0)
    _check_sample(y, [0, 7], [n], i, j, g)
    keys, freq = np.unique(i * 7 + j, return_counts=True)
    assert [(int(k) // 7, int(k) % 7) for k in keys] == valid
    # deterministic (fixed seed); a biased sampler (e.g. off by one tie) gives p ~ 0
    assert chisquare(freq).pvalue > 1e-3
    np.testing.assert_allclose(freq / n, 1 / len(valid), rtol=0.05)


def test_sampler_frequencies_across_groups_and_chunks():
    """Several groups in one block, tiny chunks: the per-group pair law is still uniform."""
    from scipy.stats import chisquare

    y = np.array([0.0, 1, 1, 2,   5, 5,   3, 4,   7,   1, 0, 1, 0, 2], dtype=np.float32)
    gp = np.array([0, 4, 6, 8, 9, 14])
    counts = np.array([30_000, 0, 5_000, 0, 40_000])
    i, j, g = _sample(y, gp, counts, seed=1, chunk=997)
    _check_sample(y, gp, counts, i, j, g)
    for gg in (0, 2, 4):
        a, b = gp[gg], gp[gg + 1]
        valid = sorted((r, s) for r in range(a, b) for s in range(a, b) if y[r] > y[s])
        m = g == gg
        keys, freq = np.unique(i[m] * 100 + j[m], return_counts=True)
        assert [(int(k) // 100, int(k) % 100) for k in keys] == valid
        if len(valid) > 1:
            assert chisquare(freq).pvalue > 1e-3


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n_groups=st.integers(1, 12), levels=st.integers(1, 4),
       chunk=st.integers(1, 40), f32=st.booleans())
def test_sampler_valid_counts_property(seed, n_groups, levels, chunk, f32):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 7, n_groups)
    gp = np.concatenate(([0], np.cumsum(sizes)))
    y = rng.integers(0, levels, gp[-1]).astype(np.float32 if f32 else np.float64)
    eligible = np.array([y[gp[k]:gp[k + 1]].max() > y[gp[k]:gp[k + 1]].min() for k in range(n_groups)])
    counts = np.where(eligible, rng.integers(0, 9, n_groups), 0)
    i, j, g = _sample(y, gp, counts, seed, chunk=chunk)
    _check_sample(y, gp, counts, i, j, g)
    # chunking changes only how the draws are batched, never validity or counts; same seed -> same pairs
    i2, j2, g2 = _sample(y, gp, counts, seed, chunk=chunk)
    assert np.array_equal(i, i2) and np.array_equal(j, j2) and np.array_equal(g, g2)


def test_sampler_edge_cases():
    # one-row group, all-tied group (count 0: eligibility is decided upstream), two-row group, float32
    y = np.array([4.0, 2, 2, 2, 1, 3, 9], dtype=np.float32)
    gp = [0, 1, 4, 6, 7]
    counts = [0, 0, 50, 0]
    i, j, g = _sample(y, gp, counts, seed=0)
    _check_sample(y, gp, counts, i, j, g)
    assert set(zip(i.tolist(), j.tolist())) == {(5, 4)}
    # read-only y, group_ptr not starting at 0 (a slice of a bigger block)
    y.setflags(write=False)
    i, j, g = _sample(y, [1, 4, 6], [0, 7], seed=0)
    assert len(i) == 7 and set(zip(i.tolist(), j.tolist())) == {(5, 4)} and (g == 1).all()
    # nothing asked -> nothing drawn; an empty block
    assert all(len(a) == 0 for a in _sample(y, gp, [0, 0, 0, 0], seed=0))
    assert all(len(a) == 0 for a in _sample(np.zeros(0), [0], np.zeros(0, int), seed=0))
    # a positive count on a group without any pair is a caller bug: clear error
    with pytest.raises(ValueError, match=r"group 1 .*rows 1\.\.3.*no pair with y_i > y_j"):
        _sample(y, gp, [0, 3, 0, 0], seed=0)
    with pytest.raises(ValueError, match="group 0 .*no pair"):
        _sample(y, gp, [1, 0, 0, 0], seed=0)


def test_sampler_same_seed_same_pairs_through_the_stream():
    rng = np.random.default_rng(7)
    X, y, q = _groups(rng, 30, levels=4)
    src = sr.as_source(X, y.astype(np.float32), q)
    runs = [_collect(list(sr.pairs_from_groups(src, n_pairs=2_000, random_state=11, max_rows=17, batch_size=100)))
            for _ in range(2)]
    assert len(runs[0]) == 2_000 and np.array_equal(runs[0], runs[1])
    valid = _brute_pairs(y, q)
    assert all(tuple(r) in valid for r in runs[0])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n_groups=st.integers(1, 15), max_rows=st.integers(1, 12),
       levels=st.integers(1, 3))
def test_eligible_count_equals_brute_force_whatever_the_cutting(seed, n_groups, max_rows, levels):
    """The O(1)-state eligibility pass (groups larger than a block come in pieces) counts what brute force does."""
    from streamrank.io.pairs import _count_eligible

    rng = np.random.default_rng(seed)
    X, y, q = _groups(rng, n_groups, max_size=9, levels=levels)
    expect = sum(y[q == g].max() > y[q == g].min() for g in np.unique(q))
    assert _count_eligible(sr.as_source(X, y, q), max_rows, 0) == expect


@pytest.mark.parametrize("shuffle", [False, True])
def test_blockwise_multinomial_is_uniform_over_eligible_queries(shuffle):
    """Counts drawn block by block (binomial share, then multinomial) have the law of one multinomial:
    uniform over the eligible queries, whatever the block cutting and order."""
    from scipy.stats import chisquare

    rng = np.random.default_rng(5)
    sizes = rng.integers(1, 6, 60)
    q = np.repeat(np.arange(60), sizes)
    y = rng.integers(0, 2, len(q)).astype(float)
    y[q == 7] = 1.0                                   # an all-tied query: never drawn
    X = np.zeros((len(q), 1))
    eligible = np.array([y[q == g].max() > y[q == g].min() for g in range(60)])
    n = 60_000
    rows = _collect(list(sr.pairs_from_groups(sr.as_source(X, y, q), n_pairs=n, random_state=1, max_rows=9,
                                              shuffle=shuffle)))
    per_query = np.bincount(q[rows[:, 0]], minlength=60)
    assert per_query.sum() == n and (per_query[~eligible] == 0).all()
    assert chisquare(per_query[eligible]).pvalue > 1e-3
    valid = _brute_pairs(y, q)
    assert all(tuple(r) in valid for r in rows[:500])

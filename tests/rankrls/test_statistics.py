"""RankStatistics and EigenPath against the explicit pair Laplacian; any block cutting."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from rankrls_testdata import make_groups
from hypothesis import given, settings
from hypothesis import strategies as st
from rankrls_reference import brute_laplacian, pair_list

import streamrank as sr
from streamrank.rankrls._statistics import EigenPath, RankStatistics, block_statistics


def brute_stats(X, y, gp, group_weight, ties):
    Y = np.asarray(y, float).reshape(len(y), -1)
    L = brute_laplacian(len(y), pair_list(gp, Y[:, 0], group_weight=group_weight, ties=ties))
    X = X.toarray() if sp.issparse(X) else np.asarray(X, float)
    return X.T @ L @ X, X.T @ L @ Y, np.einsum("iv,ij,jv->v", Y, L, Y), len(pair_list(gp, Y[:, 0], ties=ties))


def stream(src, max_rows, gw, ties, shuffle=False, seed=0, split=False):
    tot = None
    for b in src.blocks(max_rows=max_rows, shuffle=shuffle, random_state=seed, split_groups=split,
                        prefetch=False):
        part = block_statistics(b, group_weight=gw, ties=ties)
        tot = part if tot is None else tot.merge(part)
    return tot


@pytest.mark.parametrize("gw", ["pair", "query", "size"])
@pytest.mark.parametrize("ties", ["include", "exclude"])
@pytest.mark.parametrize("sparse", [False, True])
def test_block_statistics_equal_brute(gw, ties, sparse, rng):
    X, y, qid, gp = make_groups(rng, n_groups=7, levels=3)
    X = X.astype(np.float32)
    if sparse:
        X[np.abs(X) < 0.7] = 0
        X = sp.csr_matrix(X)
    G, B, yLy, npairs = brute_stats(X, y, gp, gw, ties)
    st_ = stream(sr.as_source(X, y, qid), 9, gw, ties)
    np.testing.assert_allclose(st_.G, G, rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(st_.B, B, rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(st_.yLy, yLy, rtol=1e-10)
    assert st_.n_pairs == npairs and st_.n_groups == 7 and st_.n_rows == len(y)


@settings(max_examples=25, deadline=None)
@given(max_rows=st.integers(1, 30), seed=st.integers(0, 10_000), ties=st.sampled_from(["include", "exclude"]),
       gw=st.sampled_from(["pair", "query", "size"]), global_group=st.booleans())
def test_any_cutting_any_order(max_rows, seed, ties, gw, global_group):
    """Split pieces, shuffled order, tree-merge: the same statistics."""
    rng = np.random.default_rng(seed)
    X, y, qid, gp = make_groups(rng, n_groups=5, max_size=9, levels=3)
    if global_group:
        qid, gp = None, np.array([0, len(y)])
    G, B, yLy, npairs = brute_stats(X, y, gp, gw, ties)
    src = sr.as_source(X, y, qid)
    parts = [block_statistics(b, group_weight=gw, ties=ties)
             for b in src.blocks(max_rows=max_rows, shuffle=True, random_state=seed, split_groups=True,
                                 prefetch=False)]
    while len(parts) > 1:  # pairwise tree reduction
        parts = [parts[i].merge(parts[i + 1]) if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    tot = parts[0]
    assert tot.is_complete
    np.testing.assert_allclose(tot.G, G, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(tot.B, B, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(tot.yLy, yLy, rtol=1e-9, atol=1e-9)
    assert tot.n_pairs == npairs


def test_multi_output_and_exclude_not_implemented(rng):
    X, y, qid, gp = make_groups(rng, n_outputs=3)
    G, _, _, _ = brute_stats(X, y, gp, "pair", "include")
    st_ = stream(sr.as_source(X, y, qid), 10, "pair", "include")
    Y = y
    L = brute_laplacian(len(y), pair_list(gp, Y[:, 0]))
    np.testing.assert_allclose(st_.B, X.T @ L @ Y, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(st_.yLy, np.diag(Y.T @ L @ Y), rtol=1e-10)
    with pytest.raises(NotImplementedError, match="own tie classes"):
        RankStatistics(4, 3, ties="exclude")


def test_incomplete_and_bad(rng):
    st_ = RankStatistics(2)
    X = rng.normal(size=(3, 2))
    st_.add_block(X, np.arange(3.0), [0, 3], group_size=[5], group_offset=[0], group_id=[7])
    assert not st_.is_complete
    with pytest.raises(ValueError, match="incomplete"):
        st_.check_complete()
    with pytest.raises(ValueError, match="group_id"):
        st_.add_block(X, np.arange(3.0), [0, 3], group_size=[5], group_offset=[0])
    with pytest.raises(ValueError, match="shape"):
        st_.add_block(rng.normal(size=(3, 4)), np.arange(3.0), [0, 3])
    with pytest.raises(ValueError, match="cannot merge"):
        st_.merge(RankStatistics(2, group_weight="size"))


def test_loss_and_persistence(rng):
    X, y, qid, gp = make_groups(rng)
    st_ = stream(sr.as_source(X, y, qid), 10, "query", "include")
    w = rng.normal(size=X.shape[1])
    L = brute_laplacian(len(y), pair_list(gp, y, group_weight="query"))
    r = y - X @ w
    np.testing.assert_allclose(st_.loss(w), [r @ L @ r], rtol=1e-10)
    st2 = RankStatistics.from_arrays(st_.to_arrays("p_"), group_weight="query", ties="include", prefix="p_")
    np.testing.assert_array_equal(st2.G, st_.G)
    assert (st2.n_rows, st2.n_groups, st2.n_pairs) == (st_.n_rows, st_.n_groups, st_.n_pairs)


def test_eigenpath(rng):
    A = rng.normal(size=(6, 4))
    G = A.T @ A
    B = rng.normal(size=(4, 2))
    ep = EigenPath(G, B)
    for a in (1e-3, 1.0, 100.0):
        np.testing.assert_allclose(ep.coef(a), np.linalg.solve(G + a * np.eye(4), B), rtol=1e-10)
        np.testing.assert_allclose(ep.inverse(a), np.linalg.inv(G + a * np.eye(4)), rtol=1e-9, atol=1e-12)
    assert ep.coefs([1.0, 2.0]).shape == (2, 4, 2)
    assert EigenPath(G, B[:, 0]).coefs([1.0, 2.0, 3.0]).shape == (3, 4)
    with pytest.raises(ValueError, match="alpha"):
        ep.coef(0.0)


def test_pickle_drops_the_scratch_workspace(rng):
    """Statistics travel as dask task results: O(n²) bytes, never the O(block) workspace."""
    import pickle

    X, y, qid, gp = make_groups(rng)
    st_ = RankStatistics(X.shape[1])
    W = st_.workspace(50_000)                       # 50,000 x (n + 1) float64 scratch
    W[: len(y), : X.shape[1]] = X
    st_.add_block(W[: len(y), : X.shape[1]], y, gp)
    blob = pickle.dumps(st_)
    assert len(blob) < W.nbytes / 20, (len(blob), W.nbytes)
    back = pickle.loads(blob)
    G, B, yLy, _ = brute_stats(X, y, gp, "pair", "include")
    np.testing.assert_allclose(back.G, G, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(back.B[:, 0], B[:, 0], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(st_.G, back.G, rtol=0, atol=0)


def test_views_of_the_workspace_that_are_not_the_block_layout_are_copied_first(rng):
    """Φ written into a larger workspace (or Y inside it) is read before the fill overwrites it."""
    X, y, qid, gp = make_groups(rng)
    n = X.shape[1]
    G, B, _, _ = brute_stats(X, y, gp, "pair", "include")
    st_ = RankStatistics(n)
    W = st_.workspace(10 * len(y))                  # leading dimension != rows: not the in-place layout
    W[: len(y), :n] = X
    W[: len(y), n] = y
    st_.add_block(W[: len(y), :n], W[: len(y), n], gp)
    np.testing.assert_allclose(st_.G, G, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(st_.B[:, 0], B[:, 0], rtol=1e-10, atol=1e-10)


def test_workspace_block_with_a_piece_is_refused_before_anything_is_added(rng):
    st_ = RankStatistics(2)
    W = st_.workspace(4)
    W[:, :2] = rng.normal(size=(4, 2))
    with pytest.raises(ValueError, match="whole groups only"):
        st_.add_block(W[:, :2], np.arange(4.0), [0, 4], group_size=[6], group_offset=[0], group_id=[1])
    assert st_.n_pairs == 0 and not np.any(st_.G)

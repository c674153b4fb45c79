"""sample_weight through the cluster (issue 23): a weighted source's statistics summed on real workers."""
from __future__ import annotations

import numpy as np

import streamrank as sr
from streamrank import distributed as srd
from streamrank.io.weighted import with_weights


def test_distributed_weighted_fit_and_folds_equal_local(client):
    rng = np.random.default_rng(5)
    sizes = rng.integers(2, 9, size=30)
    X = rng.normal(size=(int(sizes.sum()), 5))
    y = rng.integers(0, 3, size=len(X)).astype(float)
    qid = np.repeat(np.arange(30), sizes)
    w = rng.uniform(0.0, 2.0, size=len(X))
    src = with_weights(sr.as_source(X, y, qid), w)
    for ties in ("include", "exclude"):
        local = sr.RankRLS(alpha=0.5, solver="primal", ties=ties).fit(X, y, qid, sample_weight=w)
        dist = srd.fit(sr.RankRLS(alpha=0.5, solver="primal", ties=ties), src, client, max_rows=20,
                       split_every=2)
        np.testing.assert_allclose(dist.coef_, local.coef_, rtol=1e-10, atol=1e-12)
        unweighted = sr.RankRLS(alpha=0.5, solver="primal", ties=ties).fit(X, y, qid)
        assert not np.allclose(dist.coef_, unweighted.coef_, rtol=1e-3)   # the weights did reach the workers
    folds = srd.statistics(sr.RankRLS(solver="primal"), src, client, max_rows=20, folds=3)
    from streamrank.rankrls.selection import accumulate_folds

    ref = accumulate_folds(sr.RankRLS(solver="primal"), src, 3, 20)
    for a, b in zip(folds, ref):
        np.testing.assert_allclose(a.G, b.G, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(a.B, b.B, rtol=1e-10, atol=1e-10)


def test_distributed_pairwise_sgd_rounds_carry_row_weights(client):
    """Data-parallel PairwiseSGDRanker rounds on a weighted source: one shard = the rounds run locally on the
    weighted blocks (each round: partial_fit on the round's block, pairs weighing w_i w_j)."""
    import copy

    rng = np.random.default_rng(6)
    sizes = rng.integers(3, 9, size=40)
    X = rng.normal(size=(int(sizes.sum()), 5))
    y = rng.integers(0, 3, size=len(X)).astype(float)
    qid = np.repeat(np.arange(40), sizes)
    w = rng.uniform(0.0, 3.0, size=len(X))
    src = with_weights(sr.as_source(X, y, qid), w)
    rounds, steps, max_rows = 3, 120, 50
    dist = srd.fit(sr.PairwiseSGDRanker(eta0=0.05), src, client, rounds=rounds, steps_per_round=steps, n_shards=1,
                   max_rows=max_rows)
    m = sr.PairwiseSGDRanker(eta0=0.05).init_state(5)
    plan = src.plan(max_rows)
    for r in range(rounds):
        m = copy.deepcopy(m)
        b = src.read_block(*plan[r % len(plan)])
        m.partial_fit(with_weights(sr.as_source(b.X, b.y, b.row_qid()), w[b.start:b.stop]), n_pairs=steps)
    np.testing.assert_allclose(dist.coef_, m.coef_, rtol=1e-12, atol=1e-14)
    plain = srd.fit(sr.PairwiseSGDRanker(eta0=0.05), sr.as_source(X, y, qid), client, rounds=rounds,
                    steps_per_round=steps, n_shards=1, max_rows=max_rows)
    assert np.abs(plain.coef_ - dist.coef_).max() > 1e-4                # the weights did reach the workers


def test_distributed_cg_with_weighted_split_groups_equals_local(client):
    """One global group cut into pieces, row weights: the workers take W_g from the shipped weights."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(70, 4))
    y = rng.integers(0, 4, size=70).astype(float)
    w = rng.uniform(0.0, 2.0, size=70)
    src = with_weights(sr.as_source(X, y, None), w)
    args = dict(alpha=0.5, solver="cg", tol=1e-12, max_iter=200)
    local = sr.RankRLS(**args).fit(X, y, None, sample_weight=w, max_rows=9)
    dist = srd.fit(sr.RankRLS(**args), src, client, max_rows=9, split_every=2)
    np.testing.assert_allclose(dist.coef_, local.coef_, rtol=1e-9, atol=1e-12)
    primal = sr.RankRLS(alpha=0.5, solver="primal").fit(X, y, None, sample_weight=w)
    np.testing.assert_allclose(dist.coef_, primal.coef_, rtol=1e-8, atol=1e-10)


def test_distributed_cg_weighted_ties_exclude_on_split_groups_equals_local(client, monkeypatch):
    """Row weights with ties="exclude" on a group cut into pieces: the tie table is built from the workers'
    weighted pieces (class weight sums W_c, weighted class sums), cached and uncached; = local = dense solve."""
    from streamrank.rankrls import _split_groups

    rng = np.random.default_rng(8)
    X = rng.normal(size=(70, 4))
    y = rng.integers(0, 3, size=70).astype(float)
    w = rng.uniform(0.0, 2.0, size=70)
    src = with_weights(sr.as_source(X, y, None), w)
    args = dict(alpha=0.5, solver="cg", ties="exclude", tol=1e-13, max_iter=300)
    local = sr.RankRLS(**args).fit(X, y, None, sample_weight=w, max_rows=9)
    L = np.zeros((70, 70))
    for i in range(70):
        for j in range(i + 1, 70):
            if y[i] != y[j]:
                e = np.zeros(70)
                e[i], e[j] = 1.0, -1.0
                L += w[i] * w[j] * np.outer(e, e)
    ref = np.linalg.solve(X.T @ L @ X + 0.5 * np.eye(4), X.T @ L @ y)
    np.testing.assert_allclose(local.coef_, ref, rtol=1e-8, atol=1e-10)
    for cache in (_split_groups.TIE_CACHE_ENTRIES, 0):    # class sums cached; uncached (second sweep)
        monkeypatch.setattr(_split_groups, "TIE_CACHE_ENTRIES", cache)
        dist = srd.fit(sr.RankRLS(**args), src, client, max_rows=9, split_every=2)
        np.testing.assert_allclose(dist.coef_, ref, rtol=1e-8, atol=1e-10)
        assert dist.cg_info_["n_passes"] > local.cg_info_["n_passes"] or cache


def test_distributed_fit_from_a_store_s_weight_and_click_columns(client, tmp_path):
    """The store's column views travel to the workers as (store path, commit, column): each worker reads its
    blocks' weights / clicks and positions; the cluster fit equals the local one (issue 23)."""
    import pickle

    from streamrank.io.weighted import ips_weighted

    rng = np.random.default_rng(7)
    sizes = rng.integers(2, 10, size=40)
    n = int(sizes.sum())
    X = rng.normal(size=(n, 5)).astype(np.float32)
    qid = np.repeat(np.arange(40), sizes)
    pos = np.concatenate([np.arange(1, s + 1) for s in sizes])
    click = (rng.random(n) < 0.3).astype(float)
    store = sr.GroupStore.create(tmp_path / "clicks.zarr", 5, chunk_rows=32, row_columns=("weight", "click",
                                                                                           "position"))
    store.append(X, click, qid, weight=rng.uniform(0.0, 2.0, size=n), click=click, position=pos)
    store = sr.GroupStore.open(tmp_path / "clicks.zarr")
    p = 1.0 / np.arange(1, 10)
    for src, ties in ((with_weights(store, "weight"), "include"), (ips_weighted(store, p, clip=0.2), "exclude")):
        assert len(pickle.dumps(src)) < 4000             # path + commit + column names, never rows
        local = sr.RankRLS(alpha=0.5, solver="primal", ties=ties).fit(src, max_rows=40)
        dist = srd.fit(sr.RankRLS(alpha=0.5, solver="primal", ties=ties), src, client, max_rows=40, split_every=2)
        np.testing.assert_allclose(dist.coef_, local.coef_, rtol=1e-10, atol=1e-12)
        plain = sr.RankRLS(alpha=0.5, solver="primal", ties=ties).fit(store, max_rows=40)
        assert not np.allclose(dist.coef_, plain.coef_, rtol=1e-3)       # the weights did reach the workers

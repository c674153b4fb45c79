"""Distributed cg RankRLS with ties="exclude" on groups split across blocks (qid=None: one global group).

Real LocalCluster (2 worker processes, one per module).  Oracles: the local
cg operator and fit (streamrank.rankrls.cg) and the all-pairs brute force,
in the three ways a split group's class sums are handled (_split_groups.TieTable:
cached in one setup pass, cached after a second setup pass over the pieces,
not cached = a second sweep per product).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from streamrank.distributed import _cg as dcg
from streamrank import distributed as srd
from streamrank.distributed import _cluster
from streamrank.rankrls import _split_groups, cg

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reference"))
from rankrls_reference import brute_rankrls  # noqa: E402

pytestmark = pytest.mark.distributed

MAX_ROWS = 16
N_FEATURES = 4


def _data(n_outputs, sparse, seed=7):
    """120 rows, targets rounded to 0.1 (many tied classes, many distinct values); one output: qid=None,
    two outputs: a split group of 90 rows and five whole groups of 6."""
    rng = np.random.default_rng(seed)
    m = 120
    X = rng.normal(size=(m, N_FEATURES))
    w = np.array([1.0, -0.5, 0.0, 0.3])[:, None] * np.array([1.0, -1.0])[:n_outputs]
    y = np.round(X @ w + rng.normal(size=(m, n_outputs)), 1)
    if sparse:
        X[np.abs(X) < 0.5] = 0.0
        X = sp.csr_matrix(X)
    if n_outputs == 1:
        return X, y[:, 0], None, np.array([0, m])
    qid = np.r_[np.zeros(90, np.int64), np.repeat(np.arange(1, 6), 6)]
    return X, y, qid, np.r_[0, np.arange(90, m + 1, 6)]


def _budget(mode, src):
    """TIE_CACHE_ENTRIES giving ``mode`` on ``src`` at MAX_ROWS."""
    if mode == "cached":
        return 1 << 20
    if mode == "uncached":
        return 0
    counts = _split_groups.TieTable.build(src, MAX_ROWS, 0)
    n_tied = sum(int((t[2] >= 0).sum()) for ent in counts.groups.values() for t in ent)
    return n_tied * src.n_features       # the tied classes' sums fit, all distinct values' do not


@pytest.fixture(params=["cached", "two-pass", "uncached"])
def mode(request):
    return request.param


def _setup(mode, n_outputs, sparse, monkeypatch):
    X, y, qid, gp = _data(n_outputs, sparse)
    src = sr.as_source(X, y, qid)
    monkeypatch.setattr(_split_groups, "TIE_CACHE_ENTRIES", _budget(mode, src))
    tab = _split_groups.TieTable.build(src, MAX_ROWS)
    assert (tab.cached, tab.n_passes) == {"cached": (True, 1), "two-pass": (True, 2),
                                          "uncached": (False, 1)}[mode]
    return X, y, qid, gp, src


def _rel(a, b):
    return np.abs(np.asarray(a) - b).max() / max(np.abs(b).max(), 1e-300)


@pytest.mark.parametrize("n_outputs", [1, 2])
@pytest.mark.parametrize("sparse", [False, True])
def test_operator_products_equal_local(client, mode, n_outputs, sparse, monkeypatch):
    """rhs, products and the Jacobi diagonal of the distributed operator equal the local operator's."""
    X, y, qid, gp, src = _setup(mode, n_outputs, sparse, monkeypatch)
    local = cg.RankingOperator(src, alpha=0.5, ties="exclude", group_weight="query", max_rows=MAX_ROWS)
    ref = _cluster._ship_source(client, src)
    plan = src.plan(MAX_ROWS, split_groups=True)
    pieces = dcg.pieces_of_plan(plan, src.group_ptr)
    assert len(pieces) >= 6 and len(pieces) < len(plan) + (n_outputs == 1)
    dist = dcg.DistributedRankingOperator(client, ref, plan, N_FEATURES, n_outputs, alpha=0.5, group_weight="query",
                                          ties="exclude", split_every=3, pieces=pieces, max_rows=MAX_ROWS)
    V = np.random.default_rng(1).normal(size=(N_FEATURES, n_outputs))
    for a, b in ((dist.rhs(), local.rhs()), (dist.matmat(V), local.matmat(V)),
                 (dist.gram_diagonal(), local.gram_diagonal())):
        assert _rel(a, b) < 1e-12
    assert dist.ties_table().cached == local.ties_table().cached
    assert dist.n_passes == local.n_passes
    assert dist.n_scatters == 1 and dist.n_class_scatters == (2 if mode == "uncached" else 0)
    # the table's sums stay on the client; the workers got the table without them
    assert all(t[3] is None for ent in client.gather(dist._table_ref).groups.values() for t in ent)


@pytest.mark.parametrize("n_outputs,sparse", [(1, False), (2, True)])   # products: the full grid above
def test_fit_equals_local_fit_and_brute_force(client, mode, n_outputs, sparse, monkeypatch):
    X, y, qid, gp, src = _setup(mode, n_outputs, sparse, monkeypatch)
    kw = dict(alpha=0.5, solver="cg", ties="exclude", tol=1e-12)
    local = sr.RankRLS(**kw).fit(X, y, qid, max_rows=MAX_ROWS)
    dist = srd.fit(sr.RankRLS(**kw), src, client, max_rows=MAX_ROWS, split_every=3)
    assert dist.solver_ == "cg" and dist.cg_info_["converged"]
    assert dist.cg_info_["n_scatters"] == dist.n_iter_          # the vector is scattered once per iteration
    assert abs(dist.n_iter_ - local.n_iter_) <= 1
    assert dist.coef_.shape == local.coef_.shape
    assert _rel(dist.coef_, local.coef_) < 1e-9
    assert _rel(dist.coef_, brute_rankrls(X, y, gp, 0.5, ties="exclude")) < 1e-8


def test_fit_from_store_global_group(client, tmp_path):
    """A GroupStore holding one query (the workers read their pieces by path): same model as the local fit."""
    X, y, _, gp = _data(1, False, seed=3)
    store = sr.GroupStore.create(tmp_path / "one.zarr", n_features=N_FEATURES)
    store.append(X.astype(np.float32), y, np.zeros(len(y), np.int64), batch_id="all")
    store = sr.GroupStore.open(tmp_path / "one.zarr")
    kw = dict(alpha=1.0, solver="cg", ties="exclude", group_weight="size", tol=1e-12)
    local = sr.RankRLS(**kw).fit(store, max_rows=MAX_ROWS)
    dist = srd.fit(sr.RankRLS(**kw), store, client, max_rows=MAX_ROWS, split_every=2)
    assert srd.SourceRef(store).kind == "group_store"
    assert _rel(dist.coef_, local.coef_) < 1e-9
    assert _rel(dist.coef_, brute_rankrls(X.astype(np.float32).astype(np.float64), y, gp, 1.0,
                                          group_weight="size", ties="exclude")) < 1e-8


def test_all_tied_global_group_learns_nothing(client):
    X = np.random.default_rng(0).normal(size=(40, 3))
    m = srd.fit(sr.RankRLS(alpha=1.0, solver="cg", ties="exclude"), sr.as_source(X, np.full(40, 2.0), None),
                client, max_rows=8)
    np.testing.assert_array_equal(m.coef_, 0.0)


def test_whole_groups_need_no_table(client, rng=np.random.default_rng(4)):  # noqa: B008  (a fixed seed)
    """ties='exclude' with no group cut (every block holds whole groups): no setup pass, same model."""
    X = rng.normal(size=(96, N_FEATURES))
    y = np.round(X[:, 0] + rng.normal(size=96))
    qid = np.repeat(np.arange(16), 6)
    src = sr.as_source(X, y, qid)
    kw = dict(alpha=0.5, solver="cg", ties="exclude", tol=1e-12)
    local = sr.RankRLS(**kw).fit(src, max_rows=MAX_ROWS)
    dist = srd.fit(sr.RankRLS(**kw), src, client, max_rows=MAX_ROWS, split_every=3)
    assert dist.cg_info_["n_passes"] == local.cg_info_["n_passes"]
    assert _rel(dist.coef_, local.coef_) < 1e-9
    assert _rel(dist.coef_, brute_rankrls(X, y, np.arange(0, 97, 6), 0.5, ties="exclude")) < 1e-8

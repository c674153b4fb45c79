"""Synthetic generators: shapes, labels, chunk independence, hidden model, stores, recipe script."""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from streamrank.datasets import synthetic as syn

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_recipe(name):
    return importlib.import_module(f"streamrank.recipes.{name}")


@pytest.mark.parametrize("chunk_rows", [1, 37, 500, 5000])
def test_chunks_do_not_change_the_data(chunk_rows):
    X, y, q = syn.make_letor_like(3000, 8, group_size=(3, 30), random_state=4)
    parts = list(syn.letor_like_chunks(3000, 8, group_size=(3, 30), random_state=4, chunk_rows=chunk_rows))
    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), X)
    np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), y)
    np.testing.assert_array_equal(np.concatenate([p[2] for p in parts]), q)
    for a, b in zip(parts, parts[1:]):
        assert a[2][-1] != b[2][0]                        # chunks end on group boundaries
        assert len(a[1]) <= max(chunk_rows, 30)
    assert X.shape == (3000, 8) and X.dtype == np.float32
    assert set(np.unique(y)) <= {0.0, 1.0, 2.0, 3.0, 4.0}
    sizes = np.diff(np.flatnonzero(np.r_[True, q[1:] != q[:-1], True]))
    assert sizes[:-1].min() >= 3 and sizes.max() <= 30
    assert np.all(np.diff(q) >= 0)


def test_hidden_model_ranks_well_and_is_shared_by_seeds():
    X, y, q, model = syn.make_letor_like(20_000, 10, random_state=1, return_model=True)
    Xt, yt, qt, model2 = syn.make_letor_like(5_000, 10, random_state=2, return_model=True)
    np.testing.assert_array_equal(model.w, model2.w)
    assert not np.array_equal(X[:100], Xt[:100])
    frac = np.bincount(y.astype(int), minlength=5) / len(y)
    np.testing.assert_allclose(frac, [0.5, 0.3, 0.12, 0.05, 0.03], atol=0.03)
    good = sr.metrics.disagreement(yt, model.relevance(Xt), qt)
    rand = sr.metrics.disagreement(yt, np.random.default_rng(0).random(len(yt)), qt)
    assert good < 0.15 and abs(rand - 0.5) < 0.03


def test_nonlinear_model_is_not_linear():
    X, y, q, m = syn.make_letor_like(20_000, 10, nonlinear=True, random_state=1, return_model=True)
    lin = np.linalg.lstsq(np.c_[X, np.ones(len(y))], m.relevance(X), rcond=None)[0]
    s_lin = np.c_[X, np.ones(len(y))] @ lin
    assert sr.metrics.ndcg(y, m.relevance(X), q) > sr.metrics.ndcg(y, s_lin, q) + 0.1


def test_sparse_and_density():
    X, y, q = syn.make_letor_like(500, 20, density=0.2, sparse=True, random_state=0)
    assert sp.issparse(X) and X.dtype == np.float32
    assert 0.15 < X.nnz / (500 * 20) < 0.25


def test_bad_arguments():
    with pytest.raises(ValueError, match="group_size"):
        list(syn.letor_like_chunks(10, 3, group_size=(5, 2)))
    with pytest.raises(ValueError, match="density"):
        list(syn.letor_like_chunks(10, 3, density=0))
    with pytest.raises(ValueError, match="n_rows"):
        list(syn.letor_like_chunks(-1, 3))
    assert list(syn.letor_like_chunks(0, 3)) == []


def test_planted_bilinear_tuples_are_ordered_by_W():
    data = syn.planted_bilinear(200, n_train=2000, n_test=500, random_state=3)
    Q, D, t, W = data.Q, data.D, data.tuples, data.W
    assert t.shape == (2000, 3) and t.min() >= 0
    assert t[:, 0].max() < Q.shape[0] and t[:, 1:].max() < D.shape[0]
    s_pos = np.asarray((Q[t[:, 0]] @ W).multiply(D[t[:, 1]]).sum(axis=1)).ravel()
    s_neg = np.asarray((Q[t[:, 0]] @ W).multiply(D[t[:, 2]]).sum(axis=1)).ravel()
    assert np.all(s_pos > s_neg)
    norms = np.sqrt(np.asarray(Q.multiply(Q).sum(axis=1)).ravel())
    np.testing.assert_allclose(norms, 1.0, rtol=1e-5)
    assert Q.min() >= 0 and D.min() >= 0
    Qt, Dp, Dn = data.test
    assert Qt.shape[0] == Dp.shape[0] == Dn.shape[0] == 500
    w_pos = np.asarray((Qt @ W).multiply(Dp).sum(axis=1)).ravel()
    w_neg = np.asarray((Qt @ W).multiply(Dn).sum(axis=1)).ravel()
    assert sr.metrics.tuple_error(w_pos, w_neg) == 0.0
    W2, _, _ = syn.planted_W(200)
    assert (W2 != W).nnz == 0
    assert len(data.train) == 2000


@pytest.mark.slow   # builds the synthetic stores: ~1.3 s warm
def test_stores_and_recipe(tmp_path, capsys):
    store = syn.write_letor_like_store(tmp_path / "g.zarr", 1234, 6, chunk_rows=300, random_state=2)
    X, y, q = syn.make_letor_like(1234, 6, random_state=2)
    assert store.n_rows == 1234 and store.n_groups == len(np.unique(q))
    blocks = list(store.blocks(max_rows=10_000))
    np.testing.assert_array_equal(np.concatenate([b.X for b in blocks]), X)
    np.testing.assert_array_equal(np.concatenate([b.y for b in blocks]), y)
    rec = load_recipe("synthetic")
    assert rec.main(["--rows", "800", "--features", "5", "--group-size", "2", "9", "--nonlinear",
                     "--chunk-rows", "100", "--out", str(tmp_path / "r.zarr")]) == 0
    out = capsys.readouterr().out
    assert "Citation:" in out and "800 rows" in out
    r = sr.GroupStore.open(tmp_path / "r.zarr")
    assert r.n_rows == 800 and r.n_features == 5
    assert rec.main(["--tuples", "900", "--features", "50", "--chunk-tuples", "400",
                     "--out", str(tmp_path / "t.zarr")]) == 0
    ts = sr.TupleStore.open(tmp_path / "t.zarr")
    assert ts.n_tuples == 900
    W = sp.load_npz(tmp_path / "t.zarr.W.npz")
    assert (W != syn.planted_W(50)[0]).nnz == 0
    with pytest.raises(SystemExit):
        rec.main(["--help"])

"""sr.save / sr.load for EVERY learner: identical predictions after loading; clear errors.

Each learner is fitted on small data, saved (a zarr group: class name,
``get_params()``, format version in attributes, learned arrays as arrays — no
pickle), loaded and compared bit for bit.  A model of a newer format version,
a damaged model and a store passed as a model give :class:`ModelFormatError`
with a message saying what is wrong.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from streamrank.persistence import MODEL_FORMAT_VERSION, ModelFormatError


def _ranking_data(seed=0, rows=48, n=5, groups=6, outputs=None):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, n))
    W = rng.normal(size=(n,) if outputs is None else (n, outputs))
    y = X @ W + 0.1 * rng.normal(size=(rows,) if outputs is None else (rows, outputs))
    qid = np.repeat(np.arange(groups), rows // groups)
    return X, y, qid


def _tuples(seed=0, n_q=30, n_d=40, dim=12, n_t=300):
    rng = np.random.default_rng(seed)
    Q = sp.random(n_q, dim, density=0.3, random_state=seed, format="csr")
    D = sp.random(n_d, dim, density=0.3, random_state=seed + 1, format="csr")
    t = np.column_stack([rng.integers(0, n_q, n_t), rng.integers(0, n_d, n_t), rng.integers(0, n_d, n_t)])
    return Q, D, t


def _fit_rankrls_primal():
    X, y, qid = _ranking_data()
    m = sr.RankRLS(alpha=0.7, solver="primal", group_weight="query")
    m.cross_validate(sr.as_source(X, y, qid), alphas=[0.1, 1.0, 10.0], folds=3)
    return m, X


def _fit_rankrls_cg():
    X, y, qid = _ranking_data(1)
    return sr.RankRLS(alpha=2.0, solver="cg", tol=1e-10).fit(sp.csr_matrix(X), y, qid), sp.csr_matrix(X)


def _fit_rankrls_multi():
    X, y, qid = _ranking_data(2, outputs=3)
    return sr.RankRLS(alpha=0.5, group_weight="size").fit(X, y, qid), X


def _fit_kernel_dual():
    X, y, qid = _ranking_data(3)
    return sr.KernelRankRLS(kernel="rbf", gamma=0.3, alpha=0.5).fit(X, y, qid), X


def _fit_kernel_sparse():
    X, y, qid = _ranking_data(4)
    return sr.KernelRankRLS(kernel="poly", gamma=0.5, degree=2, coef0=1.0, alpha=1.0, n_basis=10,
                            random_state=7).fit(X, y, qid), X


def _fit_transductive():
    X, y, qid = _ranking_data(5)
    m = sr.TransductiveRankRLS(kernel="rbf", gamma=0.3, alpha=1.0, gamma_t=0.5)
    m.fit_predict(X[:30], y[:30], qid[:30], X[30:], qid[30:] + 100)
    return m, X


def _fit_sgd_bilinear():
    Q, D, t = _tuples()
    src = sr.TupleStore.from_arrays(Q, D, t) if hasattr(sr.TupleStore, "from_arrays") else None
    m = sr.SparseSGDRanker(eta0=2.0, l1=1e-3, shrink_every=10, auto_refit=True, random_state=1)
    m.fit(src, n_steps=400, batch_size=64, shuffle_buffer=0)
    return m, (Q[t[:50, 0]], D[t[:50, 1]])


def _fit_sgd_pairwise():
    X, y, qid = _ranking_data(6)
    m = sr.PairwiseSGDRanker()
    m.partial_fit(X, y, qid)
    return m, X


FITTERS = {
    "RankRLS-primal+folds": _fit_rankrls_primal,
    "RankRLS-cg-sparse": _fit_rankrls_cg,
    "RankRLS-multioutput": _fit_rankrls_multi,
    "KernelRankRLS-dual": _fit_kernel_dual,
    "KernelRankRLS-sparse": _fit_kernel_sparse,
    "TransductiveRankRLS": _fit_transductive,
    "SparseSGDRanker": _fit_sgd_bilinear,
    "PairwiseSGDRanker": _fit_sgd_pairwise,
}


def _scores(model, data):
    if isinstance(model, sr.SparseSGDRanker):
        Qs, Ds = data
        return model.predict(Qs, Ds)
    return model.predict(data)


@pytest.mark.parametrize("name", list(FITTERS))
def test_roundtrip_identical_predictions(name, tmp_path):
    model, data = FITTERS[name]()
    path = tmp_path / "model.zarr"
    sr.save(model, path)
    loaded = sr.load(path)
    assert type(loaded) is type(model)
    assert loaded.get_params() == model.get_params()
    before, after = _scores(model, data), _scores(loaded, data)
    assert before.shape == after.shape
    np.testing.assert_array_equal(after, before)
    # the on-disk layout: a zarr group with class, params and version; no pickle anywhere
    meta = json.loads((path / "zarr.json").read_text())["attributes"]
    assert meta["class"] == type(model).__name__
    assert meta["format_version"] == MODEL_FORMAT_VERSION
    assert meta["params"] == json.loads(json.dumps(sr.persistence._jsonable(model.get_params())))
    for f in path.rglob("*"):
        if f.is_file():
            assert b"\x80\x04\x95" not in f.read_bytes()[:3], f"pickle header in {f}"
    # saving the loaded model again gives the same predictions (a second generation)
    sr.save(loaded, tmp_path / "again.zarr")
    np.testing.assert_array_equal(_scores(sr.load(tmp_path / "again.zarr"), data), before)


def test_sgd_bilinear_resumes_after_load(tmp_path):
    """The shrinkage state is saved: fit, save, load, continue == one long run."""
    Q, D, t = _tuples(9)
    a, b = t[:200], t[200:]
    one = sr.SparseSGDRanker(eta0=1.0, l1=1e-3, shrink_every=7, auto_refit=False)
    one.partial_fit(Q[t[:, 0]], D[t[:, 1]], D[t[:, 2]])
    half = sr.SparseSGDRanker(eta0=1.0, l1=1e-3, shrink_every=7, auto_refit=False)
    half.partial_fit(Q[a[:, 0]], D[a[:, 1]], D[a[:, 2]])
    sr.save(half, tmp_path / "half.zarr")
    resumed = sr.load(tmp_path / "half.zarr")
    resumed.partial_fit(Q[b[:, 0]], D[b[:, 1]], D[b[:, 2]])
    np.testing.assert_allclose(resumed.W_.toarray(), one.W_.toarray(), rtol=1e-12, atol=1e-14)
    assert resumed.t_ == one.t_


def _saved(tmp_path):
    model, X = _fit_rankrls_multi()
    path = tmp_path / "m.zarr"
    sr.save(model, path)
    return path, model, X


def _set_attr(path, **kw):
    doc = json.loads((path / "zarr.json").read_text())
    doc["attributes"].update(kw)
    (path / "zarr.json").write_text(json.dumps(doc))


def test_newer_format_version_is_refused(tmp_path):
    path, _, _ = _saved(tmp_path)
    _set_attr(path, format_version=MODEL_FORMAT_VERSION + 1)
    with pytest.raises(ModelFormatError, match=r"format version 2.*upgrade streamrank"):
        sr.load(path)


def test_unknown_class_is_refused(tmp_path):
    path, _, _ = _saved(tmp_path)
    _set_attr(path, **{"class": "os.system"})
    with pytest.raises(ModelFormatError, match="unknown model class"):
        sr.load(path)


def test_missing_array_is_refused(tmp_path):
    path, _, _ = _saved(tmp_path)
    shutil.rmtree(path / "coef_")
    with pytest.raises(ModelFormatError, match="coef_.*missing or damaged"):
        sr.load(path)


def test_garbage_metadata_is_refused(tmp_path):
    path, _, _ = _saved(tmp_path)
    (path / "zarr.json").write_text("{ not json")
    with pytest.raises(ModelFormatError, match="not a readable streamrank model"):
        sr.load(path)


def test_store_is_not_a_model(tmp_path):
    X, y, qid = _ranking_data()
    store = sr.GroupStore.create(tmp_path / "s.zarr", X.shape[1])
    store.append(X, y, qid)
    with pytest.raises(ModelFormatError, match="not a streamrank model"):
        sr.load(tmp_path / "s.zarr")


def test_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no model"):
        sr.load(tmp_path / "nothing.zarr")


def test_replacing_keeps_a_loadable_model(tmp_path):
    """Saving over a model is atomic: afterwards exactly the new model, no temporaries left."""
    path, model, X = _saved(tmp_path)
    other = sr.RankRLS(alpha=50.0).fit(X, model.predict(X), np.repeat(np.arange(6), 8))
    sr.save(other, path)
    np.testing.assert_array_equal(sr.load(path).predict(X), other.predict(X))
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["m.zarr"]

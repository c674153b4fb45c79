"""SparseSGDRanker(normalize=): scale-only normalizers of the query and item spaces (module doc of
streamrank.sgd.bilinear): fit equals the fit on pre-scaled Q and D, predict/save/load/export apply them."""
import json
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from streamrank.io.tuples import TupleSource


def _source(seed=0, nq=30, nd=40, n_q=12, n_d=15, n_t=300):
    rng = np.random.default_rng(seed)
    # features on very different scales, so the normalizers matter
    Q = sp.random(nq, n_q, density=0.3, random_state=seed, format="csr") @ sp.diags(rng.uniform(0.1, 50, n_q))
    D = sp.random(nd, n_d, density=0.3, random_state=seed + 1, format="csr") @ sp.diags(rng.uniform(0.1, 50, n_d))
    Q.data -= 0.3 * Q.data.max()       # negative values too (max − min ≠ max)
    t = np.stack([rng.integers(0, nq, n_t), rng.integers(0, nd, n_t), rng.integers(0, nd, n_t)], axis=1)
    return Q.tocsr(), D.tocsr(), t


class _Prescaled:
    """The batches of ``src`` (same seed, same order) with float64 rows pre-scaled by 1/s and 1/u."""

    def __init__(self, src, s, u):
        self.src, self.s, self.u = src, sp.diags(1 / s), sp.diags(1 / u)
        self.n_query_features, self.n_item_features = src.n_query_features, src.n_item_features

    def batches(self, **kw):
        for b in self.src.batches(**kw):
            f = lambda M, S: sp.csr_matrix(M.astype(np.float64) @ S)  # noqa: E731
            yield SimpleNamespace(Q=f(b.Q, self.s), D_pos=f(b.D_pos, self.u), D_neg=f(b.D_neg, self.u))


def _scales(M, kind):
    A = M.toarray().astype(np.float64)
    s = A.std(axis=0) if kind == "standard" else A.max(axis=0) - A.min(axis=0)
    return np.where(s > 0, s, 1.0)


PARAMS = dict(eta0=0.5, l1=1e-3, shrink_every=7, init="zeros", refit_steps=150)


@pytest.mark.parametrize("kind", ["standard", "minmax"])
def test_fit_equals_fit_on_prescaled_features(kind):
    src = TupleSource.from_arrays(*_source())
    (Q, D), t = src.matrices(), src.read_tuples()[0]     # the stored (float32) vectors
    s, u = _scales(Q, kind), _scales(D, kind)
    m = sr.SparseSGDRanker(normalize=kind, **PARAMS).fit(src, n_steps=400, batch_size=64, shuffle_buffer=100)
    ref = sr.SparseSGDRanker(**PARAMS).fit(_Prescaled(src, s, u), n_steps=400, batch_size=64,
                                           shuffle_buffer=100)
    np.testing.assert_allclose(m.query_normalizer_.scale, s, rtol=1e-12)
    np.testing.assert_allclose(m.item_normalizer_.scale, u, rtol=1e-12)
    assert not m.query_normalizer_.offset.any() and not m.item_normalizer_.offset.any()   # scale only
    assert m.nnz_ > 0 and m.refit_t_ == 150
    np.testing.assert_allclose(m.W_.toarray(), ref.W_.toarray(), rtol=0, atol=1e-10)
    # predict scales raw rows: (q/s)ᵀ W (d/t)
    Qr, Dr = Q[t[:50, 0]], D[t[:50, 1]]
    expected = np.einsum("ij,jk,ik->i", Qr.toarray() / s, m.W_.toarray(), Dr.toarray() / u)
    np.testing.assert_allclose(m.predict(Qr, Dr), expected, rtol=1e-10, atol=1e-12)
    # the unscaled model differs: the scales are used
    raw = sr.SparseSGDRanker(**PARAMS).fit(src, n_steps=400, batch_size=64, shuffle_buffer=100)
    assert not np.allclose(raw.W_.toarray(), m.W_.toarray())


def test_partial_fit_first_batch_fixes_the_scales():
    Q, D, t = _source(seed=3)
    b1, b2 = t[:100], t[100:]
    m = sr.SparseSGDRanker(normalize="standard", **PARAMS)
    m.partial_fit(Q[b1[:, 0]], D[b1[:, 1]], D[b1[:, 2]])
    s = _scales(Q[b1[:, 0]], "standard")
    u = _scales(sp.vstack([D[b1[:, 1]], D[b1[:, 2]]]), "standard")
    np.testing.assert_allclose(m.query_normalizer_.scale, s, rtol=1e-12)
    np.testing.assert_allclose(m.item_normalizer_.scale, u, rtol=1e-12)
    m.partial_fit(Q[b2[:, 0]], D[b2[:, 1]], D[b2[:, 2]])
    np.testing.assert_allclose(m.query_normalizer_.scale, s, rtol=1e-12)          # kept by the 2nd batch
    ref = sr.SparseSGDRanker(**PARAMS)
    for b in (b1, b2):
        ref.partial_fit(Q[b[:, 0]] @ sp.diags(1 / s), D[b[:, 1]] @ sp.diags(1 / u), D[b[:, 2]] @ sp.diags(1 / u))
    np.testing.assert_allclose(m.W_.toarray(), ref.W_.toarray(), rtol=0, atol=1e-10)


def test_save_load_round_trip_and_bad_state(tmp_path):
    Q, D, t = _source(seed=5)
    m = sr.SparseSGDRanker(normalize="minmax", **PARAMS).fit(TupleSource.from_arrays(Q, D, t), n_steps=200,
                                                             batch_size=64, shuffle_buffer=0)
    sr.save(m, tmp_path / "m")
    back = sr.load(tmp_path / "m")
    assert back.normalize == "minmax" and back.query_normalizer_.kind == "minmax"
    np.testing.assert_array_equal(back.query_normalizer_.scale, m.query_normalizer_.scale)
    np.testing.assert_array_equal(back.item_normalizer_.scale, m.item_normalizer_.scale)
    Qr, Dr = Q[t[:40, 0]], D[t[:40, 1]]
    np.testing.assert_array_equal(back.predict(Qr, Dr), m.predict(Qr, Dr))
    # load validation of the scales
    attrs, arrays = m._get_state()
    fresh = sr.SparseSGDRanker()
    with pytest.raises(ValueError, match="item_scale"):
        fresh._set_state(attrs, {**arrays, "item_scale": arrays["item_scale"][:-1]})
    with pytest.raises(ValueError, match="query_scale.*> 0"):
        fresh._set_state(attrs, {**arrays, "query_scale": np.zeros_like(arrays["query_scale"])})
    with pytest.raises(ValueError, match="scales_kind"):
        fresh._set_state({**attrs, "scales_kind": "robust"}, arrays)


def test_bad_normalize_value_is_rejected():
    Q, D, t = _source()
    with pytest.raises(ValueError, match="normalize must be one of"):
        sr.SparseSGDRanker(normalize="l2").fit(TupleSource.from_arrays(Q, D, t), n_steps=10)
    with pytest.raises(ValueError, match="normalize must be one of"):
        sr.SparseSGDRanker(normalize=True).partial_fit(Q[:5], D[:5], D[5:10])


@pytest.mark.parametrize("graph", ["dense", "gather"])
def test_export_folds_the_scales_into_w(tmp_path, graph):
    ort = pytest.importorskip("onnxruntime")
    Q, D, t = _source(seed=7)
    m = sr.SparseSGDRanker(normalize="standard", **PARAMS).fit(TupleSource.from_arrays(Q, D, t), n_steps=300,
                                                               batch_size=64, shuffle_buffer=0)
    Qr, Dr = Q[t[:60, 0]], D[t[:60, 1]]
    expected = m.predict(Qr, Dr)
    sr.export(m, tmp_path / "b.onnx", format="onnx", bilinear_graph=graph)
    Qf, Df = Qr.toarray().astype(np.float32), Dr.toarray().astype(np.float32)
    got = ort.InferenceSession(str(tmp_path / "b.onnx")).run(None, {"Q": Qf, "D": Df})[0]
    exact32 = m.predict(Qf.astype(np.float64), Df.astype(np.float64))   # the float32 rows' exact scores
    np.testing.assert_allclose(got, exact32, rtol=1e-5, atol=1e-5 * np.abs(exact32).max())
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    sr.export(m, tmp_path / "b.json", format="json")
    doc = json.loads((tmp_path / "b.json").read_text())
    W = sp.coo_matrix((doc["W"]["value"], (doc["W"]["row"], doc["W"]["col"])), shape=doc["W"]["shape"])
    np.testing.assert_allclose(np.einsum("ij,jk,ik->i", Qr.toarray(), W.toarray(), Dr.toarray()), expected,
                               rtol=1e-10, atol=1e-12)

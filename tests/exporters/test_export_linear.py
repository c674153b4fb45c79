"""Linear models out: every format scored by an independent implementation on held-out MQ2008 rows.

OpenSearch / Elasticsearch / Solr JSON are scored by ``tests/reference/ltr_scorers.py`` (the
plugins' parser, normalizer and ranker classes re-done in float32, with the feature set in a
different order than the model's columns); ONNX by onnxruntime; JSON by the formulas of its
documentation.  Each must equal ``model.predict`` on the same float32 rows to 1e-5 of the largest
score and rank every MQ2008 test query the same way.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import streamrank as sr
from streamrank.exporters import CannotExport

from export_testdata import NAMES, assert_serves_like_predict
from ltr_scorers import score_json_model, score_opensearch, score_solr

LEARNERS = {
    "rankrls-primal": lambda norm: sr.RankRLS(alpha=1.0, solver="primal", normalize=norm),
    "rankrls-cg": lambda norm: sr.RankRLS(alpha=1.0, solver="cg", tol=1e-10, normalize=norm),
    "pairwise-sgd": lambda norm: sr.PairwiseSGDRanker(eta0=0.05, l1=1e-5, normalize=norm),
}


def _fit(kind, norm, mq2008):
    Xtr, ytr, qtr = mq2008[:3]
    model = LEARNERS[kind](norm)
    if kind == "pairwise-sgd":
        return model.fit(Xtr, ytr, qtr, n_pairs=20_000, feature_names=NAMES)
    return model.fit(Xtr, ytr, qtr, feature_names=NAMES)


@pytest.fixture(scope="module")
def fitted(mq2008):
    cache = {}

    def get(kind, norm):
        if (kind, norm) not in cache:
            cache[kind, norm] = _fit(kind, norm, mq2008)
        return cache[kind, norm]
    return get


def _served(fmt, path, doc, Xte):
    perm = np.random.default_rng(7).permutation(Xte.shape[1])   # the engine's feature order differs
    feature_set = [NAMES[j] for j in perm]
    if fmt in ("opensearch", "elasticsearch"):
        return score_opensearch(json.loads(path.read_text()), feature_set, Xte[:, perm])
    if fmt == "solr":
        return score_solr(json.loads(path.read_text()), feature_set, Xte[:, perm])
    if fmt == "json":
        return score_json_model(json.loads(path.read_text()), Xte)
    ort = pytest.importorskip("onnxruntime")
    return ort.InferenceSession(str(path)).run(None, {"X": Xte})[0]


_FORMATS = ["opensearch", "elasticsearch", "solr", "onnx", "json"]
_NORMS = [None, "standard", "minmax"]


@pytest.mark.parametrize("norm,kind,fmt", [
    pytest.param(norm, kind, fmt, id=f"{norm}-{kind}-{fmt}",
                 # the quick loop keeps 15 of the 45 cells, every pair of format, learner and normalization
                 marks=() if (a + b + c) % 3 == 0 else pytest.mark.slow)  # the other 30: ~4 CPU-s
    for a, norm in enumerate(_NORMS) for b, kind in enumerate(LEARNERS) for c, fmt in enumerate(_FORMATS)])
def test_linear_export_serves_like_predict(fitted, mq2008, tmp_path, fmt, kind, norm):
    model = fitted(kind, norm)
    Xte, qte = mq2008[3], mq2008[5]
    path = tmp_path / f"model.{fmt}"
    doc = sr.export(model, path, format=fmt)
    served = _served(fmt, path, doc, Xte)
    assert_serves_like_predict(served, model.predict(Xte), qte)


def test_opensearch_body_shape(fitted):
    body = sr.export(fitted("rankrls-primal", "standard"), "/dev/null", format="opensearch", name="mq")
    spec = body["model"]["model"]
    assert body["model"]["name"] == "mq" and spec["type"] == "model/linear"
    assert list(spec["definition"]) == NAMES
    assert set(spec["feature_normalizers"]) == set(NAMES)
    assert all(set(v) == {"standard"} for v in spec["feature_normalizers"].values())


def test_minmax_with_negative_minimum_is_written_as_standard(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3)) + [5.0, -5.0, 0.0]
    y = X @ [1.0, -1.0, 0.5]
    q = np.repeat(np.arange(30), 10)
    m = sr.RankRLS(alpha=0.5, normalize="minmax").fit(X, y, q, feature_names=["a", "b", "c"])
    body = sr.export(m, tmp_path / "m.json", format="opensearch")
    norms = body["model"]["model"]["feature_normalizers"]
    assert set(norms["a"]) == {"min_max"}            # minimum >= 0: the plugin's own min_max
    assert set(norms["b"]) == {"standard"}           # negative minimum: same formula as standard
    served = score_opensearch(body, ["c", "b", "a"], X[:, [2, 1, 0]].astype(np.float32))
    assert_serves_like_predict(served, m.predict(X.astype(np.float32)), q)


def test_loaded_model_exports_the_same(fitted, tmp_path):
    m = fitted("rankrls-primal", "minmax")
    sr.save(m, tmp_path / "m.zarr")
    back = sr.load(tmp_path / "m.zarr")
    assert list(back.feature_names_in_) == NAMES
    assert sr.export(back, tmp_path / "a.json", format="solr", name="m") == \
        sr.export(m, tmp_path / "b.json", format="solr", name="m")
    np.testing.assert_array_equal(back.predict(np.eye(46)), m.predict(np.eye(46)))


def test_formats_refuse_what_they_cannot_express(mq2008, tmp_path):
    Xtr, ytr, qtr = (a[:300] for a in mq2008[:3])
    kern = sr.KernelRankRLS(kernel="rbf", gamma=0.1, alpha=1.0).fit(Xtr, ytr, qtr)
    for fmt in ("opensearch", "elasticsearch", "solr"):
        with pytest.raises(CannotExport, match="format='onnx' or 'json'"):
            sr.export(kern, tmp_path / "k.json", format=fmt, feature_names=NAMES)
    multi = sr.RankRLS(alpha=1.0).fit(Xtr, np.column_stack([ytr, -ytr]), qtr, feature_names=NAMES)
    with pytest.raises(CannotExport, match="2 outputs"):
        sr.export(multi, tmp_path / "m.json", format="solr")
    unnamed = sr.RankRLS(alpha=1.0).fit(Xtr, ytr, qtr)
    with pytest.raises(CannotExport, match="feature_names="):
        sr.export(unnamed, tmp_path / "u.json", format="opensearch")
    sr.export(unnamed, tmp_path / "u.json", format="opensearch", feature_names=NAMES)   # names given here
    with pytest.raises(ValueError, match="format must be one of"):
        sr.export(unnamed, tmp_path / "u.x", format="pmml")
    assert not (tmp_path / "k.json").exists()


def test_missing_onnx_is_one_line_naming_the_extra(fitted, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "onnx", None)   # as if the export extra were not installed
    with pytest.raises(ImportError) as info:
        sr.export(fitted("rankrls-primal", None), tmp_path / "m.onnx", format="onnx")
    msg = str(info.value)
    assert "\n" not in msg and "streamrank[export]" in msg

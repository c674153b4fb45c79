"""Independent scorers of the search engines' linear LTR models, written from the plugins' published classes.

They read only the exported JSON and the engine's feature values; nothing of
streamrank's.  Arithmetic is Java ``float`` (IEEE single), emulated with
numpy float32 and the loops' order:

* OpenSearch / Elasticsearch LTR plugin (opensearch-learning-to-rank-base,
  o19s/elasticsearch-learning-to-rank): ``LinearRankerParser`` maps each
  ``definition`` entry to the feature set's ordinal by name (``parser.floatValue()``,
  features absent from the definition weigh 0); ``FeatureNormalizingRanker``
  replaces each normalized feature's value by ``StandardFeatureNormalizer.normalize``
  ``(value - mean) / stdDeviation`` or ``MinMaxFeatureNormalizer.normalize``
  ``(value - minimum) / (maximum - minimum)``; ``LinearRanker.score`` is
  ``score += weights[i] * scores[i]`` over the feature set's ordinals.
  The definition parsers' checks (``standard_deviation > 0``; ``min_max``
  minimum, maximum >= 0 and minimum < maximum) are enforced too.
* Solr (solr/modules/ltr): ``ManagedModelStore`` builds features and norms
  from the ``features`` list (``norm`` absent: identity); ``StandardNormalizer``
  ``(value - avg) / std`` with ``std > 0``; ``MinMaxNormalizer``
  ``(value - min) / delta`` with ``delta = max - min != 0``; params parsed by
  ``Float.parseFloat``; ``LinearModel.validate`` needs a weight for every
  listed feature; ``LinearModel.score`` is ``score += normalized[i] * weight[i]``.
"""
from __future__ import annotations

import numpy as np

f32 = np.float32


def _dot_f32(values, weights):
    score = np.zeros(values.shape[0], dtype=f32)
    for i in range(values.shape[1]):
        score = (score + (weights[i] * values[:, i]).astype(f32)).astype(f32)
    return score


def score_opensearch(body: dict, feature_set: list, values: np.ndarray) -> np.ndarray:
    """Scores of a ``_createmodel`` body for rows of feature values in ``feature_set`` order."""
    model = body["model"]
    assert isinstance(model["name"], str) and model["name"]
    spec = model["model"]
    assert spec["type"] == "model/linear"
    ordinal = {f: i for i, f in enumerate(feature_set)}
    weights = np.zeros(len(feature_set), dtype=f32)
    for f, w in spec["definition"].items():
        if f not in ordinal:
            raise ValueError(f"Feature [{f}] is unknown.")
        weights[ordinal[f]] = f32(w)
    x = np.asarray(values, dtype=f32).copy()
    for f, norm in spec.get("feature_normalizers", {}).items():
        if f not in ordinal:
            raise ValueError(f"Feature {f} not found in feature set")
        (kind, p), = norm.items()
        j = ordinal[f]
        if kind == "standard":
            mean, std = f32(p["mean"]), f32(p["standard_deviation"])
            if std <= 0:
                raise ValueError("Standard Deviation Must Be Positive.")
            x[:, j] = ((x[:, j] - mean).astype(f32) / std).astype(f32)
        elif kind == "min_max":
            lo, hi = f32(p["minimum"]), f32(p["maximum"])
            if lo < 0 or hi < 0 or not lo < hi:
                raise ValueError("min_max: minimum and maximum must be positive, minimum < maximum")
            x[:, j] = ((x[:, j] - lo).astype(f32) / f32(hi - lo)).astype(f32)
        else:
            raise ValueError(f"unknown normalizer {kind}")
    return _dot_f32(x, weights)


def score_solr(model: dict, feature_store: list, values: np.ndarray) -> np.ndarray:
    """Scores of a Solr ``LinearModel`` entry for rows of feature values in ``feature_store`` order."""
    assert model["class"] == "org.apache.solr.ltr.model.LinearModel"
    assert isinstance(model["store"], str) and isinstance(model["name"], str)
    col = {f: i for i, f in enumerate(feature_store)}
    weights_by_name = model["params"]["weights"]
    feats = model["features"]
    missing = [f["name"] for f in feats if f["name"] not in weights_by_name]
    if missing:
        raise ValueError(f"Model lacks weight(s) for {missing}")
    x = np.empty((values.shape[0], len(feats)), dtype=f32)
    w = np.empty(len(feats), dtype=f32)
    for i, f in enumerate(feats):
        v = np.asarray(values[:, col[f["name"]]], dtype=f32)
        norm = f.get("norm")
        if norm is not None:
            p = {k: f32(float(s)) for k, s in norm["params"].items()}
            if norm["class"] == "org.apache.solr.ltr.norm.StandardNormalizer":
                if p["std"] <= 0:
                    raise ValueError("Standard Normalizer standard deviation must be positive")
                v = ((v - p["avg"]).astype(f32) / p["std"]).astype(f32)
            elif norm["class"] == "org.apache.solr.ltr.norm.MinMaxNormalizer":
                delta = f32(p["max"] - p["min"])
                if delta == 0:
                    raise ValueError("MinMax Normalizer delta must not be zero")
                v = ((v - p["min"]).astype(f32) / delta).astype(f32)
            else:
                raise ValueError(norm["class"])
        x[:, i] = v
        w[i] = f32(weights_by_name[f["name"]])
    return _dot_f32(x, w)


def score_json_model(doc: dict, X=None, *, Q=None, D=None) -> np.ndarray:
    """Score rows with a ``format="json"`` export, from the formulas its documentation states."""
    if doc["kind"] == "bilinear":
        W = doc["W"]
        Q, D = np.asarray(Q, dtype=np.float64), np.asarray(D, dtype=np.float64)
        row, col, val = np.asarray(W["row"], int), np.asarray(W["col"], int), np.asarray(W["value"])
        return (Q[:, row] * val * D[:, col]).sum(axis=1)
    X = np.asarray(X, dtype=np.float64)
    nz = doc["normalizer"]
    if nz is not None:
        X = (X - np.asarray(nz["offset"])) / np.asarray(nz["scale"])
    if doc["kind"] == "linear":
        return X @ np.asarray(doc["weights"])
    R = doc["basis"]
    if isinstance(R, dict):
        import scipy.sparse as sp

        R = sp.csr_matrix((R["data"], R["indices"], R["indptr"]), shape=tuple(R["shape"])).toarray()
    R = np.asarray(R, dtype=np.float64)
    k = doc["kernel"]
    if k["name"] == "linear":
        K = X @ R.T
    elif k["name"] == "poly":
        K = (k["gamma"] * (X @ R.T) + k["coef0"]) ** k["degree"]
    else:  # direct squared distances, not predict's expansion
        K = np.exp(-k["gamma"] * ((X[:, None, :] - R[None, :, :]) ** 2).sum(axis=2))
    return K @ np.asarray(doc["dual_coef"])

"""Linear models for the search engines' learning-to-rank plugins.

OpenSearch / Elasticsearch (the LTR plugin, ``opensearch-learning-to-rank-base``
and ``o19s/elasticsearch-learning-to-rank``): the body of
``POST _ltr/_featureset/<set>/_createmodel``::

    {"model": {"name": NAME,
               "model": {"type": "model/linear",
                         "definition": {FEATURE: WEIGHT, ...},
                         "feature_normalizers": {FEATURE: {"standard": {"mean": M, "standard_deviation": S}}
                                                          | {"min_max": {"minimum": LO, "maximum": HI}}}}}}

The plugin scores ``Σ_i weight_i · norm_i(value_i)`` in float32
(``LinearRanker.score``) after ``FeatureNormalizingRanker`` replaces each
normalized feature's value by ``(v − mean) / standard_deviation``
(``StandardFeatureNormalizer``) or ``(v − minimum) / (maximum − minimum)``
(``MinMaxFeatureNormalizer``).  Its parser refuses ``standard_deviation <= 0``
and a ``min_max`` whose minimum or maximum is negative or whose minimum is not
below its maximum; a min-max scale whose minimum is negative is therefore
written as ``standard`` with mean = minimum and standard_deviation =
maximum − minimum — the same formula.  Both plugins share this format.

Solr (``solr/modules/ltr``): a model-store entry ``PUT
/solr/<collection>/schema/model-store``::

    {"store": STORE, "name": NAME, "class": "org.apache.solr.ltr.model.LinearModel",
     "features": [{"name": FEATURE, "norm": {"class": "org.apache.solr.ltr.norm.StandardNormalizer",
                                             "params": {"avg": "M", "std": "S"}}}, ...],
     "params": {"weights": {FEATURE: WEIGHT, ...}}}

``LinearModel.score`` is ``Σ_i normalized_i · weight_i`` (float32);
``StandardNormalizer`` is ``(v − avg) / std``, ``MinMaxNormalizer``
``(v − min) / (max − min)`` with params ``min``/``max``.  Normalizer params are
strings, as Solr itself writes them (``Normalizer.paramsToMap``).  Every feature
listed needs a weight (``LinearModel.validate``), so every feature is listed.

Neither format has an intercept; neither do streamrank's ranking models.
"""
from __future__ import annotations

from ._describe import CannotExport, ModelDescription

__all__ = ["opensearch_body", "solr_model", "LINEAR_FORMATS"]

LINEAR_FORMATS = ("opensearch", "elasticsearch", "solr")

SOLR_LINEAR_MODEL = "org.apache.solr.ltr.model.LinearModel"
SOLR_STANDARD = "org.apache.solr.ltr.norm.StandardNormalizer"
SOLR_MINMAX = "org.apache.solr.ltr.norm.MinMaxNormalizer"


def _check_linear(desc: ModelDescription, fmt: str):
    if desc.kind != "linear":
        what = {"kernel": "a kernel model (f(x) = k(x, basis) A)",
                "bilinear": "a bilinear model (f(q, d) = qᵀ W d)"}[desc.kind]
        raise CannotExport(f"format {fmt!r} holds linear models only; {desc.model_class} is {what}: "
                           "export it with format='onnx' or 'json'")
    if desc.n_outputs != 1:
        raise CannotExport(f"format {fmt!r} holds one linear model; this {desc.model_class} has "
                           f"{desc.n_outputs} outputs: export it with format='onnx' or 'json', or fit one "
                           "model per target column")
    if desc.feature_names is None:
        raise CannotExport(f"format {fmt!r} names every feature, and this model carries no feature names: "
                           "pass feature_names=[...] (the names of the engine's features, in column order), "
                           "or fit on a store created with feature_names=")


def _weights(desc):
    return {f: float(w) for f, w in zip(desc.feature_names, desc.weights, strict=True)}


def opensearch_body(desc: ModelDescription, name: str, fmt: str = "opensearch") -> dict:
    """The ``_createmodel`` body of a linear model (OpenSearch and Elasticsearch LTR plugin)."""
    _check_linear(desc, fmt)
    model = {"type": "model/linear", "definition": _weights(desc)}
    norm = desc.normalizer
    if norm is not None:
        norms = {}
        for f, o, s in zip(desc.feature_names, norm.offset, norm.scale, strict=True):
            o, s = float(o), float(s)
            if norm.kind == "minmax" and o >= 0.0:
                norms[f] = {"min_max": {"minimum": o, "maximum": o + s}}
            else:  # standard, or a min-max whose minimum the plugin's min_max refuses (negative)
                norms[f] = {"standard": {"mean": o, "standard_deviation": s}}
        model["feature_normalizers"] = norms
    return {"model": {"name": str(name), "model": model}}


def solr_model(desc: ModelDescription, name: str, store: str = "_DEFAULT_") -> dict:
    """A Solr ``LinearModel`` model-store entry with per-feature normalizers."""
    _check_linear(desc, "solr")
    norm = desc.normalizer
    features = []
    for j, f in enumerate(desc.feature_names):
        entry = {"name": f}
        if norm is not None:
            o, s = float(norm.offset[j]), float(norm.scale[j])
            if norm.kind == "minmax":
                entry["norm"] = {"class": SOLR_MINMAX, "params": {"min": repr(o), "max": repr(o + s)}}
            else:
                entry["norm"] = {"class": SOLR_STANDARD, "params": {"avg": repr(o), "std": repr(s)}}
        features.append(entry)
    return {"store": str(store), "name": str(name), "class": SOLR_LINEAR_MODEL, "features": features,
            "params": {"weights": _weights(desc)}}


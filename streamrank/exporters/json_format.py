"""``format="json"``: a plain, versioned description of any model, for people who write their own scorer.

One JSON object (numbers are float64 written exactly; arrays are nested lists)::

    {"format": "streamrank-model", "format_version": 1,
     "streamrank_version": "...", "class": "RankRLS",
     "kind": "linear" | "kernel" | "bilinear",
     "score": "<the formula below, in words>",
     "n_features": n, "n_outputs": v, "feature_names": [..] | null,
     "normalizer": null | {"kind": "standard" | "minmax", "offset": [n], "scale": [n]},
     ...kind-specific fields...}

Normalization: x̃_j = (x_j − offset_j) / scale_j ("standard": mean and standard
deviation; "minmax": minimum and maximum − minimum; scale is never 0).
Without a normalizer x̃ = x.

* ``"linear"``: ``"weights"``: ``[n]`` (one output) or ``[n][v]``;
  score = Σ_j weights[j] · x̃_j.
* ``"kernel"``: ``"kernel"``: {"name": "linear" | "rbf" | "poly", "gamma", "degree", "coef0"},
  ``"basis"``: ``[r][n]`` rows R (or {"format": "csr", "shape": [r, n], "indptr", "indices", "data"}),
  ``"dual_coef"``: ``[r]`` or ``[r][v]``; score = Σ_i dual_coef[i] · k(x̃, R_i) with
  k = x·z ("linear"), (gamma x·z + coef0)^degree ("poly"), exp(−gamma ‖x − z‖²) ("rbf").
* ``"bilinear"``: ``"n_query_features"``, ``"query_feature_names"``, ``"W"``:
  {"format": "coo", "shape": [n_q, n_d], "row": [..], "col": [..], "value": [..]};
  score(q, d) = Σ_k value[k] · q[row[k]] · d[col[k]] on raw features (no normalizer: a model
  fitted with ``normalize=`` has its scales folded into W, W' = diag(1/s) W diag(1/t)).

``format_version`` changes when a field changes meaning; new fields may be
added within a version.  :func:`read_json_model` reads one back (checking format and version).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import json

import numpy as np
import scipy.sparse as sp

from .._version import __version__
from ._describe import ModelDescription

if TYPE_CHECKING:
    from .._typing import PathLike

__all__ = ["to_json", "JSON_FORMAT_VERSION", "read_json_model"]

JSON_FORMAT_VERSION = 1
FORMAT_NAME = "streamrank-model"

_FORMULAS = {
    "linear": "sum_j weights[j] * xn[j], xn[j] = (x[j] - normalizer.offset[j]) / normalizer.scale[j] (xn = x "
              "without a normalizer)",
    "kernel": "sum_i dual_coef[i] * k(xn, basis[i]) with k from kernel (linear: x.z; poly: (gamma x.z + coef0)"
              "^degree; rbf: exp(-gamma |x - z|^2)), xn normalized as for linear models",
    "bilinear": "sum_k W.value[k] * q[W.row[k]] * d[W.col[k]]",
}


def _list(a):
    return np.asarray(a, dtype=np.float64).tolist()


def to_json(desc: ModelDescription) -> dict:
    """The JSON-able description of a model (see the module docstring)."""
    out = {"format": FORMAT_NAME, "format_version": JSON_FORMAT_VERSION,
           "streamrank_version": __version__, "class": desc.model_class, "kind": desc.kind,
           "score": _FORMULAS[desc.kind], "n_features": int(desc.n_features), "n_outputs": desc.n_outputs,
           "feature_names": desc.feature_names, "normalizer": None}
    if desc.normalizer is not None:
        out["normalizer"] = {"kind": desc.normalizer.kind, "offset": _list(desc.normalizer.offset),
                             "scale": _list(desc.normalizer.scale)}
    if desc.kind == "linear":
        out["weights"] = _list(desc.weights)
    elif desc.kind == "kernel":
        out["kernel"] = dict(desc.kernel)
        R = desc.basis
        if sp.issparse(R):
            R = R.tocsr()
            out["basis"] = {"format": "csr", "shape": list(R.shape), "indptr": R.indptr.tolist(),
                            "indices": R.indices.tolist(), "data": _list(R.data)}
        else:
            out["basis"] = _list(R)
        out["dual_coef"] = _list(desc.dual_coef)
    else:
        W = desc.W.tocoo()
        out["n_query_features"] = int(desc.n_query_features)
        out["query_feature_names"] = desc.query_feature_names
        out["W"] = {"format": "coo", "shape": list(W.shape), "row": W.row.tolist(), "col": W.col.tolist(),
                    "value": _list(W.data)}
    return out


def read_json_model(path: PathLike) -> dict:
    """Read a ``format="json"`` export and check its format name and version."""
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
        raise ValueError(f"{path} is not a streamrank JSON model (no \"format\": \"{FORMAT_NAME}\")")
    v = doc.get("format_version")
    if not isinstance(v, int) or v > JSON_FORMAT_VERSION:
        raise ValueError(f"{path} has JSON model format version {v!r}; this streamrank reads <= "
                         f"{JSON_FORMAT_VERSION}")
    return doc


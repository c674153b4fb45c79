"""What a fitted model computes, in one neutral form every exporter reads.

Three kinds of scoring function cover every streamrank learner:

* ``"linear"``  f(x) = Σ_j w_j (x_j − o_j) / s_j  (RankRLS primal and cg, PairwiseSGDRanker);
  without normalization o = 0, s = 1;
* ``"kernel"``  f(x) = k(x̃, R) A with x̃ the normalized row, R the basis rows and
  A the dual coefficients (KernelRankRLS dual and sparse, TransductiveRankRLS);
* ``"bilinear"`` f(q, d) = qᵀ W d  (SparseSGDRanker).  A model fitted with
  ``normalize=`` (scale-only: q_j / s_j, d_k / t_k) is described by the
  folded W' = diag(1/s) W diag(1/t) on raw features — the same scores, the
  same sparsity pattern, so every bilinear export carries it unchanged.

Several outputs (RankRLS fitted on a target matrix) make ``weights`` /
``dual_coef`` 2-D; the search-engine formats take one output only.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp


if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..base import BaseRanker

__all__ = ["ModelDescription", "describe", "CannotExport"]


class CannotExport(ValueError):
    """The model cannot be written in the requested format (the message says which formats can)."""


@dataclass
class ModelDescription:
    kind: str                                  # "linear" | "kernel" | "bilinear"
    model_class: str
    n_features: int                            # item features for "bilinear"
    feature_names: list | None = None
    normalizer: object = None                  # streamrank.normalize.Normalizer or None
    weights: np.ndarray | None = None          # linear: (n,) or (n, v)
    kernel: dict = field(default_factory=dict)  # kernel: {"name", "gamma", "degree", "coef0"}
    basis: object = None                       # kernel: (r, n) ndarray or CSR
    dual_coef: np.ndarray | None = None        # kernel: (r,) or (r, v)
    W: sp.csr_matrix | None = None             # bilinear: (n_query_features, n_item_features)
    n_query_features: int | None = None
    query_feature_names: list | None = None

    @property
    def n_outputs(self) -> int:
        a = self.weights if self.kind == "linear" else self.dual_coef
        return 1 if a is None or a.ndim == 1 else a.shape[1]


def _names(model, n, override, what="feature_names"):
    names = override if override is not None else getattr(model, "feature_names_in_", None)
    if names is None:
        return None
    names = [str(s) for s in names]
    if len(names) != n:
        raise ValueError(f"{what} has {len(names)} names; the model has {n} features")
    if len(set(names)) != len(names):
        dup = sorted({s for s in names if names.count(s) > 1})[:3]
        raise ValueError(f"{what} must be unique; repeated: {dup}")
    return names


def describe(model: BaseRanker, *, feature_names: Sequence[str] | None = None) -> ModelDescription:
    """The :class:`ModelDescription` of a fitted streamrank learner."""
    from ..base import BaseRanker

    if not isinstance(model, BaseRanker):
        raise TypeError(f"export takes a fitted streamrank learner, got {type(model).__name__}")
    name = type(model).__name__
    norm = getattr(model, "normalizer_", None)
    if name in ("RankRLS", "PairwiseSGDRanker"):
        if name == "RankRLS":
            model._check_fitted()
        else:
            model._fitted()
        w = np.asarray(model.coef_, dtype=np.float64)
        n = w.shape[0]
        return ModelDescription("linear", name, n, _names(model, n, feature_names), norm, weights=w)
    if name in ("KernelRankRLS", "TransductiveRankRLS"):
        model._check_fitted("dual_coef_")
        if callable(model.kernel):
            raise CannotExport(f"a {name} with a callable kernel computes code, not a formula: only its "
                               "predict can score; refit with kernel='rbf', 'poly' or 'linear' to export it")
        n = int(model.n_features_in_)
        kernel = {"name": model.kernel, "gamma": float(model.gamma), "degree": int(model.degree),
                  "coef0": float(model.coef0)}
        return ModelDescription("kernel", name, n, _names(model, n, feature_names), norm, kernel=kernel,
                                basis=model.basis_, dual_coef=np.asarray(model.dual_coef_, dtype=np.float64))
    if name == "SparseSGDRanker":
        W = model.W_.tocsr()
        qn = getattr(model, "query_normalizer_", None)
        if qn is not None:   # W' = diag(1/s) W diag(1/t): (q/s)ᵀ W (d/t) = qᵀ W' d
            W = sp.diags(1.0 / qn.scale) @ W @ sp.diags(1.0 / model.item_normalizer_.scale)
            W = W.tocsr()
        nq, nd = W.shape
        d = ModelDescription("bilinear", name, nd, None, None, W=W, n_query_features=nq)
        if feature_names is not None:
            if not (isinstance(feature_names, (tuple, list)) and len(feature_names) == 2):
                raise ValueError("a SparseSGDRanker's feature_names are a pair (query names, item names)")
            d.query_feature_names = _names(model, nq, feature_names[0], "query feature_names")
            d.feature_names = _names(model, nd, feature_names[1], "item feature_names")
        return d
    raise CannotExport(f"no export is defined for {name}")

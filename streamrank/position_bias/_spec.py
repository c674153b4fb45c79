"""``--propensity estimate:em`` / ``estimate:harvest``: θ estimated from the training store itself.

Shared by ``streamrank fit/cv`` and the nightly pipeline: :func:`store_propensity`
runs :func:`estimate_propensity_em` (columns ``click`` and ``position``) or
:func:`harvest_propensity` (also ``ranker``) on a GroupStore and returns the
propensity array with a JSON-able note of what was estimated (kept in the
model record, and what the nightly warm-starts from the next night).
"""
from __future__ import annotations

import numpy as np

from ._em import PositionBiasEM, estimate_propensity_em
from ._harvest import harvest_propensity

__all__ = ["ESTIMATED_SPECS", "store_propensity", "em_from_note"]

#: the --propensity specs estimated from the training store (not a store of randomized traffic)
ESTIMATED_SPECS = {"estimate:em": ("click", "position"), "estimate:harvest": ("click", "position", "ranker")}


def em_from_note(note) -> PositionBiasEM | None:
    """The warm start kept in a note of :func:`store_propensity` (None when it holds none)."""
    if not note or note.get("method") != "em" or "coef" not in note:
        return None
    return PositionBiasEM(theta=np.asarray(note["theta"], dtype=np.float64),
                          coef=np.asarray(note["coef"], dtype=np.float64), intercept=float(note["intercept"]),
                          objective=[], log_likelihood=[], n_iter=0, n_passes=0, converged=False,
                          n_impressions=0, alpha=float(note.get("alpha", 1e-6)))


def store_propensity(store, spec: str, *, warm=None, max_rows: int = 65536, rows=None):
    """``(p, note)``: θ of ``store`` by the method of ``spec`` (a key of :data:`ESTIMATED_SPECS`).

    ``warm``: a previous note (``estimate:em`` warm-starts from its θ and
    relevance model when the feature count matches).  ``note``: method, θ,
    passes / iterations and the log-likelihood per iteration (EM), or the
    confidence intervals (harvest).  ``rows``: row spans of the store to use (default all).
    """
    if spec == "estimate:em":
        init = em_from_note(warm)
        if init is not None and init.coef.shape[0] != store.n_features:
            init = None
        em = estimate_propensity_em(store, init=init, max_rows=max_rows, rows=rows)
        note = {"method": "em", "theta": em.theta.tolist(), "coef": em.coef.tolist(), "intercept": em.intercept,
                "alpha": em.alpha, "iterations": em.n_iter, "passes": em.n_passes, "converged": em.converged,
                "log_likelihood": [float(v) for v in em.log_likelihood], "warm_start": init is not None,
                "impressions": em.n_impressions}
        return em.theta, note
    if spec == "estimate:harvest":
        h = harvest_propensity(store, max_rows=max_rows, rows=rows)
        note = {"method": "harvest", "theta": h.theta.tolist(), "lower": h.lower.tolist(),
                "upper": h.upper.tolist(), "confidence": h.confidence, "pairs": len(h.pairs),
                "impressions": h.n_impressions}
        return h.theta, note
    raise ValueError(f"propensity {spec!r}: estimated specs are {list(ESTIMATED_SPECS)}")

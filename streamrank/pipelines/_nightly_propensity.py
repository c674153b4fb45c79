"""Nightly ``--ips --propensity estimate:em | estimate:harvest``: θ re-estimated every night (issue 37).

The propensities come from the store itself (:func:`streamrank.position_bias.store_propensity`):
each night re-estimates them over the accepted days (the store without the
excluded days' groups), the EM warm-started from the θ and relevance model
the current version kept in its meta (``propensity_estimate``).  The IPS
weights of earlier nights' rows change with θ, so statistics accumulated
with the old θ cannot be reused: such a line retrains in full every night
(:func:`forces_full`).
"""
from __future__ import annotations

import numpy as np

from streamrank.pipelines._nightly_views import spans_minus

__all__ = ["estimated_spec", "forces_full", "estimate_night"]


def estimated_spec(weighting):
    """The ``estimate:em|harvest`` spec of a nightly weighting, or None."""
    from streamrank.position_bias import ESTIMATED_SPECS

    spec = ((weighting or {}).get("ips") or {}).get("propensity")
    return spec if spec in ESTIMATED_SPECS else None


def forces_full(weighting) -> str | None:
    """Why a night must retrain in full (an estimated θ changes every night's weights), or None."""
    spec = estimated_spec(weighting)
    return None if spec is None else f"--propensity {spec}: θ is re-estimated every night, so are all IPS weights"


def estimate_night(store, weighting, previous_meta, excluded=(), max_rows=None):
    """``(p, note)`` for tonight, or ``(None, None)`` without an estimated spec.

    ``previous_meta``: the current version's meta (its ``propensity_estimate``
    warm-starts the EM); ``excluded``: group spans of excluded days.
    """
    from streamrank.position_bias import store_propensity

    spec = estimated_spec(weighting)
    if spec is None:
        return None, None
    gp = np.asarray(store.group_ptr, dtype=np.int64)
    kept = spans_minus(0, store.n_groups, excluded)
    rows = None if list(kept) == [(0, store.n_groups)] else [(int(gp[a]), int(gp[b])) for a, b in kept]
    warm = (previous_meta or {}).get("propensity_estimate")
    return store_propensity(store, spec, warm=warm, rows=rows, max_rows=max_rows or 65536)

"""Position bias from ordinary click logs: regression EM and intervention harvesting.

* :func:`estimate_propensity_em` — the position-based click model
  P(click | q, d, k) = θ_k γ_{q,d} fitted by regression EM on the logs of one
  production ranker, γ a logistic model of the features refitted per M-step
  by :class:`~streamrank.RankRLS` from its statistics (:mod:`._em`).
* :func:`harvest_propensity` — θ_k / θ_k' from the same (q, d) shown at
  different ranks by different rankers, with confidence intervals (:mod:`._harvest`).

Both return θ with θ_1 = 1, ready for :func:`streamrank.clicks.ips_weights`
and :func:`streamrank.io.weighted.ips_weighted`.
"""
from ._em import PositionBiasEM, e_step, estimate_propensity_em, log_likelihood
from ._harvest import HarvestedPropensity, harvest_propensity, row_keys
from ._spec import ESTIMATED_SPECS, store_propensity

__all__ = ["PositionBiasEM", "estimate_propensity_em", "e_step", "log_likelihood", "HarvestedPropensity",
           "harvest_propensity", "row_keys", "ESTIMATED_SPECS", "store_propensity"]

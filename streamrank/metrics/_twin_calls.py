"""Every Python-side call of a metrics kernel goes through :func:`run`: the kernel, or its plain-Python twin.

Why (issue 22): a warm ``streamrank evaluate`` of MQ2008's test fold (2,874
rows, 156 queries) spent 0.5-0.9 s importing numba and setting it up on the
first kernel call, for metrics that the same kernels' own source, run by the
interpreter, computes in ~0.1 s.  :func:`streamrank._numba.python_twin` is
that source run as plain Python (its callees' plain Python too), so it gives
the kernel's values -- the same float64 operations in the same order; the
metrics tests check them bit for bit -- and imports no numba.
:func:`streamrank._numba.use_twin` decides, from the twin's estimated
seconds, whether a call still fits the process's twin budget (0.5 s while no
kernel has been set up: the rent-or-buy rule).  So small evaluations never
import numba, and a big one (or any call once a kernel has run) takes the
kernel, losing at most the budget.

The estimates (:func:`twin_seconds`) are
``A W + B n K + C G + D G K`` seconds for ``G`` groups of ``n`` rows, ``W =
sum_g n_g log2(n_g + 1)`` (the merge sorts) and ``K`` cut-offs, with the
constants below per kernel, in seconds of this 2-core machine.  Measured:
a least-squares fit of the twins' times (best of 3, twelve shapes from one
group of 500-8,000 rows to 3,000 groups of one row, MQ2008 Fold1 test, tied
scores; load 1-2), then raised to about twice the fit and further where
``python benchmarks/metrics_twins.py`` (the same shapes, twin/estimate per
call site) still showed a twin near or above its estimate.  Final run at
load 0.9: the MQ2008-like calls at 0.6-0.9 of their estimates, the largest
ratio 1.0 (AP on 300 groups of 10, whose per-group cost was then raised);
under load 3-3.6, where every process (numba's set-up included) runs ~1.8x
slower, ratios reached 1.3-1.7.  ERR adds its tied-run term
(:func:`_err_tie_work`).  On MQ2008 Fold1 test, ``evaluate``'s default
metrics (ndcg@10, disagreement, map) are charged 63 + 72 + 38 ms of the
0.5 s, and ``ndcg@1,3,5,10,map,mrr,p@10,err@10`` 225 ms: both run numba-free.
"""
from __future__ import annotations

import numpy as np

from .._numba import TWIN_BUDGET_S, numba_ready, python_twin, use_twin

__all__ = ["run", "twin_seconds"]

#: kernel name -> seconds per (W, row x cut-off, group, group x cut-off) of its twin, measured as the module doc
#: says; the fits (us): ndcg (1.57, 0.90, 3.1, 1.3), AP (0.74, 0.15, 3.7, 0.53), ERR (0.85, 0.13, 6.2, 0.66),
#: hits (0.87, 0.17, 2.7, 0.25), rr (0.79, 0, 2.9, 2.7), auc (0.71, 0, 0, 0), trec (0.79 per W x (words + 1),
#: 2.5, 10, 0); cindex and the stable order set from the benchmark's runs alone
COSTS = {
    "_ndcg_groups": (4.0e-6, 2.0e-6, 10e-6, 3.0e-6),
    "_average_precision_groups": (2.4e-6, 0.4e-6, 20e-6, 1.2e-6),
    "err_groups": (2.2e-6, 0.5e-6, 45e-6, 1.5e-6),      # C: its scratch made per run within k, too
    "hits_groups": (2.0e-6, 0.4e-6, 8.0e-6, 0.6e-6),
    "reciprocal_rank_groups": (2.0e-6, 0.4e-6, 7.0e-6, 5.5e-6),
    "_cindex_groups": (5.0e-6, 0.0, 14e-6, 0.0),
    "auc_counts": (1.8e-6, 0.0, 0.0, 0.0),
    "trec_rank_groups": (1.8e-6, 5.0e-6, 20e-6, 0.0),
    "_stable_order_into": (2.0e-6, 0.0, 4.0e-6, 0.0),
}
#: seconds per step of ERR's tied-run recurrence (m^2 (min(m, k) + 2) steps a run of m tied items); one group of 119
#: tied rows: 84 ms at k=10 (estimate 102 ms), 350 ms for the whole list (estimate 1.0 s)
ERR_TIE_STEP_S = 0.6e-6


def run(kernel, estimate, *args):
    """``kernel(*args)``, run by its plain-Python twin when :func:`~streamrank._numba.use_twin` says so.

    ``estimate`` is a function of no arguments giving the twin's seconds for
    these arguments (:func:`twin_seconds`); it is called only while no kernel
    has been set up in this process (after that every call takes the kernel,
    unless :func:`~streamrank._numba.twins` forces the choice).  Returns what
    the kernel returns.
    """
    if numba_ready():
        twin = use_twin(0.0)              # the forced answer, else False: the kernel
    else:
        twin = use_twin(estimate())
    return (python_twin(kernel) if twin else kernel)(*args)


def twin_seconds(kernel, gp, n_cutoffs=1, *, sorts=1.0, extra=0.0):
    """Estimated seconds of ``kernel``'s twin on groups ``gp`` (offsets) with ``n_cutoffs`` cut-offs.

    ``sorts`` scales the sorting term (trec's one sort per id word),
    ``extra`` adds seconds (ERR's tied runs, the ideal lists of qrels).
    """
    a, b, c, d = COSTS[kernel.__name__]
    sizes = np.diff(np.asarray(gp, dtype=np.float64))
    n_groups = sizes.shape[0]
    w = float(np.dot(sizes, np.log2(sizes + 1.0))) if n_groups else 0.0
    rows = float(sizes.sum()) if n_groups else 0.0
    return a * w * sorts + b * rows * n_cutoffs + c * n_groups + d * n_groups * n_cutoffs + extra


def _err_tie_work(s, gp, ks):
    """Steps of ERR's recurrence over runs of tied scores: ``m^2 (min(m, k) + 2)`` a run of ``m`` (an upper bound).

    Only while the cheap part of the estimate fits the budget: it sorts the
    scores of every group with numpy.
    """
    n = s.shape[0]
    if n < 2:
        return 0.0
    g = np.repeat(np.arange(len(gp) - 1), np.diff(gp))
    order = np.lexsort((s, g))
    ss, gg = s[order], g[order]
    new = np.ones(n, dtype=bool)
    new[1:] = (ss[1:] != ss[:-1]) | (gg[1:] != gg[:-1])
    m = np.diff(np.append(np.flatnonzero(new), n)).astype(np.float64)
    kmax = float(np.max(ks)) if len(ks) else 0.0
    depth = m if (kmax <= 0 or np.any(np.asarray(ks) <= 0)) else np.minimum(m, kmax)
    return float(np.dot(m * m, depth + 2.0))        # + 2: the loop over the pairs of the run


def err_seconds(kernel, s, gp, ks):
    """:func:`twin_seconds` of ERR, with the tied runs when the rest of the estimate fits the budget."""
    base = twin_seconds(kernel, gp, len(ks))
    if base > TWIN_BUDGET_S:
        return base
    return base + ERR_TIE_STEP_S * _err_tie_work(s, gp, ks)

"""Learning to rank from click logs: inverse propensity scoring (IPS) as RankRLS row weights.

Clicks are biased by position: a document shown at rank k is examined with
probability p(k) (the position-based click model: click = examined and
relevant, P(click) = p(k) · P(relevant)).  The IPS pairwise objective of
Joachims, Swaminathan and Schnabel (2017, "Unbiased learning-to-rank with
biased feedback", WSDM) weighs every pair (clicked i, not clicked j) of a
query by 1 / p(pos_i), which makes its expectation the pairwise loss over
(relevant, shown) pairs, whatever positions the logging ranker chose:

    c(f) = Σ_q Σ_{i clicked, j not clicked} (1 / p(pos_i)) ((1 - 0) - (f_i - f_j))².

In RankRLS form this is cost (21) of Pahikkala et al. (2009) on the targets
y = clicks with ``ties="exclude"`` (clicked-clicked and unclicked-unclicked
pairs are tied, so they drop out) and the row weights

    w_i = 1 / p(pos_i)   (clicked),      w_j = 1   (not clicked),

because the pair weight of :mod:`streamrank.laplacian` is w_i w_j = 1 / p(pos_i).
The weighted group Laplacian stays diagonal plus low rank (one rank-one term
per group and per tie class), so training is one pass over the logs, with
every RankRLS feature (λ path, CV from statistics, partial_fit, cluster):

    >>> import numpy as np, streamrank as sr
    >>> from streamrank.clicks import ips_weights
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(40, 3)); qid = np.repeat(np.arange(4), 10)
    >>> position = np.tile(np.arange(1, 11), 4); clicks = (rng.random(40) < 0.3).astype(float)
    >>> w = ips_weights(clicks, position, 1.0 / position, clip=0.05)
    >>> model = sr.RankRLS(alpha=1.0, ties="exclude").fit(X, clicks, qid, sample_weight=w)

:func:`ips_edges` gives the same objective as an explicit edge list (for
:meth:`RankRLS.fit_edges` or learners on pairs).  :func:`estimate_propensity`
estimates p from result-randomization logs (Joachims et al. 2017, §5;
Wang et al. 2016, "Learning to rank with selection bias in personal
search", SIGIR): when the shown order of the top k is uniformly shuffled,
relevance is independent of position, so CTR(k) ∝ p(k).

Clipping (``clip=τ``): p is replaced by max(p, τ), i.e. weights are capped at
1/τ — the variance control of Joachims et al. (2017, "propensity clipping"),
at the price of a bias towards rarely examined positions.

Per-query weights a_g (e.g. how many sessions a logged query stands for):
:func:`query_weights` gives the row weights w_i = √a_g, so every pair of
query g weighs a_g; multiply them into IPS row weights to get a_g / p(pos_i)
per (clicked, unclicked) pair.
"""
from __future__ import annotations

import numpy as np

from ._qid import qid_repr
from ._validation import check_qid, group_ptr_from_qid

__all__ = ["propensity_at", "ips_weights", "ips_edges", "estimate_propensity", "position_based_propensity",
           "query_weights"]


def position_based_propensity(n_positions: int, eta: float = 1.0) -> np.ndarray:
    """p(k) = (1 / k)^eta for k = 1..n_positions (Joachims et al. 2017's examination model); (n_positions,)."""
    if int(n_positions) < 1 or not np.isfinite(eta) or eta < 0:
        raise ValueError(f"need n_positions >= 1 and a finite eta >= 0; got {n_positions}, {eta}")
    return (1.0 / np.arange(1, int(n_positions) + 1)) ** float(eta)


def _check_clicks(clicks) -> np.ndarray:
    c = np.asarray(clicks, dtype=np.float64).reshape(-1)
    bad = np.flatnonzero((c != 0) & (c != 1))
    if bad.size:
        raise ValueError(f"clicks[{int(bad[0])}] = {c[bad[0]]}: clicks must be 0 or 1")
    return c


def _check_position(position, rows) -> np.ndarray:
    pos = np.asarray(position)
    if pos.shape != (rows,):
        raise ValueError(f"position must have one entry per row, shape ({rows},); got {pos.shape}")
    if pos.dtype.kind == "f" and np.all(np.isfinite(pos)) and np.all(pos == np.round(pos)):
        pos = pos.astype(np.int64)
    if pos.dtype.kind not in "iu":
        raise TypeError(f"position must hold integer ranks (1 = top); got dtype {pos.dtype}")
    bad = np.flatnonzero(pos < 1)
    if bad.size:
        raise ValueError(f"position[{int(bad[0])}] = {int(pos[bad[0]])}: positions are 1-based ranks (>= 1)")
    return pos.astype(np.int64)


def propensity_at(position, propensity, *, clip=None) -> np.ndarray:
    """Examination propensity of every row: (rows,) float64 in (0, 1].

    ``propensity``: an array ``p`` with ``p[k - 1]`` the propensity of rank k,
    or a callable of the (rows,) int positions, or a (rows,) array already per
    row when ``position`` is None.  ``clip``: lower bound τ in (0, 1]
    (p := max(p, τ)).
    """
    if position is None:
        p = np.asarray(propensity, dtype=np.float64).reshape(-1)
    else:
        pos = np.asarray(position).reshape(-1)
        pos = _check_position(pos, pos.shape[0])
        if callable(propensity):
            p = np.asarray(propensity(pos), dtype=np.float64).reshape(-1)
            if p.shape != pos.shape:
                raise ValueError(f"propensity(position) returned shape {p.shape}; expected {pos.shape}")
        else:
            table = np.asarray(propensity, dtype=np.float64).reshape(-1)
            if pos.size and pos.max() > table.shape[0]:
                r = int(np.argmax(pos))
                raise ValueError(f"position[{r}] = {int(pos[r])} but propensity has {table.shape[0]} entries "
                                 "(p[k - 1] is the propensity of rank k)")
            p = table[pos - 1]
    if clip is not None:
        clip = float(clip)
        if not (0 < clip <= 1):
            raise ValueError(f"clip must be in (0, 1], got {clip}")
        p = np.maximum(p, clip)
    bad = np.flatnonzero(~np.isfinite(p) | (p <= 0) | (p > 1))
    if bad.size:
        raise ValueError(f"propensity of row {int(bad[0])} is {p[bad[0]]}: propensities must be in (0, 1] "
                         "(use clip= to bound small ones away from 0)")
    return p


def ips_weights(clicks, position, propensity, *, clip=None) -> np.ndarray:
    """Row weights (rows,) of the IPS pairwise objective: 1 / p(pos_i) on clicked rows, 1 elsewhere.

    Fit with ``RankRLS(ties="exclude").fit(X, clicks, qid, sample_weight=w)``:
    the pair (clicked i, not clicked j) then weighs w_i w_j = 1 / p(pos_i),
    tied pairs (both clicked, both not) drop out (module docstring).  With
    ``ties="include"`` the tied pairs would stay in, weighted 1/(p_i p_j) and
    1: not the IPS objective.
    """
    c = _check_clicks(clicks)
    p = propensity_at(position, propensity, clip=clip)
    if p.shape != c.shape:
        raise ValueError(f"clicks has {c.shape[0]} rows, position/propensity {p.shape[0]}")
    return np.where(c == 1, 1.0 / p, 1.0)


def ips_edges(clicks, qid, position, propensity, *, clip=None):
    """The IPS objective as explicit preference edges: ``(edges (l, 2), weights (l,))``.

    One edge (i, j) per query and pair (clicked i, not clicked j), weight
    1 / p(pos_i); for :meth:`RankRLS.fit_edges` (``weights=``) or pairwise
    learners.  O(clicked × unclicked) per query — use :func:`ips_weights`
    for training at scale.
    """
    c = _check_clicks(clicks)
    p = propensity_at(position, propensity, clip=clip)
    gp, _ = group_ptr_from_qid(check_qid(qid, c.shape[0], "qid"), "qid")
    E, W = [], []
    for g in range(len(gp) - 1):
        rows = np.arange(gp[g], gp[g + 1])
        pos_rows, neg_rows = rows[c[rows] == 1], rows[c[rows] == 0]
        if pos_rows.size and neg_rows.size:
            h = np.repeat(pos_rows, neg_rows.size)
            j = np.tile(neg_rows, pos_rows.size)
            E.append(np.column_stack([h, j]))
            W.append(1.0 / p[h])
    if not E:
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0)
    return np.concatenate(E).astype(np.int64), np.concatenate(W)


def estimate_propensity(clicks, position, n_positions=None) -> np.ndarray:
    """Propensities p(k), k = 1..K, from result-randomization logs: p̂(k) = CTR(k) / CTR(1).

    ``clicks``, ``position``: the rows of queries whose top K were shown in a
    uniformly random order (Joachims et al. 2017, §5; Wang et al. 2016).  Then
    P(click at k) = p(k) · E[P(relevant)] with the same expectation at every
    rank, so the click-through rate at k over that at rank 1 estimates
    p(k) / p(1), with p(1) = 1 by convention (estimates above 1, sampling
    noise, are capped at 1).  Returns (K,) float64; a rank
    never shown is an error.
    """
    c = _check_clicks(clicks)
    pos = _check_position(position, c.shape[0])
    K = int(pos.max()) if n_positions is None else int(n_positions)
    shown = np.bincount(pos - 1, minlength=K)[:K].astype(np.float64)
    clicked = np.bincount(pos - 1, weights=c, minlength=K)[:K]
    if np.any(shown == 0):
        raise ValueError(f"rank {int(np.flatnonzero(shown == 0)[0]) + 1} was never shown in the randomized logs")
    ctr = clicked / shown
    if ctr[0] == 0:
        raise ValueError("no click at rank 1 in the randomized logs: p(k)/p(1) is undefined")
    return np.minimum(ctr / ctr[0], 1.0)   # sampling noise can put a lower rank above rank 1


def query_weights(qid, weight) -> np.ndarray:
    """Row weights (rows,) for per-query weights a_g: w_i = √a_g on the rows of query g.

    The learners' pair weight is w_i w_j (:mod:`streamrank.laplacian`), so
    every pair of query g then weighs exactly a_g (cost (21) of Pahikkala et
    al. 2009 scaled by a_g per group) — pass the result as ``sample_weight``.
    ``weight``: a mapping ``{query id: a_g}`` (every query of ``qid``), or an
    array with one a_g per query in the order the queries first appear in
    ``qid`` (the order of the groups).  a_g must be finite and >= 0.
    """
    q = np.asarray(qid).reshape(-1)
    gp, gq = group_ptr_from_qid(check_qid(q, q.shape[0], "qid"), "qid")
    n_groups = len(gp) - 1
    if isinstance(weight, dict):
        missing = [g for g in gq if g not in weight]
        if missing:
            raise ValueError(f"weight has no entry for query id {qid_repr(missing[0])} (one a_g per query of qid)")
        a = np.array([weight[g] for g in gq], dtype=np.float64)
    else:
        a = np.asarray(weight, dtype=np.float64).reshape(-1)
        if a.shape[0] != n_groups:
            raise ValueError(f"weight has {a.shape[0]} entries; qid has {n_groups} queries (one a_g per query, "
                             "in the order they first appear)")
    bad = np.flatnonzero(~np.isfinite(a) | (a < 0))
    if bad.size:
        raise ValueError(f"weight of query {qid_repr(gq[int(bad[0])])} is {a[bad[0]]}: query weights must be finite "
                         "and >= 0")
    return np.repeat(np.sqrt(a), np.diff(gp))

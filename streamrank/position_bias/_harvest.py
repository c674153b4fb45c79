"""Intervention harvesting: position bias from the same (q, d) shown at different ranks by different rankers.

Agarwal, Zaitsev, Wang, Li, Najork and Joachims (2019, "Estimating position
bias without intrusive interventions", WSDM); Fang, Agarwal and Joachims
(2019, SIGIR).  When a log holds several historical rankers, the same
document of the same query is shown at rank k by one ranker and at rank k'
by another — a "swap intervention" nobody had to randomize.  Under the
position-based model the click-through rate of that (q, d) at k is θ_k γ_{q,d}
whatever ranker showed it, so over the set Ω_{k,k'} of such (q, d)

    r̂_{k,k'} = Σ_Ω m CTR_k(q, d) / Σ_Ω m CTR_k'(q, d)   →   θ_k / θ_k',

for any weights m that do not depend on the clicks (here m = n_k n_k' / (n_k + n_k'),
the impressions at k and at k'; CTR at a rank pools every ranker that showed
the (q, d) there).  Every pair of ranks with a non-empty Ω gives one ratio;
log θ (θ_1 = 1) is their weighted least-squares fit over the graph of
pairs, weights 1 / Var(log r̂) (delta method, binomial variances per (q, d)
and rank, with the plug-in CTR (c + ½)/(n + 1)).  Confidence intervals:
exp(log θ̂_k ± z se_k) from that fit's covariance.  The pairs' ratios share
(q, d) and are treated as independent there, so the intervals are
approximate (they err on the narrow side when Ω's overlap a lot).

Memory: one (impressions, clicks) count per distinct (q, d, ranker, rank) —
O(distinct shown documents), not O(impressions).  In a store the (q, d) is
recognised by its feature row (a 64-bit hash of its bytes): the features of
a query-document pair are what identify it to a learner too.
"""
from __future__ import annotations

import dataclasses
from statistics import NormalDist

import numpy as np

from ..clicks import _check_clicks, _check_position
from ._em import _check_store, _store_blocks, check_spans

__all__ = ["HarvestedPropensity", "harvest_propensity", "row_keys"]

_MULT = np.random.default_rng(20190211).integers(1, 2 ** 63, size=4096, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def row_keys(X) -> np.ndarray:
    """A 64-bit key per row of ``X`` (dense or CSR), equal for equal rows (float64 values): (rows,) uint64."""
    if hasattr(X, "toarray"):
        X = X.toarray()
    A = np.ascontiguousarray(np.asarray(X, dtype=np.float64))
    A = np.where(A == 0, 0.0, A)                  # -0.0 and 0.0 are the same feature value
    words = A.view(np.uint64).reshape(A.shape[0], -1)
    h = np.zeros(A.shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(words.shape[1]):
            m = _MULT[j % _MULT.size] ^ np.uint64(j // _MULT.size)
            h = (h ^ (words[:, j] * m)) * np.uint64(0x9E3779B97F4A7C15)
            h ^= h >> np.uint64(29)
    return h


@dataclasses.dataclass
class HarvestedPropensity:
    """θ from intervention harvesting (:func:`harvest_propensity`).

    Attributes
    ----------
    theta : (K,) float64
        θ_k with θ_1 = 1.
    lower : (K,) float64
        Lower ends of the confidence intervals.
    upper : (K,) float64
        Upper ends.
    confidence : float
        Their level.
    pairs : list of dict
        Per pair of ranks used: ``k``, ``k2``, ``ratio`` (θ_k/θ_k2), ``se_log``
        (standard error of its log), ``n_docs`` (how many (q, d) it rests on).
    n_impressions : int
        Rows of the log.
    """

    theta: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    confidence: float
    pairs: list
    n_impressions: int

    @property
    def propensity(self) -> np.ndarray:
        return self.theta


class _Counts:
    """Impressions and clicks per distinct (key, ranker, position), merged chunk by chunk.

    Chunks wait in a buffer until it holds as many rows as the merged cells (at least 2²⁰): each merge then
    costs at most twice what the rows it adds cost, and memory stays O(distinct cells + that buffer).
    """

    min_buffer = 1 << 20

    def __init__(self):
        self.cells = np.zeros(0, dtype=[("key", "u8"), ("ranker", "i8"), ("pos", "i8")])
        self.n = np.zeros(0)
        self.c = np.zeros(0)
        self._pending, self._pending_rows = [], 0

    def add(self, key, ranker, pos, clicks):
        cell = np.empty(key.shape[0], dtype=self.cells.dtype)
        cell["key"], cell["ranker"], cell["pos"] = key, ranker, pos
        self._pending.append((cell, np.asarray(clicks, dtype=np.float64)))
        self._pending_rows += key.shape[0]
        if self._pending_rows >= max(self.cells.size, self.min_buffer):
            self.merge()

    def merge(self):
        if not self._pending:
            return self
        cells = np.concatenate([self.cells] + [p[0] for p in self._pending])
        u, inv = np.unique(cells, return_inverse=True)
        ones = np.ones(self._pending_rows)
        self.n = np.bincount(inv, weights=np.r_[self.n, ones], minlength=u.size)
        self.c = np.bincount(inv, weights=np.concatenate([self.c] + [p[1] for p in self._pending]), minlength=u.size)
        self.cells = u
        self._pending, self._pending_rows = [], 0
        return self


def _chunks(data, key, clicks, position, ranker, max_rows, rows=None):
    if data is not None and clicks is None and position is None and ranker is None:
        _check_store(data, ("click", "position", "ranker"), "harvest_propensity")
        spans = check_spans(rows, int(data.n_rows))
        for X, cols, _ in _store_blocks(data, ("click", "position", "ranker"), spans, max_rows):
            yield (row_keys(X), cols["ranker"].astype(np.int64), cols["position"].astype(np.int64),
                   cols["click"].astype(np.float64))
        return
    if rows is not None:
        raise ValueError("rows= selects rows of a store; slice the arrays instead")
    if clicks is None or position is None or ranker is None:
        raise ValueError("harvest_propensity: give a GroupStore with click, position and ranker columns, or "
                         "clicks=, position=, ranker= and key= (or X)")
    c = _check_clicks(clicks)
    n = c.shape[0]
    p = _check_position(np.asarray(position).reshape(-1), n)
    r = np.asarray(ranker).reshape(-1)
    if r.shape != (n,) or r.dtype.kind not in "iu":
        raise ValueError(f"ranker must hold one integer ranker id per row, shape ({n},); got {r.shape} {r.dtype}")
    if key is None:
        if data is None:
            raise ValueError("harvest_propensity: give key= (one (q, d) id per row) or X (rows identify the (q, d))")
        if data.shape[0] != n:
            raise ValueError(f"X has {data.shape[0]} rows; clicks has {n}")
    else:
        key = np.asarray(key).reshape(-1)
        if key.shape != (n,) or key.dtype.kind not in "iu":
            raise ValueError(f"key must hold one integer (q, d) id per row, shape ({n},); got {key.shape} {key.dtype}")
    for r0 in range(0, n, int(max_rows)):
        r1 = min(n, r0 + int(max_rows))
        k = row_keys(data[r0:r1]) if key is None else key[r0:r1].astype(np.uint64)
        yield k, r[r0:r1].astype(np.int64), p[r0:r1], c[r0:r1]


def harvest_propensity(data=None, *, key=None, clicks=None, position=None, ranker=None, n_positions=None,
                       confidence: float = 0.95, max_rows: int = 65536, rows=None) -> HarvestedPropensity:
    """θ_k and confidence intervals by intervention harvesting across rankers (module docstring).

    ``data``: a GroupStore with ``click``, ``position`` and ``ranker`` columns
    (streamed; (q, d) = the feature row), or in-memory ``clicks=``,
    ``position=``, ``ranker=`` with ``key=`` (an integer (q, d) id per row)
    or ``data=X`` (feature rows as the id); ``rows``: sorted disjoint (r0, r1)
    row spans of the store to use (default every row).  ``n_positions``: K (default: the
    largest rank seen).  Raises when some rank up to K is connected to rank 1
    by no chain of (q, d) shown at both ranks by different rankers.

    >>> from streamrank.datasets.clicks import simulate_position_bias
    >>> log = simulate_position_bias(n_queries=200, n_sessions=20000, n_rankers=4, eta=1.0, random_state=0)
    >>> h = harvest_propensity(key=log.doc, clicks=log.clicks, position=log.position, ranker=log.ranker)
    >>> bool(((h.lower <= log.theta) & (log.theta <= h.upper))[:5].all())
    True
    """
    if not 0 < float(confidence) < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    counts, m = _Counts(), 0
    for k, r, p, c in _chunks(data, key, clicks, position, ranker, max_rows, rows):
        counts.add(k, r, p, c)
        m += c.shape[0]
    counts.merge()
    if m == 0:
        raise ValueError("harvest_propensity: the click log is empty")
    cells = counts.cells
    K = int(cells["pos"].max()) if n_positions is None else int(n_positions)
    cells_in = cells["pos"] <= K
    cells, n_cell, c_cell = cells[cells_in], counts.n[cells_in], counts.c[cells_in]
    keys, kidx = np.unique(cells["key"], return_inverse=True)
    pi = cells["pos"] - 1
    N = np.zeros((keys.size, K))
    C = np.zeros((keys.size, K))
    np.add.at(N, (kidx, pi), n_cell)
    np.add.at(C, (kidx, pi), c_cell)
    n_rk = np.zeros((keys.size, K), dtype=np.int64)          # distinct rankers per (key, rank)
    np.add.at(n_rk, (kidx, pi), 1)
    one_rk = np.full((keys.size, K), -1, dtype=np.int64)     # the ranker, when only one showed it there
    one_rk[kidx, pi] = cells["ranker"]
    ctr = C / np.maximum(N, 1)
    var_ctr = ((C + 0.5) / (N + 1)) * (1 - (C + 0.5) / (N + 1)) / np.maximum(N, 1)
    rows, rhs, wts, pairs = [], [], [], []
    for a in range(K):
        for b in range(a + 1, K):
            both = (N[:, a] > 0) & (N[:, b] > 0)
            same = (n_rk[:, a] == 1) & (n_rk[:, b] == 1) & (one_rk[:, a] == one_rk[:, b])
            om = both & ~same
            if not om.any():
                continue
            na, nb = N[om, a], N[om, b]
            w = na * nb / (na + nb)
            Sa, Sb = float(w @ ctr[om, a]), float(w @ ctr[om, b])
            if Sa <= 0 or Sb <= 0:
                continue
            v = float((w * w) @ var_ctr[om, a]) / Sa ** 2 + float((w * w) @ var_ctr[om, b]) / Sb ** 2
            row = np.zeros(K)
            row[a], row[b] = 1.0, -1.0
            rows.append(row)
            rhs.append(np.log(Sa / Sb))
            wts.append(1.0 / v)
            pairs.append({"k": a + 1, "k2": b + 1, "ratio": Sa / Sb, "se_log": float(np.sqrt(v)),
                          "n_docs": int(om.sum())})
    if not rows:
        raise ValueError("harvest_propensity: no (q, d) was shown at two ranks by different rankers (one "
                         "deterministic ranker: use estimate_propensity_em)")
    A = np.array(rows)[:, 1:]                                 # u_1 = log θ_1 = 0
    Wt = np.array(wts)
    H = A.T @ (Wt[:, None] * A)
    linked = _linked_to_first(np.array(rows), K)
    if not linked.all():
        bad = int(np.flatnonzero(~linked)[0]) + 1
        raise ValueError(f"harvest_propensity: rank {bad} is linked to rank 1 by no chain of (q, d) shown at both "
                         "ranks by different rankers; give n_positions < "
                         f"{bad} or more logs")
    cov = np.linalg.inv(H)
    u = cov @ (A.T @ (Wt * np.array(rhs)))
    se = np.sqrt(np.clip(np.diag(cov), 0, None))
    z = NormalDist().inv_cdf(0.5 + float(confidence) / 2)
    logt = np.r_[0.0, u]
    se = np.r_[0.0, se]
    return HarvestedPropensity(theta=np.exp(logt), lower=np.exp(logt - z * se), upper=np.exp(logt + z * se),
                               confidence=float(confidence), pairs=pairs, n_impressions=m)


def _linked_to_first(rows, K):
    """Which ranks are joined to rank 1 through the pairs (rows of +1/-1)."""
    linked = np.zeros(K, dtype=bool)
    linked[0] = True
    edges = [tuple(np.flatnonzero(r)) for r in rows]
    changed = True
    while changed:
        changed = False
        for a, b in edges:
            if linked[a] != linked[b]:
                linked[a] = linked[b] = True
                changed = True
    return linked

"""Regression EM for the position-based click model on ordinary (non-randomized) click logs.

Model (Richardson et al. 2007; Wang et al. 2018, "Position bias estimation
for unbiased learning to rank in personal search", WSDM): an impression of
document d for query q at rank k is clicked iff it is examined (E) and
relevant (R), independently,

    P(click | q, d, k) = θ_k · γ_{q,d},     γ_{q,d} = σ(b + x_{q,d}·w),     θ_1 = 1,

with x_{q,d} the row's features.  γ is a *regression* on the features (Wang
et al.'s regression EM), so θ is identified from logs of one deterministic
production ranker: a (q, d) always shown at rank 3 still shares its
relevance model with similar rows shown elsewhere.  θ_1 = 1 fixes the scale
(the IPS convention p(1) = 1 of :func:`streamrank.clicks.estimate_propensity`).

One EM iteration is one streamed pass over the click log, block by block
(memory O(n² + K) for n features and K positions, whatever the number of
impressions):

E-step, per impression (c = click, θ = θ_k, γ = γ_{q,d}):
    clicked: P(E=1 | c) = P(R=1 | c) = 1;
    not clicked: P(E=1 | c) = θ(1-γ)/(1-θγ),  P(R=1 | c) = (1-θ)γ/(1-θγ).

M-step:
    θ_k = mean over the impressions at rank k of P(E=1 | c)   (k >= 2; exact maximiser);
    (b, w): one Newton (IRLS) step on the expected complete log-likelihood of R,
    Σ r̂ log γ + (1-r̂) log(1-γ) - (α N / 2) ||w||², which is a weighted ridge
    regression of the working response z = η + (r̂ - γ)/v on x with sample
    weights v = γ(1-γ).  It is solved by :class:`~streamrank.RankRLS` from its
    statistics: the whole log is ONE query group (cut across blocks), so
    RankRLS's pair weights v_i v_j make G = V Σ v_i (x_i - x̄)(x_i - x̄)ᵀ, the
    weighted least squares with a free intercept (V = Σ v).  E-step weights
    enter the statistics exactly as ``sample_weight`` does.

The objective (penalised log-likelihood Σ c log θγ + (1-c) log(1-θγ) -
(α N / 2)||w||², N impressions) is evaluated in the same pass, at the
parameters the pass starts from.  Steps are over-relaxed adaptively
(ω times the EM step, ω growing while steps are accepted: Salakhutdinov and
Roweis 2003); a step that would lower the objective is rejected — the next
pass is spent at the plain EM step, and then at halved ones (the EM
direction is an ascent direction of the objective, so halving terminates) —
so the logged objective never decreases.  Stopping rule: the objective's
relative gain over one accepted iteration at most ``tol`` and no θ_k moved
by more than √tol (or ``max_iter`` passes).
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from ..clicks import _check_clicks, _check_position
from ..rankrls.linear import RankRLS
from ..rankrls._statistics import RankStatistics

__all__ = ["PositionBiasEM", "estimate_propensity_em", "e_step", "log_likelihood"]

_EPS = 1e-12


def _sigmoid(eta):
    return 0.5 * (1.0 + np.tanh(0.5 * eta))   # no overflow warnings for large |eta|


def e_step(clicks, theta_row, gamma):
    """Posteriors of one block: ``(P(E=1 | c), P(R=1 | c))``, each (rows,) float64 (module docstring)."""
    c = np.asarray(clicks, dtype=np.float64)
    t = np.asarray(theta_row, dtype=np.float64)
    g = np.asarray(gamma, dtype=np.float64)
    d = np.maximum(1.0 - t * g, _EPS)
    e = np.where(c == 1, 1.0, t * (1.0 - g) / d)
    r = np.where(c == 1, 1.0, (1.0 - t) * g / d)
    return e, r


def log_likelihood(clicks, theta_row, gamma) -> float:
    """Σ c log(θγ) + (1 - c) log(1 - θγ) over the rows of one block."""
    c = np.asarray(clicks, dtype=np.float64)
    pr = np.clip(np.asarray(theta_row, dtype=np.float64) * np.asarray(gamma, dtype=np.float64), _EPS, 1 - _EPS)
    return float(np.sum(c * np.log(pr) + (1.0 - c) * np.log1p(-pr)))


@dataclasses.dataclass
class PositionBiasEM:
    """An estimated position-based click model (result of :func:`estimate_propensity_em`).

    Attributes
    ----------
    theta : (K,) float64
        Examination propensities θ_1 = 1, θ_2, … (the IPS ``propensity``).
    coef : (n,) float64
        Weights of the relevance model γ(x) = σ(intercept + x·coef).
    intercept : float
        Its intercept.
    objective : list of float
        The penalised log-likelihood of every accepted iteration (non-decreasing).
    log_likelihood : list of float
        The log-likelihood of the same iterates.
    n_iter : int
        Accepted iterations.
    n_passes : int
        Streamed passes (rejected steps included).
    converged : bool
        Whether the stopping rule was met (False: stopped by ``max_iter``).
    n_impressions : int
        Rows of the log.
    alpha : float
        The ridge penalty per impression.
    seconds : list of float
        Wall time of every pass.
    """

    theta: np.ndarray
    coef: np.ndarray
    intercept: float
    objective: list
    log_likelihood: list
    n_iter: int
    n_passes: int
    converged: bool
    n_impressions: int
    alpha: float
    seconds: list = dataclasses.field(default_factory=list)

    @property
    def propensity(self) -> np.ndarray:
        """θ as IPS propensities p[k - 1] (what :func:`streamrank.clicks.ips_weights` and ``ips_weighted`` take)."""
        return self.theta

    def relevance(self, X) -> np.ndarray:
        """γ(x) of the rows of ``X``."""
        return _sigmoid(self.intercept + np.asarray(X @ self.coef, dtype=np.float64).reshape(-1))


def _check_store(data, columns, what):
    have = getattr(data, "row_columns", None)
    if have is None or not hasattr(data, "read_column"):
        raise TypeError(f"{what}: give a GroupStore with {' and '.join(map(repr, columns))} columns, or X with "
                        f"{'= and '.join(c if c != 'click' else 'clicks' for c in columns)}=; got "
                        f"{type(data).__name__} alone")
    missing = [n for n in columns if n not in have]
    if missing:
        raise ValueError(f"{what}: the store at {data.path} keeps no {missing[0]!r} column "
                         f"(it keeps {list(have) or 'none'})")


def check_spans(rows, n_rows):
    """Sorted, disjoint (r0, r1) row spans inside [0, n_rows) as an (s, 2) int64 array (None: every row)."""
    if rows is None:
        return None
    s = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
    if s.size and (np.any(s[:, 0] > s[:, 1]) or s[0, 0] < 0 or s[-1, 1] > n_rows or np.any(s[1:, 0] < s[:-1, 1])):
        raise ValueError(f"rows must be sorted disjoint (r0, r1) spans inside the store's {n_rows} rows; got "
                         f"{s.tolist()[:4]}...")
    return s


def span_mask(spans, r0, r1):
    """Which rows r0..r1 lie in the spans (None: all); (r1 - r0,) bool or None."""
    if spans is None:
        return None
    m = np.zeros(r1 - r0, dtype=bool)
    for a, b in spans[(spans[:, 1] > r0) & (spans[:, 0] < r1)]:
        m[max(a, r0) - r0:min(b, r1) - r0] = True
    return m


def _store_blocks(data, columns, spans, max_rows):
    """(block X, {column: values}, first global row) of a store's blocks, restricted to the row spans."""
    for b in data.blocks(max_rows=max_rows, split_groups=True):
        m = span_mask(spans, b.start, b.stop)
        if m is not None and not m.any():
            continue
        cols = {n: data.read_column(n, b.start, b.stop) for n in columns}
        X = b.X
        if m is not None and not m.all():
            X = X[m]
            cols = {n: v[m] for n, v in cols.items()}
        yield X, cols, b.start


def _chunks(data, clicks, position, max_rows, spans=None):
    """(X, clicks, position, first row) per block: a GroupStore with click/position columns, or arrays."""
    if clicks is None and position is None:
        _check_store(data, ("click", "position"), "estimate_propensity_em")
        for X, cols, start in _store_blocks(data, ("click", "position"), spans, max_rows):
            yield X, cols["click"].astype(np.float64), cols["position"].astype(np.int64), start
        return
    if clicks is None or position is None:
        raise ValueError("estimate_propensity_em: give both clicks= and position= with X")
    X = data
    n = X.shape[0]
    c = _check_clicks(clicks)
    p = _check_position(np.asarray(position).reshape(-1), n)
    if c.shape[0] != n:
        raise ValueError(f"clicks has {c.shape[0]} rows; X has {n}")
    for r0 in range(0, n, int(max_rows)):
        r1 = min(n, r0 + int(max_rows))
        yield X[r0:r1], c[r0:r1], p[r0:r1], r0


class _Pass:
    """One streamed pass at fixed parameters: objective, θ sums and the relevance step's statistics."""

    def __init__(self, n_features, K):
        self.stats = RankStatistics(n_features, 1, group_weight="pair", ties="include")
        self.e_sum = np.zeros(K)
        self.count = np.zeros(K)
        self.ll = 0.0
        self.seen = 0
        self.v_sum = self.vz_sum = 0.0
        self.vx_sum = np.zeros(n_features)

    def add(self, X, c, pos, n_total, theta, coef, intercept):
        if not hasattr(X, "toarray"):
            X = np.asarray(X, dtype=np.float64)      # once per block (a float32 store block), not per product
        t = theta[pos - 1]
        eta = intercept + np.asarray(X @ coef, dtype=np.float64).reshape(-1)
        g = _sigmoid(eta)
        self.ll += log_likelihood(c, t, g)
        e, r = e_step(c, t, g)
        K = theta.shape[0]
        self.e_sum += np.bincount(pos - 1, weights=e, minlength=K)
        self.count += np.bincount(pos - 1, minlength=K)
        v = np.maximum(g * (1.0 - g), 1e-10)             # IRLS weights
        z = eta + (r - g) / v                             # working response
        rows = c.shape[0]
        self.stats.add_block(X, z, np.array([0, rows]), group_size=np.array([n_total]),
                             group_offset=np.array([self.seen]), group_id=np.array([0]), weight=v)
        self.seen += rows
        self.v_sum += float(v.sum())
        self.vz_sum += float(v @ z)
        self.vx_sum += np.asarray(v @ X, dtype=np.float64).reshape(-1)

    def m_step(self, theta, alpha, n_total):
        """New (θ, coef, intercept)."""
        new = theta.copy()
        seen = self.count > 0
        new[seen] = self.e_sum[seen] / self.count[seen]
        new[0] = 1.0
        new = np.clip(new, _EPS, 1.0)
        # RankRLS on one global group: G = V Σ v (x - x̄)(x - x̄)ᵀ, so alpha_RLS = V · (alpha N)
        model = RankRLS(alpha=max(alpha * n_total * self.v_sum, 1e-300)).fit_statistics(self.stats, y_1d=True)
        coef = np.asarray(model.coef_, dtype=np.float64).reshape(-1)
        intercept = (self.vz_sum - self.vx_sum @ coef) / self.v_sum
        return new, coef, float(intercept)


def estimate_propensity_em(data, *, clicks=None, position=None, n_positions=None, alpha: float = 1e-6,
                           max_iter: int = 200, tol: float = 1e-7, init=None, max_rows: int = 65536,
                           max_halvings: int = 30, callback=None, rows=None,
                           overrelax: float = 1.5) -> PositionBiasEM:
    """Estimate the position bias θ_k of ordinary click logs by regression EM (module docstring).

    Parameters
    ----------
    data : GroupStore or array
        A GroupStore with ``click`` and ``position`` columns (streamed block by
        block, features = the store's X), or an (m, n) feature array / CSR
        matrix with ``clicks=`` and ``position=`` (m,) arrays.
    clicks, position : array-like (m,), optional
        0/1 clicks and 1-based ranks, with an array ``data``.
    n_positions : int, optional
        K; default the largest position seen (one cheap first scan).
    alpha : float
        Ridge penalty of the relevance model, per impression (λ = alpha · N).
    max_iter : int
        Streamed passes at most.
    tol : float
        The stopping rule's tolerance.
    init : PositionBiasEM, optional
        A previous result: warm start from its θ, coef and intercept (the
        nightly re-estimate); None: θ_k = 1/k, w = 0, b from the CTR.
    max_rows : int
        Rows per block.
    max_halvings : int
        Halvings of a rejected step before the iteration stops where it is.
    callback : callable, optional
        Called as ``callback(iteration, objective, theta)`` after every accepted iteration.
    rows : sequence of (r0, r1), optional
        Sorted disjoint row spans of the store to use (default every row; the
        nightly's accepted days).
    overrelax : float
        Adaptive over-relaxation (Salakhutdinov and Roweis 2003): after every
        accepted step the next one goes ω times the EM step, ω multiplied by
        ``overrelax`` (at most 16); a step that lowers the objective falls back
        to the plain EM step (ω = 1), which is halved if needed.  1 = plain EM.

    Returns
    -------
    PositionBiasEM
        ``.propensity`` feeds :func:`streamrank.clicks.ips_weights` and
        :func:`streamrank.io.weighted.ips_weighted`.

    Examples
    --------
    >>> import numpy as np
    >>> from streamrank.datasets.clicks import simulate_position_bias
    >>> from streamrank.position_bias import estimate_propensity_em
    >>> log = simulate_position_bias(n_queries=300, n_sessions=3000, eta=1.0, random_state=0)
    >>> em = estimate_propensity_em(log.X, clicks=log.clicks, position=log.position)
    >>> bool(np.all(np.diff(em.objective) >= 0)), bool(np.max(np.abs(em.theta[:5] / log.theta[:5] - 1)) < 0.15)
    (True, True)
    """
    alpha = float(alpha)
    if not np.isfinite(alpha) or alpha < 0:
        raise ValueError(f"alpha must be finite and >= 0, got {alpha}")
    if int(max_iter) < 1 or not tol > 0:
        raise ValueError(f"need max_iter >= 1 and tol > 0; got {max_iter}, {tol}")
    first = None
    if clicks is None and position is None:
        _check_store(data, ("click", "position"), "estimate_propensity_em")
        spans = check_spans(rows, int(data.n_rows))
        n_features = int(data.n_features)
        n_total = int(data.n_rows) if spans is None else int(np.sum(spans[:, 1] - spans[:, 0]))
    else:
        if rows is not None:
            raise ValueError("rows= selects rows of a store; slice the arrays instead")
        spans = None
        n_features, n_total = int(data.shape[1]), int(data.shape[0])
    if n_total == 0:
        raise ValueError("estimate_propensity_em: the click log is empty")
    if n_positions is None or init is None:         # one cheap scan: K and the click-through rate
        K, clicked, seen = 0, 0.0, 0
        for _, c, p, _ in _chunks(data, clicks, position, max_rows, spans):
            K = max(K, int(p.max()) if p.size else 0)
            clicked += float(c.sum())
            seen += c.shape[0]
        first = clicked / seen
        K = K if n_positions is None else int(n_positions)
    else:
        K = int(n_positions)
    if init is not None:
        theta = np.asarray(init.theta, dtype=np.float64).copy()
        if theta.shape[0] < K:
            theta = np.concatenate([theta, np.full(K - theta.shape[0], theta[-1])])
        theta = theta[:K]
        coef = np.asarray(init.coef, dtype=np.float64).copy()
        if coef.shape != (n_features,):
            raise ValueError(f"init has {coef.shape[0]} coefficients; the log has {n_features} features")
        intercept = float(init.intercept)
    else:
        theta = 1.0 / np.arange(1, K + 1)
        coef = np.zeros(n_features)
        ctr = min(max(first / float(np.mean(theta)), 1e-3), 1 - 1e-3)
        intercept = float(np.log(ctr / (1 - ctr)))
    objective, lls, seconds = [], [], []
    prev = None             # (theta, coef, intercept) of the last accepted iterate
    n_pass, halvings, converged = 0, 0, False
    omega, plain = 1.0, None     # over-relaxation factor; the plain EM step from ``prev``
    while n_pass < max_iter:
        t0 = time.perf_counter()
        acc = _Pass(n_features, K)
        for X, c, p, start in _chunks(data, clicks, position, max_rows, spans):
            if p.size and int(p.max()) > K:
                i = int(np.argmax(p))
                raise ValueError(f"a row of the block from row {start} was shown at position {int(p[i])}, beyond "
                                 f"n_positions={K}")
            acc.add(X, c, p, n_total, theta, coef, intercept)
        acc.stats.check_complete()
        n_pass += 1
        seconds.append(time.perf_counter() - t0)
        obj = acc.ll - 0.5 * alpha * n_total * float(coef @ coef)
        if objective and obj < objective[-1]:                  # the step lowered the objective
            if omega > 1.0:                                     # an over-relaxed step: back to the plain EM step
                omega = 1.0
                theta, coef, intercept = plain
                continue
            halvings += 1                                       # the plain step: halve it
            if halvings > max_halvings:
                theta, coef, intercept = prev
                converged = True
                break
            theta = 0.5 * (theta + prev[0])
            coef = 0.5 * (coef + prev[1])
            intercept = 0.5 * (intercept + prev[2])
            continue
        halvings = 0
        if objective and (obj - objective[-1]) <= tol * abs(obj) and np.max(np.abs(theta - prev[0])) <= tol ** 0.5:
            objective.append(obj)
            lls.append(acc.ll)
            if callback is not None:
                callback(len(objective), obj, theta.copy())
            converged = True
            break
        objective.append(obj)
        lls.append(acc.ll)
        if callback is not None:
            callback(len(objective), obj, theta.copy())
        if len(objective) > 1 and plain is not None:
            omega = min(omega * overrelax, 16.0) if overrelax > 1 else 1.0
        prev = (theta, coef, intercept)
        plain = acc.m_step(theta, alpha, n_total)
        theta, coef, intercept = (prev[0] + omega * (plain[0] - prev[0]), prev[1] + omega * (plain[1] - prev[1]),
                                  prev[2] + omega * (plain[2] - prev[2]))
        theta = np.clip(theta, _EPS, 1.0)
    else:
        theta, coef, intercept = prev if prev is not None else (theta, coef, intercept)
    return PositionBiasEM(theta=theta, coef=coef, intercept=intercept, objective=objective, log_likelihood=lls,
                          n_iter=len(objective), n_passes=n_pass, converged=converged, n_impressions=n_total,
                          alpha=alpha, seconds=seconds)

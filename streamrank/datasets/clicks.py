"""Click-log simulation on graded data: a logging ranker's top-k lists and position-biased clicks.

The standard recipe of unbiased learning-to-rank studies (Joachims,
Swaminathan and Schnabel 2017, WSDM; Ai et al. 2018, SIGIR), so that the
effect of position bias — and of correcting it — is measurable on real
relevance labels (MQ2008, OHSUMED):

1. a *logging ranker* scores every document of a query (e.g. a RankRLS fit
   on a small sample of labelled queries);
2. each query is issued ``n_sessions`` times; a session shows the ranker's
   top ``k`` documents (``randomize=True``: in a uniformly random order — the
   result-randomization traffic that :func:`streamrank.clicks.estimate_propensity`
   needs);
3. **position-based click model**: a document at rank r is examined with
   probability p(r) = (1/r)^eta, and an examined document is clicked with
   probability ``noise + (1 - noise) (2^rel - 1) / (2^max_label - 1)``
   (so a non-relevant document is clicked with probability ``noise``).

Every session is one query group of the click log (its own group id), with
the row indices into the graded data, the 1-based shown positions and 0/1
clicks.  A 2-D ``logging_score`` (rows, R) holds R logging rankers: every
session is served by one of them, drawn uniformly (``ClickLog.ranker``) —
the historical rankers intervention harvesting needs
(:func:`streamrank.position_bias.harvest_propensity`).

:func:`simulate_position_bias` simulates ordinary logs on synthetic
features with a known position-based model: relevance γ = σ(b + x·β) (the
model family of :func:`streamrank.position_bias.estimate_propensity_em`),
examination θ_k = (1/k)^eta, and one or several *deterministic* production
rankers (no randomization): each ranks by a noisy copy of x·β, fixed per
document.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validation import check_qid, group_ptr_from_qid

__all__ = ["ClickLog", "simulate_clicks", "PositionBiasLog", "simulate_position_bias"]


@dataclass
class ClickLog:
    """A simulated click log: one row per shown document per session.

    Attributes
    ----------
    row : (l,) int64 — index of the shown document in the graded data
    session : (l,) int64 — the session (group id; contiguous)
    position : (l,) int64 — 1-based rank it was shown at
    clicks : (l,) float64 — 0 or 1
    propensity : (k,) float64 — the true examination probabilities p(1..k)
    ranker : (l,) int64 — the logging ranker of the row's session (0 with one ranker)
    """

    row: np.ndarray
    session: np.ndarray
    position: np.ndarray
    clicks: np.ndarray
    propensity: np.ndarray
    ranker: np.ndarray | None = None

    @property
    def n_sessions(self) -> int:
        return int(np.unique(self.session).size)


def simulate_clicks(y, qid, logging_score, *, k: int = 10, eta: float = 1.0, noise: float = 0.1,
                    n_sessions: int = 10, max_label=None, randomize: bool = False, random_state=None,
                    session_start: int = 0) -> ClickLog:
    """Simulate ``n_sessions`` sessions of every query (module docstring for the model).

    ``y`` graded labels (>= 0), ``qid`` contiguous query ids, ``logging_score``
    the logging ranker's scores (ties broken by row order); ``max_label``
    defaults to ``y.max()``.  Sessions are numbered from ``session_start``.
    ``logging_score`` (rows, R): R rankers, one drawn uniformly per session.
    """
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    S = np.asarray(logging_score, dtype=np.float64)
    S = S.reshape(-1, 1) if S.ndim == 1 else S
    if S.ndim != 2 or S.shape[0] != y.shape[0] or S.shape[1] < 1:
        raise ValueError(f"logging_score has shape {np.shape(logging_score)}; y has {y.shape} (one score per "
                         "row, or (rows, rankers))")
    if np.any(y < 0) or not np.all(np.isfinite(y)):
        raise ValueError("y must hold finite graded labels >= 0")
    if int(k) < 1 or int(n_sessions) < 1 or not (0 <= noise <= 1) or eta < 0:
        raise ValueError(f"need k >= 1, n_sessions >= 1, 0 <= noise <= 1, eta >= 0; got {k}, {n_sessions}, "
                         f"{noise}, {eta}")
    gp, _ = group_ptr_from_qid(check_qid(qid, y.shape[0], "qid"), "qid")
    rng = np.random.default_rng(random_state)
    k = int(k)
    p = (1.0 / np.arange(1, k + 1)) ** float(eta)
    top = float(y.max() if max_label is None else max_label)
    attract = noise + (1.0 - noise) * (2.0 ** y - 1.0) / max(2.0 ** top - 1.0, 1e-300)
    n_rankers = S.shape[1]
    rows, sess, pos, clk, rk = [], [], [], [], []
    sid = int(session_start)
    for g in range(len(gp) - 1):
        a, b = int(gp[g]), int(gp[g + 1])
        orders = np.stack([a + np.argsort(-S[a:b, r], kind="stable")[:k] for r in range(n_rankers)])
        m = orders.shape[1]
        who = rng.integers(0, n_rankers, size=n_sessions) if n_rankers > 1 else np.zeros(n_sessions, np.int64)
        shown = orders[who]                                          # (sessions, m)
        if randomize:
            shown = np.take_along_axis(shown, np.argsort(rng.random((n_sessions, m)), axis=1), axis=1)
        ranks = np.tile(np.arange(1, m + 1), (n_sessions, 1))
        exam = rng.random((n_sessions, m)) < p[ranks - 1]
        click = exam & (rng.random((n_sessions, m)) < attract[shown])
        rows.append(shown.ravel())
        pos.append(ranks.ravel())
        clk.append(click.ravel())
        sess.append(np.repeat(np.arange(sid, sid + n_sessions), m))
        rk.append(np.repeat(who, m))
        sid += n_sessions
    cat = (lambda parts, dt: np.concatenate(parts).astype(dt)) if rows else (lambda parts, dt: np.zeros(0, dt))
    return ClickLog(row=cat(rows, np.int64), session=cat(sess, np.int64), position=cat(pos, np.int64),
                    clicks=cat(clk, np.float64), propensity=p, ranker=cat(rk, np.int64))


@dataclass
class PositionBiasLog:
    """A simulated ordinary click log with a known position-based model (:func:`simulate_position_bias`).

    Attributes
    ----------
    X : (l, n) float64 — features of the shown document (the (q, d) row)
    doc : (l,) int64 — the (q, d) shown (index into the simulated corpus)
    query, session, position, ranker : (l,) int64 — query, session (contiguous group id), 1-based rank,
        the production ranker that served the session
    clicks : (l,) float64 — 0 or 1
    theta : (k,) float64 — the true examination propensities θ_k = (1/k)^eta
    gamma : (l,) float64 — the true relevance probability of the row's (q, d)
    coef, intercept — the true relevance model γ = σ(intercept + x·coef)
    """

    X: np.ndarray
    doc: np.ndarray
    query: np.ndarray
    session: np.ndarray
    position: np.ndarray
    ranker: np.ndarray
    clicks: np.ndarray
    theta: np.ndarray
    gamma: np.ndarray
    coef: np.ndarray
    intercept: float


def simulate_position_bias(*, n_queries: int = 1000, docs_per_query: int = 30, n_features: int = 10,
                           n_sessions: int = 100_000, k: int = 10, eta: float = 1.0, n_rankers: int = 1,
                           ranker_noise: float = 1.0, intercept: float = -1.0, random_state=None) -> PositionBiasLog:
    """Ordinary click logs of ``n_rankers`` deterministic production rankers, with known θ (module docstring).

    Corpus: ``n_queries`` × ``docs_per_query`` documents with N(0, 1)
    features; relevance γ = σ(intercept + x·β), β ~ N(0, 1/n)·1.5 (a fixed
    draw).  Ranker r scores x·β + ranker_noise·ε_r (ε_r ~ N(0, 1), fixed per
    document: a biased but not random ranker).  Each session draws a query
    and a ranker uniformly and shows the ranker's top ``k``; a row is clicked
    with probability θ_position · γ.  ``n_sessions · k`` impressions.
    """
    if min(int(n_queries), int(n_sessions), int(k), int(n_rankers), int(n_features)) < 1 or \
            int(docs_per_query) < int(k) or not np.isfinite(eta) or eta < 0 or ranker_noise < 0:
        raise ValueError("need n_queries, n_sessions, k, n_rankers, n_features >= 1, docs_per_query >= k, "
                         f"eta >= 0, ranker_noise >= 0; got {n_queries}, {n_sessions}, {k}, {n_rankers}, "
                         f"{n_features}, {docs_per_query}, {eta}, {ranker_noise}")
    rng = np.random.default_rng(random_state)
    nq, nd, k = int(n_queries), int(docs_per_query), int(k)
    Xd = rng.normal(size=(nq * nd, int(n_features)))
    beta = 1.5 * rng.normal(size=int(n_features)) / np.sqrt(n_features)
    score = Xd @ beta
    gamma_d = 1.0 / (1.0 + np.exp(-(float(intercept) + score)))
    theta = (1.0 / np.arange(1, k + 1)) ** float(eta)
    top = np.empty((int(n_rankers), nq, k), dtype=np.int64)       # each ranker's top k of every query
    for r in range(int(n_rankers)):
        s = (score + float(ranker_noise) * rng.normal(size=score.shape)).reshape(nq, nd)
        top[r] = np.argsort(-s, axis=1, kind="stable")[:, :k] + (np.arange(nq) * nd)[:, None]
    q = rng.integers(0, nq, size=int(n_sessions))
    who = rng.integers(0, int(n_rankers), size=int(n_sessions))
    doc = top[who, q].reshape(-1)
    position = np.tile(np.arange(1, k + 1), int(n_sessions))
    g = gamma_d[doc]
    clicks = ((rng.random(doc.size) < theta[position - 1]) & (rng.random(doc.size) < g)).astype(np.float64)
    return PositionBiasLog(X=Xd[doc], doc=doc, query=np.repeat(q, k).astype(np.int64),
                           session=np.repeat(np.arange(int(n_sessions)), k).astype(np.int64), position=position,
                           ranker=np.repeat(who, k).astype(np.int64), clicks=clicks, theta=theta, gamma=g,
                           coef=beta, intercept=float(intercept))

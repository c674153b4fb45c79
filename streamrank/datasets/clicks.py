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
clicks.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validation import check_qid, group_ptr_from_qid

__all__ = ["ClickLog", "simulate_clicks"]


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
    """

    row: np.ndarray
    session: np.ndarray
    position: np.ndarray
    clicks: np.ndarray
    propensity: np.ndarray

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
    """
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    s = np.asarray(logging_score, dtype=np.float64).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"logging_score has shape {s.shape}; y has {y.shape}")
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
    rows, sess, pos, clk = [], [], [], []
    sid = int(session_start)
    for g in range(len(gp) - 1):
        a, b = int(gp[g]), int(gp[g + 1])
        order = a + np.argsort(-s[a:b], kind="stable")[:k]
        m = order.size
        shown = np.tile(order, (n_sessions, 1))                      # (sessions, m)
        if randomize:
            shown = np.take_along_axis(shown, np.argsort(rng.random((n_sessions, m)), axis=1), axis=1)
        ranks = np.tile(np.arange(1, m + 1), (n_sessions, 1))
        exam = rng.random((n_sessions, m)) < p[ranks - 1]
        click = exam & (rng.random((n_sessions, m)) < attract[shown])
        rows.append(shown.ravel())
        pos.append(ranks.ravel())
        clk.append(click.ravel())
        sess.append(np.repeat(np.arange(sid, sid + n_sessions), m))
        sid += n_sessions
    cat = (lambda parts, dt: np.concatenate(parts).astype(dt)) if rows else (lambda parts, dt: np.zeros(0, dt))
    return ClickLog(row=cat(rows, np.int64), session=cat(sess, np.int64), position=cat(pos, np.int64),
                    clicks=cat(clk, np.float64), propensity=p)

"""Days for the nightly data checks (issue 36): good days of 300 queries x 12 documents, 8 features, graded
labels 0..3 from a linear rule, and the broken days the checks must name."""
from __future__ import annotations

import numpy as np

W = np.array([1.0, -0.8, 0.6, 0.5, -0.4, 0.3, 0.2, -0.1])


def good_day(seed, n_queries=300, per_query=12):
    """``(X, y, qid)`` of one good day; query ids unique to the seed."""
    rng = np.random.default_rng(seed)
    m = n_queries * per_query
    X = rng.normal(size=(m, len(W))).astype(np.float32)
    s = X @ W + 0.3 * rng.normal(size=m)
    y = np.digitize(s, [-1.0, 0.0, 1.0]).astype(np.float64)        # grades 0..3
    qid = np.repeat(np.arange(n_queries) + 100_000 * seed, per_query)
    return X, y, qid


def broken(kind, seed, yesterday=None):
    """A broken day: ``inverted`` (labels 3 - y), ``zeroed`` (feature 0 all zeros), ``rescaled`` (labels x 2),
    ``repeat`` (yesterday's rows under new query ids), ``tenth`` (a tenth of the queries)."""
    X, y, qid = good_day(seed)
    if kind == "inverted":
        y = 3 - y
    elif kind == "zeroed":
        X = X.copy()
        X[:, 0] = 0
    elif kind == "rescaled":
        y = 2 * y
    elif kind == "repeat":
        X, y, _ = yesterday
        qid = qid[: len(y)]
    elif kind == "tenth":
        keep = qid < qid[0] + 30
        X, y, qid = X[keep], y[keep], qid[keep]
    else:
        raise ValueError(kind)
    return X, y, qid


def save(path, day):
    X, y, qid = day
    np.savez(path, X=X, y=y, qid=qid)
    return path

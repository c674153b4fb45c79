"""Synthetic nightly logs and small stores for the pipelines tests."""
from __future__ import annotations

import numpy as np

import streamrank as sr


def make_day(day, n_groups=12, n_features=6, seed=0, sparse=False):
    """Deterministic synthetic logs of one night: groups with qids unique to ``day``."""
    rng = np.random.default_rng(seed * 1000 + day)
    sizes = rng.integers(2, 12, n_groups)
    qid = np.repeat(np.arange(day * 1000, day * 1000 + n_groups), sizes)
    m = len(qid)
    w = np.linspace(-1.0, 1.0, n_features)
    X = rng.normal(size=(m, n_features)).astype(np.float32)
    y = np.round(X @ w + 0.5 * rng.normal(size=m)).astype(np.float64)
    return X, y, qid


def make_store(path, days, **kw):
    X0, _, _ = make_day(days[0], **kw)
    store = sr.GroupStore.create(path, n_features=X0.shape[1])
    for d in days:
        store.append(*make_day(d, **kw), batch_id=f"day-{d}")
    return sr.GroupStore.open(path)



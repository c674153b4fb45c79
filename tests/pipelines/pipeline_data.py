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


def make_store(path, days, storage_options=None, **kw):
    """A store of the days' logs at ``path`` (a directory, or a URL with its ``storage_options``)."""
    X0, _, _ = make_day(days[0], **kw)
    opts = {"storage_options": storage_options} if storage_options else {}
    store = sr.GroupStore.create(path, n_features=X0.shape[1], **opts)
    for d in days:
        store.append(*make_day(d, **kw), batch_id=f"day-{d}")
    return sr.GroupStore.open(path, **opts)


def make_tuple_day(tmp, d, n_features=12, n_tuples=300):
    """A tuple day as .npz: CSR Q and D, and (q, d+, d-) ordered by a planted bilinear score."""
    import scipy.sparse as sp

    rng = np.random.default_rng(100 + d)
    Q = sp.random(20, n_features, density=0.3, format="csr", random_state=rng)
    D = sp.random(30, n_features, density=0.3, format="csr", random_state=rng)
    S = (Q @ D.T).toarray()
    q, a, b = rng.integers(0, 20, n_tuples), rng.integers(0, 30, n_tuples), rng.integers(0, 30, n_tuples)
    swap = S[q, a] < S[q, b]
    tup = np.stack([q, np.where(swap, b, a), np.where(swap, a, b)], axis=1)
    p = tmp / f"tuples{d}.npz"
    np.savez(p, Q_data=Q.data, Q_indices=Q.indices, Q_indptr=Q.indptr, Q_shape=Q.shape,
             D_data=D.data, D_indices=D.indices, D_indptr=D.indptr, D_shape=D.shape, tuples=tup)
    return p

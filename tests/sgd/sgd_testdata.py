"""Helpers of the SGD tests (a uniquely named module: ``from conftest import`` is order-dependent)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp


class ArrayTuples:
    """A tiny in-memory tuple source with the ``.batches()`` contract of a TupleStore.

    Tuples (q, d+, d-) index rows of Q and D.  ``shuffle_buffer > 0`` shuffles
    the tuple order with ``random_state`` (a full permutation: the buffer is
    larger than these test sets).
    """

    def __init__(self, Q, D, tuples):
        self.Q = sp.csr_matrix(Q)
        self.D = sp.csr_matrix(D)
        self.tuples = np.asarray(tuples, dtype=np.int64)
        self.n_query_features = self.Q.shape[1]
        self.n_item_features = self.D.shape[1]
        self.calls = []

    def order(self, shuffle_buffer, random_state):
        idx = np.arange(len(self.tuples))
        if shuffle_buffer:
            idx = np.random.default_rng(random_state).permutation(idx)
        return idx

    def batches(self, batch_size=1024, shuffle_buffer=100_000, random_state=0):
        self.calls.append(random_state)
        idx = self.order(shuffle_buffer, random_state)
        for s in range(0, len(idx), batch_size):
            tt = self.tuples[idx[s:s + batch_size]]
            yield SimpleNamespace(Q=self.Q[tt[:, 0]], D_pos=self.D[tt[:, 1]], D_neg=self.D[tt[:, 2]])

    def rows(self, n_steps, shuffle_buffer=100_000, random_state=0):
        """The (Q, D_pos, D_neg) rows that ``fit(n_steps)`` sees, in order."""
        parts = []
        p = 0
        while sum(len(x) for x in parts) < n_steps:
            parts.append(self.tuples[self.order(shuffle_buffer, random_state + p)])
            p += 1
        tt = np.concatenate(parts)[:n_steps]
        return self.Q[tt[:, 0]], self.D[tt[:, 1]], self.D[tt[:, 2]]


def random_tuples(n_tuples, n_q, n_d, density=0.3, seed=0, n_items=None, dtype=np.float64):
    rng = np.random.default_rng(seed)
    n_items = n_items or max(4, n_tuples // 2)
    Q = sp.random(n_tuples, n_q, density=density, random_state=rng, format="csr", dtype=dtype)
    Dp = sp.random(n_tuples, n_d, density=density, random_state=rng, format="csr", dtype=dtype)
    Dn = sp.random(n_tuples, n_d, density=density, random_state=rng, format="csr", dtype=dtype)
    return Q, Dp, Dn

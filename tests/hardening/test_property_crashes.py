"""Property tests: random group structures, block budgets and append sequences with interleaved crashes.

A *crash* is simulated in process: the writer is stopped (an exception that
nothing in streamrank catches) after its k-th array write or just before its
commit record, the handle is thrown away, and the store is reopened — what a
killed process leaves behind (the real-process version is in
``test_crash_safety.py``).  Whatever the sequence:

* the store holds exactly the committed batches, in order, bit for bit, and
  ``verify()`` checks every one of them;
* a crashed batch re-appended later under the same id lands exactly once;
* every block budget streams the same rows, never splitting a group;
* RankRLS fitted from the store with any block budget equals the in-memory
  fit on the committed arrays, and streamed NDCG equals in-memory NDCG.
"""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamrank as sr
from streamrank.io import _group_append
from streamrank.io import group_store as gs
from streamrank.io.schema import CheckedArray


pytestmark = pytest.mark.filterwarnings("ignore:.*exceed the block budget")


class SimulatedCrash(BaseException):
    """The writer process 'dies' (BaseException: no ``except Exception`` swallows it)."""


def _batch(i, sizes, n_features, sparse):
    rng = np.random.default_rng(i)
    qid = np.repeat(np.arange(i * 100, i * 100 + len(sizes)), sizes)
    m = len(qid)
    X = rng.normal(size=(m, n_features)).astype(np.float32)
    if sparse:
        X[rng.random(X.shape) < 0.6] = 0.0
        X = sp.csr_matrix(X)
    y = rng.integers(0, 4, m).astype(np.float64)
    return X, y, qid


op = st.tuples(st.lists(st.integers(1, 9), min_size=1, max_size=6),     # group sizes of the batch
               st.sampled_from(["ok", "crash_write", "crash_commit"]),
               st.integers(0, 6))                                          # writes before the crash


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=st.lists(op, min_size=1, max_size=5), sparse=st.booleans(), budgets=st.lists(
    st.integers(1, 60), min_size=1, max_size=3), n_features=st.integers(1, 4))
def test_append_sequences_with_crashes(tmp_path_factory, ops, sparse, budgets, n_features):
    path = tmp_path_factory.mktemp("prop") / "s.zarr"
    gs.GroupStore.create(path, n_features, sparse=sparse, chunk_rows=16)
    committed = []   # batch indices in commit order
    crashed = []
    for i, (sizes, what, k) in enumerate(ops):
        b = _batch(i, sizes, n_features, sparse)
        store = sr.GroupStore.open(path, mode="a")
        if what == "ok":
            store.append(*b, batch_id=f"b{i}")
            committed.append(i)
            continue
        calls = {"n": 0}
        real_set = CheckedArray.__setitem__

        def dying_set(self, key, value, _k=k):
            if calls["n"] >= _k:
                raise SimulatedCrash
            calls["n"] += 1
            real_set(self, key, value)

        def dying_commit(*a, **kw):
            raise SimulatedCrash

        target = (mock.patch.object(CheckedArray, "__setitem__", dying_set) if what == "crash_write"
                  else mock.patch.object(_group_append, "write_attrs", dying_commit))
        try:
            with target:
                store.append(*b, batch_id=f"b{i}")
            committed.append(i)        # the crash point was after the last write: it committed
        except SimulatedCrash:
            crashed.append(i)
        del store
        s = sr.GroupStore.open(path)   # a crash leaves the store at its last commit
        assert [e["batch_id"] for e in s.batches] == [f"b{j}" for j in committed]
    # crashed batches are redone (twice: the second time is skipped by its id)
    store = sr.GroupStore.open(path, mode="a")
    for i in crashed:
        b = _batch(i, ops[i][0], n_features, sparse)
        assert store.append(*b, batch_id=f"b{i}") is True
        assert store.append(*b, batch_id=f"b{i}") is False
        committed.append(i)
    s = sr.GroupStore.open(path)
    assert s.verify() == len(committed)
    parts = [_batch(i, ops[i][0], n_features, sparse) for i in committed]
    X = sp.vstack([p[0] for p in parts], format="csr") if sparse else np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    q = np.concatenate([p[2] for p in parts])
    dense = X.toarray() if sparse else X
    for budget in budgets:
        blocks = list(s.blocks(max_rows=budget))
        got = np.concatenate([(b.X.toarray() if sp.issparse(b.X) else b.X) for b in blocks])
        np.testing.assert_array_equal(got, dense)
        np.testing.assert_array_equal(np.concatenate([b.y for b in blocks]), y)
        for b in blocks:  # a group is never split unless it alone exceeds the budget
            assert b.n_rows <= budget or b.n_groups == 1
    ref = sr.RankRLS(alpha=0.5, solver="primal").fit(dense.astype(np.float64), y, q)
    for budget in budgets:
        m = sr.RankRLS(alpha=0.5, solver="primal").fit(s, max_rows=budget)
        np.testing.assert_allclose(dense @ m.coef_, dense @ ref.coef_, rtol=1e-8,
                                   atol=1e-10 * max(1.0, np.abs(dense @ ref.coef_).max()))
        # NaN (no query with a relevant item) must match too
        np.testing.assert_allclose(sr.metrics.evaluate(s, ref, metrics="ndcg@10", max_rows=budget)["ndcg@10"].value,
                                   sr.metrics.ndcg(y, dense @ ref.coef_, q), rtol=1e-12, equal_nan=True)

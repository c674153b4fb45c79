"""The one append transaction both stores run (streamrank.io._append_transaction).

Each step is exercised through both stores: a writer dying between writing the
data and the commit (at the chunk bindings, a step the transaction owns) leaves
either store at its last commit, and the next append repairs the tail, commits
the batch once, and skips it the second time.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from streamrank.io import _append_transaction as tx


class Died(Exception):
    pass


def _group(path):
    store = sr.GroupStore.create(path, 3, chunk_rows=4)

    def batch(i):
        return dict(X=np.full((5, 3), float(i + 1)), y=np.arange(5.0), qid=[10 * i] * 2 + [10 * i + 1] * 3)

    def append(s, i):
        return s.append(**batch(i), batch_id=f"b{i}")

    def content(s):
        return s.n_rows, [e["batch_id"] for e in s.batches], s.verify()

    return store, sr.GroupStore.open, append, content


def _tuples(path):
    store = sr.TupleStore.create(path, 4, 5)

    def append(s, i):
        Q = sp.csr_matrix(np.eye(2, 4) * (i + 1))
        D = sp.csr_matrix(np.eye(3, 5) * (i + 1))
        return s.append(Q, D, [[0, 1, 2], [1, 0, 2]], batch_id=f"b{i}")

    def content(s):
        return s.n_tuples, [e["batch_id"] for e in s.log], s.verify()

    return store, sr.TupleStore.open, append, content


# the same transaction (io/_append_transaction.py) for both stores: the quick loop keeps the GroupStore's
# (the TupleStore's: 1.1-2.2 s wall under load 13)
@pytest.mark.parametrize("make", [_group, pytest.param(_tuples, marks=pytest.mark.slow)], ids=["GroupStore", "TupleStore"])
def test_a_writer_dying_before_the_commit_leaves_the_last_commit(tmp_path, monkeypatch, caplog, make):
    store, open_, append, content = make(tmp_path / "s.zarr")
    assert append(store, 0) is True
    before = content(open_(tmp_path / "s.zarr"))

    def die(*a, **kw):
        raise Died

    with monkeypatch.context() as m:
        m.setattr(tx, "commit_bindings", die)       # after the data was written, before the commit record
        with pytest.raises(Died):
            append(open_(tmp_path / "s.zarr", mode="a"), 1)
    assert content(open_(tmp_path / "s.zarr")) == before     # the torn batch is invisible

    w = open_(tmp_path / "s.zarr", mode="a")
    with caplog.at_level(logging.WARNING, logger="streamrank"):
        assert append(w, 1) is True                 # the tail is cut back, then the batch committed
    assert [r.getMessage().split(" ")[0] for r in caplog.records if "repaired a torn" in r.getMessage()] == [
        "GroupStore" if make is _group else "TupleStore"]
    assert append(w, 1) is False                    # idempotent: the logged batch is skipped
    n, ids, verified = content(open_(tmp_path / "s.zarr"))
    assert ids == ["b0", "b1"] and verified == 2 and n == 2 * before[0]


def test_the_transaction_is_the_only_writer_of_the_commit_record():
    """Both stores commit through append_transaction: neither module takes the lock or binds chunks itself."""
    import inspect

    from streamrank.io import _group_append, tuple_store

    for mod in (_group_append, tuple_store):
        src = inspect.getsource(mod)
        for name in ("writer_lock(", "commit_bindings(", "cut_torn_tail(", "writing("):
            assert name not in src, (mod.__name__, name)
        assert "append_transaction(self" in src

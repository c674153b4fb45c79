"""``streamrank ingest`` copies and reads in bounded pieces: tuple stores piece by piece, resumable."""
from __future__ import annotations


import numpy as np
import pytest
import scipy.sparse as sp

from _cli_inproc import run_cli

import streamrank as sr
from streamrank.io.tuple_copy import copy_tuple_store


def _run(*args):
    rc, out, err = run_cli(*args)
    assert rc == 0, err
    return out


def _tuple_source(path, days=3, seed=0):
    """A TupleStore of several batches; later batches' tuples also point at earlier batches' rows."""
    rng = np.random.default_rng(seed)
    ts = sr.TupleStore.create(path, 16, 16)
    for d in range(days):
        Q = sp.random(23, 16, density=0.3, random_state=rng, format="csr")
        D = sp.random(31, 16, density=0.3, random_state=rng, format="csr")
        nq, nd = ts.n_queries + 23, ts.n_items + 31
        t = np.column_stack([rng.integers(0, nq, 100), rng.integers(0, nd, 100), rng.integers(0, nd, 100)])
        ts.append(Q, D, t, magnitudes=rng.random(100) + 0.5, batch_id=f"day-{d}", rows="global")
    return sr.TupleStore.open(path)


def _same_content(a, b, q_off=0, d_off=0):
    """b holds a's vectors after q_off / d_off rows and a's tuples (shifted) at its end."""
    ta, ma = a.read_tuples()
    tb, mb = b.read_tuples(b.n_tuples - a.n_tuples)
    np.testing.assert_array_equal(tb, ta + [q_off, d_off, d_off])
    np.testing.assert_array_equal(mb, ma)
    assert (b.Q[q_off:] != a.Q).nnz == 0 and (b.D[d_off:] != a.D).nnz == 0


@pytest.mark.slow   # many small pieces: ~4 CPU-s
def test_tuple_store_copied_in_pieces(tmp_path):
    src = _tuple_source(tmp_path / "src.zarr")
    _run("ingest", src.path, "--store", tmp_path / "dst.zarr", "--format", "zarr", "--max-rows", 7, "-q")
    dst = sr.TupleStore.open(tmp_path / "dst.zarr")
    _same_content(src, dst)
    # 23 Q rows / 31 D rows in pieces of 7 -> 5 row pieces; 100 tuples in pieces of 56 -> 2 pieces; 6 appends
    assert len(dst.log) == 3 * 6 and dst.verify() == 18
    assert max(e["tuples"][1] - e["tuples"][0] for e in dst.log) <= 56
    assert max(e["q_rows"][1] - e["q_rows"][0] for e in dst.log) <= 7
    # again: every piece is already there
    out = _run("ingest", src.path, "--store", tmp_path / "dst.zarr", "--format", "zarr", "--max-rows", 7)
    assert "0 tuples (0 batch(es), 3 already in the store)" in out
    # default piece size: one append per source batch
    _run("ingest", src.path, "--store", tmp_path / "one.zarr", "--format", "zarr", "-q")
    one = sr.TupleStore.open(tmp_path / "one.zarr")
    assert len(one.log) == 3
    _same_content(src, one)


@pytest.mark.slow   # an interrupted copy in many pieces: ~2 CPU-s
def test_interrupted_copy_resumes_into_a_nonempty_store(tmp_path):
    src = _tuple_source(tmp_path / "src.zarr")
    dst = _tuple_source(tmp_path / "dst.zarr", days=1, seed=9)       # already holds other data
    q0, d0, l0 = dst.n_queries, dst.n_items, dst.n_tuples
    target = sr.TupleStore.open(dst.path, mode="a")
    real, calls = target.append, []

    def interrupted(*a, **k):
        if len(calls) == 8:
            raise KeyboardInterrupt
        calls.append(1)
        return real(*a, **k)

    target.append = interrupted
    with pytest.raises(KeyboardInterrupt):
        copy_tuple_store(src, target, "src", {"tuples": 0, "skipped_tuples": 0, "batches": 0, "skipped": 0},
                         rows_per_append=7)
    part = sr.TupleStore.open(dst.path)
    assert len(part.log) == 1 + 8 and part.verify() == 9          # the committed pieces, nothing torn
    counts = {"tuples": 0, "skipped_tuples": 0, "batches": 0, "skipped": 0}
    copy_tuple_store(src, sr.TupleStore.open(dst.path, mode="a"), "src", counts, rows_per_append=7)
    assert counts["skipped"] == 1 and counts["batches"] == 2      # batch 0 was complete; 1 finished, 2 new
    full = sr.TupleStore.open(dst.path)
    assert full.n_tuples == l0 + 300 and len(full.log) == 1 + 18
    _same_content(src, full, q0, d0)


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
@pytest.mark.slow   # CLI ingests per npz kind: ~1.5 s warm
def test_npz_ingested_by_rows_in_whole_queries(tmp_path, save):
    rng = np.random.default_rng(3)
    qid = np.repeat(np.arange(30), rng.integers(1, 9, 30))
    X = rng.normal(size=(len(qid), 5)).astype(np.float32)
    y = rng.integers(0, 3, len(qid)).astype(np.float64)
    save(tmp_path / "day.npz", X=X, y=y, qid=qid)
    out = _run("ingest", tmp_path / "day.npz", "--store", tmp_path / "s.zarr", "--max-rows", 10)
    s = sr.GroupStore.open(tmp_path / "s.zarr")
    assert len(s.batches) > 5 and f"{len(qid):,} rows ({len(s.batches)} batch(es)" in out
    assert all(e["rows"][1] - e["rows"][0] <= 10 + 8 for e in s.batches)   # a chunk + the rest of one query
    b = next(s.blocks(max_rows=10**6))
    np.testing.assert_array_equal(b.X, X)
    np.testing.assert_array_equal(b.y, y)
    np.testing.assert_array_equal(b.row_qid(), qid)
    again = _run("ingest", tmp_path / "day.npz", "--store", tmp_path / "s.zarr", "--max-rows", 10)
    assert f"0 rows (0 batch(es), {len(s.batches)} already in the store)" in again
    # a small file is still one batch
    _run("ingest", tmp_path / "day.npz", "--store", tmp_path / "one.zarr", "-q")
    assert len(sr.GroupStore.open(tmp_path / "one.zarr").batches) == 1


def test_iter_npz_edge_cases(tmp_path):
    from streamrank.io.npz import iter_npz

    qid = np.repeat([5, 6, 7], [3, 1, 4])
    X = np.arange(16, dtype=np.float64).reshape(8, 2)
    y = np.arange(8.0)
    np.savez(tmp_path / "f.npz", X=np.asfortranarray(X), y=y, qid=qid)       # column-major X: read whole
    parts = list(iter_npz(tmp_path / "f.npz", chunk_rows=2))
    assert [len(p[2]) for p in parts] == [3, 1, 4]
    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), X)
    one = list(iter_npz(tmp_path / "f.npz", chunk_rows=1, chunk_bytes=10**9))     # bytes win: one chunk
    assert len(one) == 1
    np.savez(tmp_path / "o.npz", X=X.astype(object), y=y, qid=qid)
    with pytest.raises(ValueError, match="objects"):
        list(iter_npz(tmp_path / "o.npz"))
    np.savez(tmp_path / "s.npz", X=X, y=y[:-1], qid=qid)
    with pytest.raises(ValueError, match="y has 7 rows but X has 8"):
        list(iter_npz(tmp_path / "s.npz"))
    np.savez(tmp_path / "m.npz", X=X, y=y)
    with pytest.raises(ValueError, match="missing.*qid"):
        list(iter_npz(tmp_path / "m.npz"))
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(ValueError, match="bad.npz"):
        list(iter_npz(tmp_path / "bad.npz"))
    assert list(iter_npz(_empty(tmp_path))) == []


def _empty(tmp):
    np.savez(tmp / "e.npz", X=np.zeros((0, 3), np.float32), y=np.zeros(0), qid=np.zeros(0, np.int64))
    return tmp / "e.npz"

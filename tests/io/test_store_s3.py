"""Stores on object storage, against a real S3 server on loopback (moto's, tests/_s3_server.py).

Create/append/open/stream/verify on s3://, the same store written locally and
remotely equal chunk for chunk, two writers racing in one process (the
second commit refused, naming the first), readers' snapshots, damaged chunks —
see streamrank/io/_icechunk_repo.py.  The races between real writer processes
are in test_store_s3_races.py.
"""
from __future__ import annotations

import os
import pickle
import threading

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from streamrank.io._icechunk_repo import CommitConflict, RepoLocation, transaction
from streamrank.io._remote import Remote
from streamrank.io.schema import StoreFormatError


def _data(n_groups=60, per=7, n_features=4, seed=0):
    rng = np.random.default_rng(seed)
    n = n_groups * per
    X = rng.normal(size=(n, n_features)).astype(np.float32)
    y = rng.integers(0, 4, size=n).astype(np.float64)
    q = np.repeat(np.arange(n_groups) * 3 + 11, per)
    return X, y, q


def _fill(store, X, y, q, cuts=(0, 140, None)):
    cuts = [c if c is not None else len(y) for c in cuts]
    for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
        assert store.append(X[a:b], y[a:b], q[a:b], batch_id=f"day-{i}")


def _objects(url, so) -> dict:
    """Every chunk of the store at ``url`` as its repository's session reads it (zarr keys -> bytes)."""
    loc = RepoLocation(url, so)
    return {k: loc.read(k) for k in loc.list() if not k.endswith("zarr.json")}


def _rogue_commit(url, so, change):
    """``change(loc)`` committed behind streamrank's back (damage, a hand edit), through the same transaction."""
    loc = RepoLocation(url, so)
    with transaction(loc):
        change(loc)
        loc.commit("rogue edit")


def _files(path) -> dict:
    out = {}
    for root, _d, files in os.walk(path):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), path)
            if not rel.endswith("zarr.json") and not rel.startswith(".streamrank"):
                out[rel.replace(os.sep, "/")] = open(os.path.join(root, f), "rb").read()
    return out


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_group_store_on_s3_equals_the_local_store_chunk_for_chunk(s3_server, s3_url, tmp_path, sparse):
    X, y, q = _data()
    Xs = sp.csr_matrix(np.where(np.abs(X) > 0.8, X, 0)) if sparse else X
    so = s3_server.storage_options
    url = s3_url + "/train.zarr"
    remote = sr.GroupStore.create(url, X.shape[1], sparse=sparse, storage_options=so, chunk_rows=128)
    local = sr.GroupStore.create(tmp_path / "train.zarr", X.shape[1], sparse=sparse, chunk_rows=128)
    for s in (remote, local):
        _fill(s, Xs, y, q)
    assert not remote.append(Xs[:7], y[:7], q[:7], batch_id="day-0")     # idempotent
    r = sr.GroupStore.open(url, storage_options=so)
    assert (r.n_rows, r.n_groups, r.verify()) == (len(y), 60, 2)
    # every chunk object holds exactly the bytes of the local chunk file (same codecs, same rows)
    objs, files = _objects(url, so), _files(tmp_path / "train.zarr")
    assert sorted(objs) == sorted(files) and len(files) > 6
    assert all(objs[k] == files[k] for k in files)
    # streaming: the blocks are those of the local store, bit for bit
    lb = list(sr.GroupStore.open(tmp_path / "train.zarr").blocks(max_rows=100, shuffle=False))
    rb = list(r.blocks(max_rows=100, shuffle=False))
    assert len(rb) == len(lb) > 3
    for a, b in zip(rb, lb):
        Xa, Xb = (a.X.toarray(), b.X.toarray()) if sparse else (a.X, b.X)
        assert np.array_equal(Xa, Xb) and np.array_equal(a.y, b.y) and np.array_equal(a.qid, b.qid)
    assert np.array_equal(r.qid, q[::7])
    # a store pickles (to dask workers) as URL + options + committed counts + its snapshot, never as data
    w = pickle.loads(pickle.dumps(r))
    assert w.path == url and w.n_rows == r.n_rows and len(pickle.dumps(r)) < 2000
    assert w._loc.snapshot_id == r._loc.snapshot_id


def test_a_fit_from_s3_equals_the_fit_from_the_local_store(s3_server, s3_url, tmp_path):
    X, y, q = _data(seed=3)
    so = s3_server.storage_options
    remote = sr.GroupStore.create(s3_url + "/t.zarr", X.shape[1], storage_options=so, chunk_rows=128)
    local = sr.GroupStore.create(tmp_path / "t.zarr", X.shape[1], chunk_rows=128)
    for s in (remote, local):
        _fill(s, X, y, q)
    a = sr.RankRLS(alpha=1.0).fit(sr.GroupStore.open(s3_url + "/t.zarr", storage_options=so))
    b = sr.RankRLS(alpha=1.0).fit(sr.GroupStore.open(tmp_path / "t.zarr"))
    assert np.array_equal(a.coef_, b.coef_)


def test_tuple_store_on_s3(s3_server, s3_url, tmp_path):
    rng = np.random.default_rng(1)
    Q = sp.random(20, 6, density=0.4, format="csr", random_state=rng, dtype=np.float32)
    D = sp.random(30, 8, density=0.3, format="csr", random_state=rng, dtype=np.float32)
    t = np.c_[rng.integers(0, 20, 50), rng.integers(0, 30, 50), rng.integers(0, 30, 50)]
    so = s3_server.storage_options
    url = s3_url + "/tuples.zarr"
    stores = [sr.TupleStore.create(url, 6, 8, storage_options=so), sr.TupleStore.create(tmp_path / "t.zarr", 6, 8)]
    for s in stores:
        assert s.append(Q, D, t, batch_id="a")
        assert not s.append(Q, D, t, batch_id="a")
    r = sr.TupleStore.open(url, storage_options=so)
    assert r.verify() == 1 and r.n_tuples == 50
    assert (r.Q != Q).nnz == 0 and (r.D != D).nnz == 0
    assert _objects(url, so) == _files(tmp_path / "t.zarr")
    got = [b.D_pos.toarray() for b in r.batches(batch_size=16, shuffle_buffer=0)]
    want = [b.D_pos.toarray() for b in sr.TupleStore.open(tmp_path / "t.zarr").batches(batch_size=16, shuffle_buffer=0)]
    assert all(np.array_equal(a, b) for a, b in zip(got, want)) and len(got) == 4
    assert pickle.loads(pickle.dumps(r)).n_tuples == 50
    # a second batch is a second commit; the first is still readable as of its snapshot
    first = r._loc.snapshot_id
    assert stores[0].append(Q, D, t[:10], batch_id="b")
    assert sr.TupleStore.open(url, storage_options=so).n_tuples == 60
    then = sr.TupleStore.open(url, storage_options=so, as_of=first)
    assert then.n_tuples == 50 and then.verify() == 1


def test_damaged_or_missing_chunks_on_s3_are_errors_not_rows(s3_server, s3_url):
    X, y, q = _data()
    so = s3_server.storage_options
    url = s3_url + "/d.zarr"
    _fill(sr.GroupStore.create(url, X.shape[1], storage_options=so, chunk_rows=128), X, y, q)
    good = RepoLocation(url, so).read("X/c/1/0")
    first = RepoLocation(url, so).read("X/c/0/0")
    _rogue_commit(url, so, lambda loc: loc.write("X/c/1/0", first))    # a chunk swapped in: CRC valid, wrong place
    with pytest.raises(StoreFormatError, match="not the chunk committed there"):
        list(sr.GroupStore.open(url, storage_options=so).blocks(shuffle=False))
    with pytest.raises(StoreFormatError, match="day-0"):
        sr.GroupStore.open(url, storage_options=so).verify()
    _rogue_commit(url, so, lambda loc: loc.write("X/c/1/0", good[:-1] + bytes([good[-1] ^ 1])))   # damaged bytes
    with pytest.raises(StoreFormatError, match="CRC-32C"):
        list(sr.GroupStore.open(url, storage_options=so).blocks(shuffle=False))
    _rogue_commit(url, so, lambda loc: (loc.write("X/c/1/0", good), loc.delete("qid/c/0")))   # a chunk missing
    with pytest.raises(StoreFormatError, match="missing"):
        sr.GroupStore.open(url, storage_options=so).qid
    # the chunk objects themselves damaged on the server (bit rot, an operator): a CRC-32C error, not rows
    fs = Remote(url, so).fs
    objs = [k for k in fs.find(url) if "/chunks/" in k]
    for k in objs:
        data = fs.cat_file(k)
        fs.pipe_file(k, data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(StoreFormatError, match="CRC-32C|checksum"):
        sr.GroupStore.open(url, storage_options=so).verify()


def test_two_writers_racing_the_second_commit_is_refused_naming_the_first_nothing_lost(s3_server, s3_url):
    X, y, q = _data()
    so = s3_server.storage_options
    url = s3_url + "/race.zarr"
    sr.GroupStore.create(url, X.shape[1], storage_options=so, chunk_rows=128)
    a = sr.GroupStore.open(url, "a", storage_options=so)
    b = sr.GroupStore.open(url, "a", storage_options=so)
    inside, go = threading.Event(), threading.Event()
    real = a._write

    def slow_write(*args, **kw):       # writer a: its transaction began, nothing written yet
        inside.set()
        go.wait(30)
        return real(*args, **kw)

    a._write = slow_write
    errs = []

    def run_a():
        try:
            errs.append(a.append(X[:140], y[:140], q[:140], batch_id="a"))
        except CommitConflict as exc:
            errs.append(exc)

    t = threading.Thread(target=run_a)
    t.start()
    assert inside.wait(30)
    assert b.append(X[140:280], y[140:280], q[140:280], batch_id="b")     # no lock: b commits at once
    winner = b._loc.snapshot_id
    go.set()
    t.join(30)
    assert len(errs) == 1 and isinstance(errs[0], CommitConflict), errs
    assert winner in str(errs[0]) and "append batch 'b'" in str(errs[0]) and "nothing of this" in str(errs[0])
    a._write = real
    assert a.append(X[:140], y[:140], q[:140], batch_id="a")          # a re-runs: on top of b's commit
    assert not a.append(X[:140], y[:140], q[:140], batch_id="a")
    r = sr.GroupStore.open(url, storage_options=so)
    assert [e["batch_id"] for e in r.batches] == ["b", "a"] and r.verify() == 2 and r.n_rows == 280
    assert np.array_equal(np.vstack([blk.X for blk in r.blocks(shuffle=False)]), np.vstack([X[140:280], X[:140]]))


def test_each_commit_is_a_snapshot_readers_keep_theirs(s3_server, s3_url):
    X, y, q = _data()
    so = s3_server.storage_options
    url = s3_url + "/snap.zarr"
    w = sr.GroupStore.create(url, X.shape[1], storage_options=so, chunk_rows=128)
    assert w.append(X[:140], y[:140], q[:140], batch_id="d0")
    r = sr.GroupStore.open(url, storage_options=so)
    assert w.append(X[140:], y[140:], q[140:], batch_id="d1")
    assert r.n_rows == 140 and r.verify() == 1                    # the reader's snapshot: one commit, whole
    shipped = pickle.loads(pickle.dumps(r))                        # (a dask worker reads that snapshot too)
    assert shipped._loc.snapshot_id == r._loc.snapshot_id and shipped.verify() == 1
    assert np.array_equal(np.vstack([blk.X for blk in r.blocks(shuffle=False)]), X[:140])
    assert sr.GroupStore.open(url, storage_options=so).n_rows == len(y)
    repo = RepoLocation(url, so).repo
    assert [s.message for s in repo.ancestry(branch="main")][:3] == [
        f"append batch 'd1' (140:{len(y)})", "append batch 'd0' (0:140)", "create streamrank.group_store"]


def test_create_refuses_an_existing_store_or_foreign_objects(s3_server, s3_url):
    so = s3_server.storage_options
    url = s3_url + "/c.zarr"
    sr.GroupStore.create(url, 3, storage_options=so)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        sr.GroupStore.create(url, 3, storage_options=so)
    s = sr.GroupStore.create(url, 5, storage_options=so, overwrite=True)
    assert s.n_features == 5 and s.n_rows == 0
    Remote(s3_url + "/other", so).write("notes.txt", b"hello")
    with pytest.raises(FileExistsError, match="not a store"):
        sr.GroupStore.create(s3_url + "/other", 3, storage_options=so, overwrite=True)
    with pytest.raises(FileNotFoundError, match="no store at"):
        sr.GroupStore.open(s3_url + "/nothing.zarr", storage_options=so)
    with pytest.raises(ValueError, match="storage_options apply to stores at URLs"):
        sr.GroupStore.open("/tmp/x.zarr", storage_options=so)


def test_parquet_ingest_into_an_s3_store(s3_server, s3_url, tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from streamrank.io.parquet import ingest_parquet

    X, y, q = _data(n_groups=20, seed=5)
    cols = {"qid": q.astype(str), "label": y, **{f"f_{j}": X[:, j] for j in range(X.shape[1])}}
    pq.write_table(pa.table(cols), tmp_path / "day.parquet", row_group_size=50)
    so = s3_server.storage_options
    url = s3_url + "/pq.zarr"
    kw = dict(label="label", qid="qid", feature_prefix="f_", chunk_rows=64)
    assert ingest_parquet(url, tmp_path / "day.parquet", storage_options=so, **kw)["rows"] == len(y)
    assert ingest_parquet(url, tmp_path / "day.parquet", storage_options=so, **kw)["rows"] == 0   # idempotent
    ingest_parquet(tmp_path / "pq.zarr", tmp_path / "day.parquet", **kw)
    r, loc = sr.GroupStore.open(url, storage_options=so), sr.GroupStore.open(tmp_path / "pq.zarr")
    assert r.feature_names == loc.feature_names and r.verify() == loc.verify() > 1
    assert _objects(url, so) == _files(tmp_path / "pq.zarr")

"""Stores on object storage, against a real S3 server on loopback (moto's, tests/_s3_server.py).

Create/append/open/stream/verify on s3://, the same store written locally and
remotely equal chunk for chunk, the commit protocol's failure cases (two
writers racing, a writer SIGKILLed mid-append, an expired lease taken over, a
stalled writer fenced) — see streamrank/io/_remote_commit.py.
"""
from __future__ import annotations

import json
import os
import pickle
import signal
import textwrap
import threading
import time

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from streamrank.io._lease import LOCK_KEY, LeaseLost, WriterLockHeld
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


def _objects(remote: Remote) -> dict:
    return {k: remote.read(k) for k in remote.list() if not k.endswith("zarr.json") and k != LOCK_KEY}


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
    objs, files = _objects(Remote(url, so)), _files(tmp_path / "train.zarr")
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
    # a store pickles (to dask workers) as URL + options + committed counts, never as data
    w = pickle.loads(pickle.dumps(r))
    assert w.path == url and w.n_rows == r.n_rows and len(pickle.dumps(r)) < 2000


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
    assert _objects(Remote(url, so)) == _files(tmp_path / "t.zarr")
    got = [b.D_pos.toarray() for b in r.batches(batch_size=16, shuffle_buffer=0)]
    want = [b.D_pos.toarray() for b in sr.TupleStore.open(tmp_path / "t.zarr").batches(batch_size=16, shuffle_buffer=0)]
    assert all(np.array_equal(a, b) for a, b in zip(got, want)) and len(got) == 4
    assert pickle.loads(pickle.dumps(r)).n_tuples == 50


def test_damaged_or_missing_chunks_on_s3_are_errors_not_rows(s3_server, s3_url):
    X, y, q = _data()
    so = s3_server.storage_options
    url = s3_url + "/d.zarr"
    _fill(sr.GroupStore.create(url, X.shape[1], storage_options=so, chunk_rows=128), X, y, q)
    rem = Remote(url, so)
    good = rem.read("X/c/1/0")
    rem.write("X/c/1/0", rem.read("X/c/0/0"))                 # a chunk swapped in: CRC valid, wrong place
    with pytest.raises(StoreFormatError, match="not the chunk committed there"):
        list(sr.GroupStore.open(url, storage_options=so).blocks(shuffle=False))
    with pytest.raises(StoreFormatError, match="day-0"):
        sr.GroupStore.open(url, storage_options=so).verify()
    rem.write("X/c/1/0", good[:-1] + bytes([good[-1] ^ 1]))   # damaged bytes
    with pytest.raises(StoreFormatError, match="CRC-32C"):
        list(sr.GroupStore.open(url, storage_options=so).blocks(shuffle=False))
    rem.write("X/c/1/0", good)
    rem.delete("qid/c/0")                                     # missing (read through zarr, not the decoder)
    with pytest.raises(StoreFormatError, match="missing"):
        sr.GroupStore.open(url, storage_options=so).qid


def test_two_writers_racing_one_wins_one_is_refused_nothing_lost(s3_server, s3_url):
    X, y, q = _data()
    so = s3_server.storage_options
    url = s3_url + "/race.zarr"
    sr.GroupStore.create(url, X.shape[1], storage_options=so, chunk_rows=128)
    a = sr.GroupStore.open(url, "a", storage_options=so)
    b = sr.GroupStore.open(url, "a", storage_options=so)
    inside, go = threading.Event(), threading.Event()
    real = a._write

    def slow_write(*args, **kw):       # writer a: stopped after taking the lease, before writing
        inside.set()
        go.wait(30)
        return real(*args, **kw)

    a._write = slow_write
    errs = []
    t = threading.Thread(target=lambda: errs.append(a.append(X[:140], y[:140], q[:140], batch_id="a")))
    t.start()
    assert inside.wait(30)
    with pytest.raises(WriterLockHeld, match="being appended to by another writer .*one writer at a time"):
        b.append(X[140:280], y[140:280], q[140:280], batch_id="b")
    go.set()
    t.join(30)
    assert errs == [True]
    assert b.append(X[140:280], y[140:280], q[140:280], batch_id="b")   # b retries: both batches kept
    r = sr.GroupStore.open(url, storage_options=so)
    assert [e["batch_id"] for e in r.batches] == ["a", "b"] and r.verify() == 2 and r.n_rows == 280
    assert not Remote(url, so).exists(LOCK_KEY)                       # released


_KILLED_WRITER = textwrap.dedent('''
    import sys, time, numpy as np
    import streamrank as sr
    import streamrank.io._group_append as append   # its write_attrs: the commit point of an append
    url, flag = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(0)
    store = sr.GroupStore.open(url, "a")
    def stop_before_commit(loc, attrs):     # every data chunk is written; the commit record is not
        open(flag, "w").close()
        time.sleep(600)
    append.write_attrs = stop_before_commit
    X = np.arange(300 * 4, dtype=np.float32).reshape(300, 4)
    store.append(X, np.ones(300), np.repeat(np.arange(30), 10) + 1000, batch_id="day-1")
''')


@pytest.mark.slow      # a real writer process, killed
def test_a_writer_killed_mid_append_then_a_new_writer_resumes_exactly_once(s3_server, s3_url, tmp_path, fork_server):
    X, y, q = _data()
    so = s3_server.storage_options
    url = s3_url + "/kill.zarr"
    s = sr.GroupStore.create(url, 4, storage_options=so, chunk_rows=128)
    assert s.append(X[:140], y[:140], q[:140], batch_id="day-0")
    flag = tmp_path / "in-append"
    proc = fork_server.popen(["-c", _KILLED_WRITER, url, str(flag)],      # a real process, forked from the
                             env={**os.environ, **s3_server.env})          # fork server (tests/_forked.py)
    try:
        t0 = time.monotonic()
        while not flag.exists():
            assert proc.poll() is None, "the writer died before its append"
            assert time.monotonic() - t0 < 120
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
    rem = Remote(url, so)
    assert rem.exists(LOCK_KEY)                                   # its lease is left behind
    assert json.loads(rem.read("X/zarr.json"))["shape"][0] == 440  # and its rows past the commit
    r = sr.GroupStore.open(url, storage_options=so)
    assert (r.n_rows, r.verify()) == (140, 1)                     # readers: the last commit
    # a new writer takes over the dead writer's lease (its pid is gone on this machine), repairs, appends once
    w = sr.GroupStore.open(url, "a", storage_options=so)
    Xk = np.arange(300 * 4, dtype=np.float32).reshape(300, 4)
    assert w.append(Xk, np.ones(300), np.repeat(np.arange(30), 10) + 1000, batch_id="day-1")
    assert not w.append(Xk, np.ones(300), np.repeat(np.arange(30), 10) + 1000, batch_id="day-1")
    r = sr.GroupStore.open(url, storage_options=so)
    assert [e["batch_id"] for e in r.batches] == ["day-0", "day-1"] and r.verify() == 2
    assert np.array_equal(np.vstack([b.X for b in r.blocks(shuffle=False)]), np.vstack([X[:140], Xk]))
    assert r._attrs.get("writer_epoch") == 1                      # the old writer was fenced


def _lock_doc(host, pid, expires):
    return json.dumps({"owner": "x", "host": host, "pid": pid, "expires": expires,
                       "expires_utc": "then"}).encode()


def test_a_live_lease_of_another_machine_is_refused_an_expired_one_taken_over(s3_server, s3_url):
    X, y, q = _data()
    so = s3_server.storage_options
    url = s3_url + "/lease.zarr"
    s = sr.GroupStore.create(url, 4, storage_options=so, chunk_rows=128)
    rem = Remote(url, so)
    rem.write(LOCK_KEY, _lock_doc("worker-7.elsewhere", 1234, time.time() + 300))
    with pytest.raises(WriterLockHeld, match="worker-7.elsewhere"):
        s.append(X[:7], y[:7], q[:7], batch_id="a")
    with pytest.raises(WriterLockHeld):            # re-creating needs the lock too
        sr.GroupStore.create(url, 4, storage_options=so, overwrite=True)
    rem.write(LOCK_KEY, _lock_doc("worker-7.elsewhere", 1234, time.time() - 1))
    assert s.append(X[:7], y[:7], q[:7], batch_id="a")
    assert sr.GroupStore.open(url, storage_options=so).verify() == 1


def test_a_stalled_writer_whose_lease_was_taken_over_cannot_commit(s3_server, s3_url):
    from streamrank.io._remote_commit import commit_remote, remote_writer

    X, y, q = _data()
    so = s3_server.storage_options
    url = s3_url + "/fence.zarr"
    s = sr.GroupStore.create(url, 4, storage_options=so, chunk_rows=128)
    stalled = Remote(url, so)
    with pytest.raises(LeaseLost, match="not committed"):
        with remote_writer(stalled) as lease:
            lease._stop.set()                       # stalled: it renews no more ...
            lease._thread.join()
            stalled.write(LOCK_KEY, _lock_doc("gone.elsewhere", 1, time.time() - 1))   # ... and its lease ran out
            assert s.append(X[:7], y[:7], q[:7], batch_id="new-writer")           # another writer took over
            attrs = dict(s._attrs, log=[])          # the stalled writer wakes up and commits what it had
            commit_remote(stalled, attrs)
    r = sr.GroupStore.open(url, storage_options=so)
    assert [e["batch_id"] for e in r.batches] == ["new-writer"] and r.verify() == 1


def test_create_refuses_an_existing_store_or_foreign_objects(s3_server, s3_url):
    so = s3_server.storage_options
    url = s3_url + "/c.zarr"
    sr.GroupStore.create(url, 3, storage_options=so)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        sr.GroupStore.create(url, 3, storage_options=so)
    s = sr.GroupStore.create(url, 5, storage_options=so, overwrite=True)
    assert s.n_features == 5 and s.n_rows == 0
    Remote(s3_url + "/other", so).write("notes.txt", b"hello")
    with pytest.raises(FileExistsError, match="not a zarr store"):
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
    assert _objects(Remote(url, so)) == _files(tmp_path / "pq.zarr")

"""Every chunk bound to its place (streamrank.io._chunk_binding): the last, partly filled chunk, the
``group_ptr`` / ``qid`` / document-id arrays and every TupleStore array.

Each test replaces a chunk file by a *valid* one (its own CRC-32C intact) that
does not belong there — the same chunk of a twin store with other values, or a
chunk of the same store from an earlier commit — and expects a
StoreFormatError on read, where the values alone (monotone offsets, indices in
range, finite numbers) would pass.  The twin stores have the same shapes, so
only the binding can tell.
"""
from __future__ import annotations

import json
import os
import subprocess
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from streamrank.io.schema import StoreFormatError

ROWS, CHUNK = 3000, 1024          # chunks 0, 1 full; chunk 2 holds 952 committed rows


def _twin(path, seed, docids=False, group_sizes=(10,)):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(ROWS, 4)).astype(np.float32)
    y = rng.normal(size=ROWS)
    sizes = np.resize(np.asarray(group_sizes), ROWS // int(np.mean(group_sizes)))
    qid = np.repeat(np.arange(len(sizes)) + 1000 * seed, sizes)
    s = sr.GroupStore.create(path, 4, chunk_rows=CHUNK, docids=docids)
    width = [5, 5 + seed % 2]         # odd seeds: ids of two lengths (other offsets), even: one length
    ids = [f"{'de'[seed % 2]}{i:0{width[i % 2]}d}" for i in range(ROWS)] if docids else None
    s.append(X, y, qid, batch_id="b", docid=ids)
    return X, y


def _copy_chunk(src, dst, chunk):
    (dst / chunk).write_bytes((src / chunk).read_bytes())


def _read_everything(path):
    s = sr.GroupStore.open(path)
    out = [(b.X, b.y, b.qid) for b in s.blocks(max_rows=500)]
    if s.has_docids:
        s.docids()
    return out


@pytest.mark.parametrize("chunk", ["X/c/2/0", "y/c/2"])
def test_the_last_partly_filled_chunk_from_a_twin_store_is_an_error(tmp_path, chunk):
    _twin(tmp_path / "a.zarr", 1)
    _twin(tmp_path / "b.zarr", 2)
    _copy_chunk(tmp_path / "b.zarr", tmp_path / "a.zarr", chunk)
    name = chunk.split("/c/")[0]
    with pytest.raises(StoreFormatError, match=rf"{chunk}: chunk 2 of array '{name}' does not hold the 952 "
                                                "entries committed there"):
        _read_everything(tmp_path / "a.zarr")
    _read_everything(tmp_path / "b.zarr")          # the twin itself is fine


def test_the_last_chunk_of_an_earlier_commit_is_an_error(tmp_path):
    """A rollback of one chunk file to what it held before the last append (rows past the old end = zeros)."""
    rng = np.random.default_rng(0)
    s = sr.GroupStore.create(tmp_path / "s.zarr", 4, chunk_rows=CHUNK)
    s.append(rng.normal(size=(500, 4)), rng.normal(size=500), np.repeat(np.arange(50), 10), batch_id="1")
    old = (tmp_path / "s.zarr" / "y" / "c" / "0").read_bytes()
    s.append(rng.normal(size=(300, 4)), rng.normal(size=300), np.repeat(np.arange(50, 80), 10), batch_id="2")
    (tmp_path / "s.zarr" / "y" / "c" / "0").write_bytes(old)
    with pytest.raises(StoreFormatError, match="y/c/0: chunk 0 of array 'y' does not hold the 800 entries"):
        _read_everything(tmp_path / "s.zarr")


@pytest.mark.parametrize("chunk, match", [
    ("qid/c/0", "qid/c/0: chunk 0 of array 'qid'"),
    ("group_ptr/c/0", "group_ptr/c/0: chunk 0 of array 'group_ptr'"),
])
def test_group_ptr_and_qid_chunks_from_a_twin_store_are_an_error(tmp_path, chunk, match):
    # the twin's group_ptr is monotone from 0 to the same row count: only the binding can tell
    _twin(tmp_path / "a.zarr", 1)
    _twin(tmp_path / "b.zarr", 2, group_sizes=(5, 15))
    _copy_chunk(tmp_path / "b.zarr", tmp_path / "a.zarr", chunk)
    with pytest.raises(StoreFormatError, match=match):
        _read_everything(tmp_path / "a.zarr")


# each cell writes two twin stores (~1-2 s wall under load 15): the quick loop keeps one array of each kind
@pytest.mark.parametrize("chunk", ["docid/bytes/c/0", pytest.param("docid/offsets/c/0", marks=pytest.mark.slow)])
def test_document_id_chunks_from_a_twin_store_are_an_error(tmp_path, chunk):
    _twin(tmp_path / "a.zarr", 1, docids=True)
    _twin(tmp_path / "b.zarr", 2, docids=True)
    assert sr.GroupStore.open(tmp_path / "a.zarr").docids(0, 2) == ["e00000", "e000001"]
    _copy_chunk(tmp_path / "b.zarr", tmp_path / "a.zarr", chunk)
    with pytest.raises(StoreFormatError, match=f"{chunk}: chunk 0 of array '{chunk.split('/c/')[0]}'"):
        sr.GroupStore.open(tmp_path / "a.zarr").docids(0, 2)


def _tuple_twin(path, seed):
    rng = np.random.default_rng(seed)
    Q = sp.random(40, 6, density=0.5, format="csr", random_state=rng, dtype=np.float32)
    D = sp.random(60, 7, density=0.5, format="csr", random_state=rng, dtype=np.float32)
    Q.data[:] = rng.normal(size=Q.nnz)
    D.data[:] = rng.normal(size=D.nnz)
    t = np.column_stack([rng.integers(0, 40, 90), rng.integers(0, 60, 90), rng.integers(0, 60, 90)])
    ts = sr.TupleStore.create(path, 6, 7)
    ts.append(Q, D, t, magnitudes=rng.uniform(0.5, 2, 90), batch_id="b")
    return ts


# twin stores (~1-2 s wall under load 15 each): the quick loop keeps the tuples and one CSR array
@pytest.mark.parametrize("chunk", [c if c in ("tuples/c/0/0", "Q/indices/c/0") else pytest.param(c, marks=pytest.mark.slow)
                                   for c in ["tuples/c/0/0", "magnitude/c/0", "Q/indices/c/0", "D/data/c/0",
                                             "D/indptr/c/0"]])
def test_tuple_store_chunks_from_a_twin_store_are_an_error(tmp_path, chunk):
    a = _tuple_twin(tmp_path / "a.zarr", 1)
    b = _tuple_twin(tmp_path / "b.zarr", 2)
    name = chunk.split("/c/")[0]
    assert a._c == b._c                 # sp.random draws an exact nonzero count: same-size chunks
    _copy_chunk(tmp_path / "b.zarr", tmp_path / "a.zarr", chunk)
    with pytest.raises(StoreFormatError, match=f"{chunk}: chunk 0 of array '{name}' does not hold"):
        list(sr.TupleStore.open(tmp_path / "a.zarr").batches(batch_size=16))
    assert sum(len(bt.tuples) for bt in sr.TupleStore.open(tmp_path / "b.zarr").batches(batch_size=16)) == 90


def _as_previous_version(path):
    """The previous write path: no binding attributes, no store_id, no every_chunk_written."""
    meta = path / "zarr.json"
    doc = json.loads(meta.read_text())
    for key in ("store_id", "every_chunk_written", "chunk_crc32c", "tail_crc32c"):
        doc["attributes"].pop(key, None)
    meta.write_text(json.dumps(doc))


def test_stores_of_the_previous_version_read_as_before_and_the_first_append_binds_every_array(tmp_path):
    X, y = _twin(tmp_path / "a.zarr", 1)
    _twin(tmp_path / "b.zarr", 2)
    _as_previous_version(tmp_path / "a.zarr")
    _copy_chunk(tmp_path / "b.zarr", tmp_path / "a.zarr", "y/c/2")   # nothing to compare with yet
    got = _read_everything(tmp_path / "a.zarr")
    assert sum(len(b[1]) for b in got) == ROWS
    _twin(tmp_path / "c.zarr", 1)                                    # undo the copy: the real chunk
    _copy_chunk(tmp_path / "c.zarr", tmp_path / "a.zarr", "y/c/2")
    app = sr.GroupStore.open(tmp_path / "a.zarr", mode="a")
    assert app.append(X[:20], y[:20], np.repeat([10**6, 10**6 + 1], 10), batch_id="c")
    attrs = json.loads((tmp_path / "a.zarr" / "zarr.json").read_text())["attributes"]
    assert set(attrs["tail_crc32c"]) == {"X", "y", "group_ptr", "qid"}
    assert attrs["tail_crc32c"]["y"][:2] == [2, ROWS + 20 - 2 * CHUNK]
    assert {"X", "y"} <= set(attrs["chunk_crc32c"]) and len(attrs["chunk_crc32c"]["y"]) == 2
    _copy_chunk(tmp_path / "b.zarr", tmp_path / "a.zarr", "y/c/1")   # now a full chunk is bound
    with pytest.raises(StoreFormatError, match="y/c/1: chunk 1 of array 'y' is not the chunk committed there"):
        _read_everything(tmp_path / "a.zarr")


def test_verify_still_names_the_batch_whose_rows_changed(tmp_path):
    """Batches a and b share the last chunk: its binding fails for both, verify's checksums name b."""
    import zarr

    p = tmp_path / "s.zarr"
    s = sr.GroupStore.create(p, 2)
    s.append(np.ones((3, 2)), [1.0, 0, 1], [5, 5, 6], batch_id="a")
    s.append(np.ones((3, 2)), [1.0, 0, 1], [7, 7, 8], batch_id="b")
    zarr.open_array(str(p / "y"), mode="r+")[4] = 42.0
    with pytest.raises(StoreFormatError, match="y/c/0: chunk 0 of array 'y' does not hold the 6 entries"):
        _read_everything(p)
    with pytest.raises(StoreFormatError, match="batch 'b'"):
        sr.GroupStore.open(p).verify()


_APPENDER = """
import sys, numpy as np, streamrank as sr
s = sr.GroupStore.open(sys.argv[1], mode="a")
rng = np.random.default_rng(0)
for i in range(int(sys.argv[2])):
    n = int(rng.integers(1, 40)) * 10                       # appends that end inside chunks
    s.append(rng.normal(size=(n, 4)), rng.normal(size=n), np.repeat(np.arange(n // 10) + 10**6 * (i + 1), 10),
             batch_id=str(i))
print("done", flush=True)
"""


@pytest.mark.slow   # a second process appends
def test_readers_of_an_older_commit_never_trip_over_a_live_appender(tmp_path, fork_server):
    """Real processes: the appender rewrites the last chunk of every array again and again; readers opened at
    any earlier commit read their rows without a binding error (the tail binding covers committed rows only)."""
    path = tmp_path / "s.zarr"
    rng = np.random.default_rng(0)
    s = sr.GroupStore.create(path, 4, chunk_rows=CHUNK)
    s.append(rng.normal(size=(700, 4)), rng.normal(size=700), np.repeat(np.arange(70), 10), batch_id="start")
    proc = fork_server.popen(["-c", textwrap.dedent(_APPENDER), str(path), "60"],   # a real process, forked
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)        # (tests/_forked.py)
    reads = 0
    try:
        while proc.poll() is None or reads < 3:
            r = sr.GroupStore.open(path)
            first = sum(len(b.y) for b in r.blocks(max_rows=300))
            again = sum(len(b.y) for b in r.blocks(max_rows=300))     # later: more appends happened meanwhile
            assert first == again == r.n_rows
            reads += 1
    finally:
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "done" in out, err[-2000:]
    final = sr.GroupStore.open(path)
    assert final.verify() == 61 and sum(len(b.y) for b in final.blocks()) == final.n_rows
    assert reads >= 3
    assert os.path.exists(path / "y" / "c" / "0")


# twin stores (~1-2 s wall under load 15): the quick loop keeps the utf8 bytes
@pytest.mark.parametrize("chunk", ["qid_text/utf8/c/0", pytest.param("qid_text/offsets/c/0", marks=pytest.mark.slow)])
def test_string_query_id_chunks_from_a_twin_store_are_an_error(tmp_path, chunk):
    for seed, name in ((1, "a.zarr"), (2, "b.zarr")):
        rng = np.random.default_rng(seed)
        width = [4, 4 + seed % 2]            # seed 1: ids of two lengths (other offsets)
        qid = np.repeat([f"{'qr'[seed % 2]}{g:0{width[g % 2]}d}" for g in range(30)], 10)
        s = sr.GroupStore.create(tmp_path / name, 4)
        s.append(rng.normal(size=(300, 4)), rng.normal(size=300), qid, batch_id="b")
    assert sr.GroupStore.open(tmp_path / "a.zarr").qid_kind == "str"
    assert list(next(iter(sr.GroupStore.open(tmp_path / "a.zarr").blocks())).qid[:2]) == ["r0000", "r00001"]
    _copy_chunk(tmp_path / "b.zarr", tmp_path / "a.zarr", chunk)
    with pytest.raises(StoreFormatError, match=f"{chunk}: chunk 0 of array '{chunk.split('/c/')[0]}'"):
        [b.qid for b in sr.GroupStore.open(tmp_path / "a.zarr").blocks()]

"""Damage a per-chunk CRC cannot see: metadata edits, deleted chunks — refused on read, not only by verify().

* Array metadata edited so that zarr reads the same bytes differently
  (``endian`` "big", another chunk-key separator, other codecs, another fill
  value) is refused when the store is opened.
* A store created by this streamrank writes every chunk (zeros too), so a
  chunk file that is missing was deleted: reading it is a StoreFormatError
  instead of rows of zeros.
* Stores written before (no ``every_chunk_written``, zero chunks absent, no
  ``store_id``) keep opening, reading and appending as they did.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from streamrank.io.schema import StoreFormatError


def _dense(path, rows=3000, chunk_rows=1024, zero_y=False):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, 4)).astype(np.float32)
    y = np.zeros(rows) if zero_y else rng.normal(size=rows)
    s = sr.GroupStore.create(path, 4, chunk_rows=chunk_rows)
    s.append(X, y, np.repeat(np.arange(rows // 10), 10), batch_id="b")
    return X, y


def _edit_array_meta(path, fn):
    meta = path / "zarr.json"
    doc = json.loads(meta.read_text())
    fn(doc)
    meta.write_text(json.dumps(doc))


_METADATA_EDITS = [
    (lambda d: d["codecs"][0].setdefault("configuration", {}).update(endian="big"), "the bytes codec.s endian"),
    (lambda d: d["chunk_key_encoding"].update(configuration={"separator": "."}), "chunk_key_encoding"),
    (lambda d: d.update(codecs=d["codecs"][:1] + [{"name": "zstd", "configuration": {"level": 0}}]), "codecs"),
    (lambda d: d.update(fill_value=1), "fill_value"),
    (lambda d: d.update(storage_transformers=[{"name": "x"}]), "storage_transformers"),
]


@pytest.mark.parametrize("edit, field, array", [
    pytest.param(edit, field, array, id=f"<lambda>-{field}-{array}",
                 # the quick loop keeps every edit and every array once (5 of 15 cells); each cell writes a
                 # store: 0.3-3 s wall under load 13
                 marks=() if i % 3 == j else pytest.mark.slow)
    for j, array in enumerate(["X", "y", "group_ptr"]) for i, (edit, field) in enumerate(_METADATA_EDITS)])
def test_metadata_edits_that_change_how_bytes_are_read_are_refused(tmp_path, array, edit, field):
    _dense(tmp_path / "s.zarr")
    _edit_array_meta(tmp_path / "s.zarr" / array, edit)
    with pytest.raises(StoreFormatError, match=f"{array}/zarr.json: {field}"):
        list(sr.GroupStore.open(tmp_path / "s.zarr").blocks())


def test_sparse_indices_endian_edit_is_refused_at_open(tmp_path):
    s = sr.GroupStore.create(tmp_path / "s.zarr", 5, sparse=True)
    s.append(sp.random(20, 5, density=0.5, format="csr", random_state=0), np.arange(20.0), np.repeat(np.arange(4), 5))
    _edit_array_meta(tmp_path / "s.zarr" / "X" / "indices",
                     lambda d: d["codecs"][0].setdefault("configuration", {}).update(endian="big"))
    with pytest.raises(StoreFormatError, match="X/indices/zarr.json: the bytes codec's endian is 'big'"):
        sr.GroupStore.open(tmp_path / "s.zarr")


@pytest.mark.parametrize("chunk", ["X/c/1/0", "y/c/2", "group_ptr/c/0", "qid/c/0"])
def test_a_deleted_chunk_is_an_error_on_read_not_zeros(tmp_path, chunk):
    _dense(tmp_path / "s.zarr")
    os.unlink(tmp_path / "s.zarr" / chunk)
    with pytest.raises(StoreFormatError, match="is missing"):
        list(sr.GroupStore.open(tmp_path / "s.zarr").blocks(max_rows=500))


def test_tuple_store_deleted_chunk_is_an_error(tmp_path):
    ts = sr.TupleStore.create(tmp_path / "t.zarr", 3, 3)
    ts.append(sp.eye(3, format="csr"), sp.eye(3, format="csr"), [[0, 1, 2], [1, 2, 0]])
    os.unlink(tmp_path / "t.zarr" / "tuples" / "c" / "0" / "0")
    with pytest.raises(StoreFormatError, match="tuples/c/0/0: chunk 0 of array 'tuples' is missing"):
        list(sr.TupleStore.open(tmp_path / "t.zarr").batches())


def test_chunks_of_zeros_are_written_and_read_back(tmp_path):
    X, y = _dense(tmp_path / "s.zarr", zero_y=True)
    assert (tmp_path / "s.zarr" / "y" / "c" / "0").exists()
    blocks = list(sr.GroupStore.open(tmp_path / "s.zarr").blocks(max_rows=500))
    np.testing.assert_array_equal(np.concatenate([b.y for b in blocks]), y)
    np.testing.assert_array_equal(np.concatenate([b.X for b in blocks]), X)


def _as_previous_version(path):
    """What the previous write path left: no store_id / every_chunk_written / chunk_crc32c, zero chunks not written."""
    meta = path / "zarr.json"
    doc = json.loads(meta.read_text())
    for key in ("store_id", "every_chunk_written", "chunk_crc32c", "tail_crc32c"):
        doc["attributes"].pop(key)
    meta.write_text(json.dumps(doc))
    os.unlink(path / "y" / "c" / "0")          # y chunk 0 held only zeros: zarr's default skipped it


def test_a_store_written_by_the_previous_version_keeps_opening_reading_and_appending(tmp_path):
    rows = 3000
    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, 4)).astype(np.float32)
    y = rng.normal(size=rows)
    y[:1024] = 0.0
    s = sr.GroupStore.create(tmp_path / "old.zarr", 4, chunk_rows=1024)
    s.append(X, y, np.repeat(np.arange(rows // 10), 10), batch_id="b")
    _as_previous_version(tmp_path / "old.zarr")
    old = sr.GroupStore.open(tmp_path / "old.zarr")
    blocks = list(old.blocks(max_rows=700))
    np.testing.assert_array_equal(np.concatenate([b.y for b in blocks]), y)
    assert old.verify() == 1
    app = sr.GroupStore.open(tmp_path / "old.zarr", mode="a")
    assert app.append(X[:20], y[:20], np.repeat([10**6, 10**6 + 1], 10), batch_id="c")
    again = sr.GroupStore.open(tmp_path / "old.zarr")
    assert again.n_rows == rows + 20 and again.verify() == 2


@pytest.mark.parametrize("array, a, b", [("X", "c/0/0", "c/1/0"), ("y", "c/0", "c/1")])
def test_swapped_chunks_are_an_error_on_read(tmp_path, array, a, b):
    _dense(tmp_path / "s.zarr")
    d = tmp_path / "s.zarr" / array
    tmp = d / "swap"
    os.replace(d / a, tmp)
    os.replace(d / b, d / a)
    os.replace(tmp, d / b)
    with pytest.raises(StoreFormatError, match=r"chunk 0 of array .* is not the chunk committed there"):
        list(sr.GroupStore.open(tmp_path / "s.zarr").blocks(max_rows=500))


def test_a_chunk_copied_from_another_store_is_an_error_on_read(tmp_path):
    _dense(tmp_path / "a.zarr")
    rng = np.random.default_rng(1)
    other = sr.GroupStore.create(tmp_path / "b.zarr", 4, chunk_rows=1024)
    other.append(rng.normal(size=(3000, 4)), rng.normal(size=3000), np.repeat(np.arange(300), 10))
    (tmp_path / "a.zarr" / "X" / "c" / "1" / "0").write_bytes((tmp_path / "b.zarr" / "X" / "c" / "1" / "0").read_bytes())
    with pytest.raises(StoreFormatError, match=r"X/c/1/0: chunk 1 of array 'X' is not the chunk committed there"):
        list(sr.GroupStore.open(tmp_path / "a.zarr").blocks(max_rows=500))
    assert sum(b.n_rows for b in sr.GroupStore.open(tmp_path / "b.zarr").blocks()) == 3000


def test_appends_across_chunk_boundaries_keep_reading(tmp_path):
    """The last, partly filled chunk is rewritten by the next append: only full chunks are bound."""
    rng = np.random.default_rng(0)
    s = sr.GroupStore.create(tmp_path / "s.zarr", 4, chunk_rows=1024)
    X = rng.normal(size=(5000, 4)).astype(np.float32)
    for i, (r0, r1) in enumerate([(0, 700), (700, 1500), (1500, 1500), (1500, 4100), (4100, 5000)]):
        s.append(X[r0:r1], np.ones(r1 - r0), np.repeat(np.arange(r0, r1) // 10, 1) if r1 > r0 else [],
                 batch_id=str(i))
        got = np.concatenate([b.X for b in sr.GroupStore.open(tmp_path / "s.zarr").blocks(max_rows=600)] or
                             [np.zeros((0, 4), np.float32)])
        np.testing.assert_array_equal(got, X[:r1])
    assert len(json.loads((tmp_path / "s.zarr" / "zarr.json").read_text())["attributes"]["chunk_crc32c"]["X"]) == 4


@pytest.mark.parametrize("chunk_shape", [[0], [-4], [1.5], [], None, [True]])
def test_a_chunk_shape_that_is_not_positive_integers_is_refused_at_open(tmp_path, chunk_shape):
    """Found by the metadata fuzz: chunk_shape [0] in X/indptr/zarr.json made zarr divide by zero at open."""
    s = sr.GroupStore.create(tmp_path / "s.zarr", 5, sparse=True)
    s.append(sp.random(20, 5, density=0.5, format="csr", random_state=0), np.arange(20.0), np.repeat(np.arange(4), 5))
    _edit_array_meta(tmp_path / "s.zarr" / "X" / "indptr",
                     lambda d: d["chunk_grid"]["configuration"].update(chunk_shape=chunk_shape))
    with pytest.raises(StoreFormatError, match="X/indptr/zarr.json: chunk_grid's chunk_shape"):
        sr.GroupStore.open(tmp_path / "s.zarr")

"""Stores crafted through zarr (every CRC-32C valid) are refused on read, before native code sees them.

Issue 16: out-of-range CSR column indices made learners, ``block.X.toarray()``
and ``streamrank fit`` die with SIGSEGV; a crafted ``group_ptr`` failed deep
in numpy; a tuple row past ``D`` gave a bare IndexError; NaN/inf written
around ``append`` fitted NaN scores or a zero model.  Each case here must be a
:class:`StoreFormatError` naming the store, the array and the rows.  The cases
that crashed the interpreter run in a child process, so a regression is a
failed test, not a dead pytest.
"""
from __future__ import annotations

import json
import os
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from streamrank.io.schema import StoreFormatError

from .store_edits import poke


def _sparse_store(path, n_features=6, rows=24):
    rng = np.random.default_rng(0)
    X = sp.random(rows, n_features, density=0.5, format="csr", random_state=1, dtype=np.float64)
    store = sr.GroupStore.create(path, n_features, sparse=True)
    store.append(X, rng.normal(size=rows), np.repeat(np.arange(rows // 4), 4))
    return store


def _dense_store(path, rows=24):
    rng = np.random.default_rng(0)
    store = sr.GroupStore.create(path, 3)
    store.append(rng.normal(size=(rows, 3)), rng.normal(size=rows), np.repeat(np.arange(rows // 4), 4))
    return store


def _tuple_store(path):
    ts = sr.TupleStore.create(path, 4, 5)
    Q = sp.random(3, 4, density=0.6, format="csr", random_state=2)
    D = sp.random(6, 5, density=0.6, format="csr", random_state=3)
    ts.append(Q, D, [[0, 1, 2], [1, 3, 4], [2, 5, 0], [0, 2, 1]])
    return ts


def _poke(path, array, index, value):
    """Write ``array[index] = value`` through zarr: the chunk's CRC-32C is recomputed, so it is valid,
    and so are the commit record's chunk bindings (rewritten to match, see store_edits)."""
    poke(path, array, index, value)


def _read_all(store):
    return [b.X for b in store.blocks(max_rows=8)]


@pytest.mark.parametrize("value, what", [(6, "outside [0, n_features=6)"), (1000, "1000"), (-1, "-1"),
                                         (2**31 - 1, "2147483647")])
def test_sparse_column_index_out_of_range_is_a_store_format_error(tmp_path, value, what):
    store = _sparse_store(tmp_path / "s.zarr")
    _poke(store.path, "X/indices", 5, value)
    with pytest.raises(StoreFormatError, match=r"'X/indices'.*entry 5 \(row \d+\).*" + what.replace("[", r"\[")
                       .replace("(", r"\(").replace(")", r"\)")):
        _read_all(sr.GroupStore.open(store.path))


def test_a_bad_index_past_the_block_in_the_same_chunk_names_its_entry_and_no_wrong_row(tmp_path):
    """Chunks are checked whole when decoded: an entry of a later block fails the first block's read, and
    the message names the entry (not a row of the block being read)."""
    store = _sparse_store(tmp_path / "s.zarr")
    nnz = sr.GroupStore.open(store.path).nnz
    _poke(store.path, "X/indices", nnz - 1, 1000)
    with pytest.raises(StoreFormatError, match=rf"'X/indices' entry {nnz - 1} is 1000, outside") as info:
        next(iter(sr.GroupStore.open(store.path).blocks(max_rows=8)))
    assert "(row" not in str(info.value)


def test_big_endian_edit_of_the_indices_metadata_is_refused(tmp_path):
    store = _sparse_store(tmp_path / "s.zarr")
    meta = tmp_path / "s.zarr" / "X" / "indices" / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["codecs"][0]["configuration"]["endian"] = "big"
    meta.write_text(json.dumps(doc))
    with pytest.raises(StoreFormatError, match="X/indices"):
        _read_all(sr.GroupStore.open(store.path))


@pytest.mark.parametrize("index, value, match", [
    (1, 12, "'X/indptr' entries"),      # decreasing after 12 > next
    (3, -4, "'X/indptr' entries"),
    (2, 10**6, "'X/indptr' entries"),   # past the committed nonzeros
    (0, 1, "'X/indptr' runs from 1"),
])
def test_crafted_indptr_is_a_store_format_error(tmp_path, index, value, match):
    store = _sparse_store(tmp_path / "s.zarr")
    _poke(store.path, "X/indptr", index, value)
    with pytest.raises(StoreFormatError, match=match):
        _read_all(sr.GroupStore.open(store.path))


@pytest.mark.parametrize("values, match", [
    ({1: 8, 2: 4}, "'group_ptr' entries 0:7 must lie in 0..24 without decreasing, but entry 2 is 4, after 8"),
    ({3: -5}, "entry 3 is -5"),
    ({4: 99}, "entry 4 is 99"),
    ({6: 23}, r"'group_ptr' runs from 0 to 23 but 24 rows are committed"),
])
def test_crafted_group_ptr_is_refused_at_open(tmp_path, values, match):
    store = _dense_store(tmp_path / "d.zarr")
    for i, v in values.items():
        _poke(store.path, "group_ptr", i, v)
    with pytest.raises(StoreFormatError, match=match):
        sr.GroupStore.open(store.path)


@pytest.mark.parametrize("array, index, value", [("X", (9, 1), np.nan), ("X", (23, 2), np.inf),
                                                 ("y", 13, -np.inf), ("y", 0, np.nan)])
def test_nan_or_inf_written_around_append_is_refused_on_read(tmp_path, array, index, value):
    store = _dense_store(tmp_path / "d.zarr")
    _poke(store.path, array, index, value)
    row = index[0] if isinstance(index, tuple) else index
    with pytest.raises(StoreFormatError, match=rf"'{array}' holds .*row {row}\b"):
        _read_all(sr.GroupStore.open(store.path))
    with pytest.raises(StoreFormatError, match=rf"'{array}'"):
        sr.RankRLS(alpha=1.0).fit(sr.GroupStore.open(store.path))
    with pytest.raises(StoreFormatError, match=rf"'{array}'"):
        sr.RankRLS(alpha=1.0, solver="cg").fit(sr.GroupStore.open(store.path))


def test_nan_in_sparse_data_is_refused_on_read(tmp_path):
    store = _sparse_store(tmp_path / "s.zarr")
    _poke(store.path, "X/data", 7, np.nan)
    with pytest.raises(StoreFormatError, match=r"'X/data' entry 7 \(row \d+\) holds nan"):
        _read_all(sr.GroupStore.open(store.path))


_CRAFTED_TUPLE_CASES = [
    ("tuples", (2, 1), 6, r"'tuples' row 2 column 1 is 6, not a row of D \(expected 0 <= index < 6\)"),
    ("tuples", (3, 2), -1, r"'tuples' row 3 column 2 is -1"),
    ("tuples", (1, 0), 3, r"'tuples' row 1 column 0 is 3, not a row of Q"),
    ("magnitude", 2, np.nan, r"'magnitude' holds nan at row 2"),
    ("Q/indices", 1, 4, r"'Q/indices' entry 1 \(row \d\) is 4, outside \[0, n_query_features=4\)"),
    ("D/indices", 0, -3, r"'D/indices' entry 0 \(row 0\) is -3, outside \[0, n_item_features=5\)"),
    ("D/data", 2, np.inf, r"'D/data' holds inf"),
    ("D/indptr", 2, 1, r"'D/indptr' entries"),
]


@pytest.mark.parametrize("array, index, value, match, cache_bytes", [
    pytest.param(*case, cache_bytes,                           # whole matrices / the row cache
                 # the quick loop keeps every case once, the two read paths alternating; each other cell
                 # writes a store too: ~1-1.7 s wall under load 13
                 marks=() if i % 2 == j else pytest.mark.slow)
    for j, cache_bytes in enumerate([64 << 20, 1]) for i, case in enumerate(_CRAFTED_TUPLE_CASES)])
def test_crafted_tuple_store_is_a_store_format_error(tmp_path, array, index, value, match, cache_bytes):
    ts = _tuple_store(tmp_path / "t.zarr")
    _poke(ts.path, array, index, value)
    with pytest.raises(StoreFormatError, match=match):
        list(sr.TupleStore.open(ts.path).batches(batch_size=2, cache_bytes=cache_bytes))


_CHILD = """
import numpy as np, scipy.sparse as sp, zarr, streamrank as sr
from streamrank.io.schema import StoreFormatError
import sys
sys.path.insert(0, {here!r})
from store_edits import poke
def expect(fn, what):
    try:
        fn()
    except StoreFormatError as exc:
        assert what in str(exc), (what, str(exc))
    else:
        raise AssertionError("no StoreFormatError for " + what)
root = {root!r}
X = sp.random(40, 6, density=0.5, format="csr", random_state=1, dtype=np.float64)
y = np.random.default_rng(0).normal(size=40)
for value in (6, -1, 10**6):
    path = f"{{root}}/s{{value}}.zarr"
    sr.GroupStore.create(path, 6, sparse=True).append(X, y, np.repeat(np.arange(10), 4))
    poke(path, "X/indices", 17, value)
    for make in (lambda: sr.RankRLS(alpha=1.0), lambda: sr.RankRLS(alpha=1.0, solver="cg"),
                 lambda: sr.PairwiseSGDRanker(random_state=0)):
        expect(lambda: make().fit(sr.GroupStore.open(path)), "X/indices")
    expect(lambda: [b.X.toarray() for b in sr.GroupStore.open(path).blocks()], "X/indices")
ts = sr.TupleStore.create(f"{{root}}/t.zarr", 4, 5)
ts.append(sp.random(3, 4, density=0.6, format="csr", random_state=2),
          sp.random(6, 5, density=0.6, format="csr", random_state=3), [[0, 1, 2], [1, 3, 4], [2, 5, 0]])
poke(ts.path, "D/indices", 1, 5000)
expect(lambda: sr.SparseSGDRanker(random_state=0).fit(sr.TupleStore.open(ts.path), n_steps=3), "D/indices")
print("ok")
"""


@pytest.mark.slow   # a child process
def test_learners_on_out_of_range_indices_fail_cleanly_in_a_child_process(tmp_path, fork_server):
    """What SIGSEGV'd or corrupted the heap on main: a crash here is a failed test, not a dead pytest."""
    # a real process (forked from the pre-imported fork server, tests/_forked.py): a crash kills only it
    proc = fork_server.run(["-c", textwrap.dedent(_CHILD.format(root=str(tmp_path), here=os.path.dirname(__file__)))],
                           timeout=300)
    assert proc.returncode == 0, f"child exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    assert proc.stdout.strip().endswith("ok")

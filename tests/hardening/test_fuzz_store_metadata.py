"""Hypothesis fuzz over a store's metadata: a clear error or the correct result, never a crash.

Any field of the group's ``zarr.json`` attributes or of an array's
``zarr.json`` is set to an edge value (wrong types, negative, huge, flipped
endian, another separator ...); then the store is opened, every block read
and a RankRLS fitted.  Allowed outcomes: a ``StoreFormatError`` (or another
``ValueError``/``FileNotFoundError``/``TypeError`` with a message), or blocks
equal to the data appended.  The examples run in a child process, so a
signal (what out-of-range indices did on main) is a failed test.
"""
from __future__ import annotations

import textwrap

_CHILD = """
import json, os, shutil, sys, numpy as np, scipy.sparse as sp, streamrank as sr
from hypothesis import example, given, settings, strategies as st, HealthCheck
root = sys.argv[1]
rng = np.random.default_rng(0)
X = sp.random(300, 8, density=0.4, format="csr", random_state=1, dtype=np.float64)
y = rng.normal(size=300)
src = os.path.join(root, "src.zarr")
sr.GroupStore.create(src, 8, sparse=True, chunk_rows=128).append(X, y, np.repeat(np.arange(30), 10), batch_id="a")
ref = X.toarray().astype(np.float32)
files = ["zarr.json"] + [f"{a}/zarr.json" for a in ("X/indptr", "X/indices", "X/data", "y", "group_ptr", "qid")]
edges = [None, 0, 1, -1, 2, 7, 8, 9, 299, 300, 301, 2**31, -2**40, 1.5, "big", ".", "", [], {}, [0, 1], True]
fields = ["committed.rows", "committed.groups", "committed.nnz", "n_features", "n_outputs", "sparse",
          "feature_names", "format_version", "zarr_format", "log.0.rows", "log.0.nnz", "shape", "shape.0",
          "data_type", "fill_value", "chunk_grid.configuration.chunk_shape.0",
          "chunk_key_encoding.configuration.separator", "codecs.0.configuration.endian", "codecs.1.name",
          "codecs", "store_id", "every_chunk_written", "chunk_crc32c.y", "node_type", "tail_crc32c.y.1",
          "tail_crc32c.X/indices.0"]
def put(doc, path, value):
    keys = path.split(".")
    cur = doc
    for k in keys[:-1]:
        cur = cur[int(k)] if isinstance(cur, list) else cur.setdefault(k, {})
    last = keys[-1]
    if isinstance(cur, list):
        cur[int(last) % max(1, len(cur))] = value
    else:
        cur[last] = value
@settings(max_examples=int(sys.argv[2]), deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.sampled_from(files), st.sampled_from(fields), st.sampled_from(edges))
@example("zarr.json", "n_features", 7)                               # indices past the columns (SIGSEGV on main)
@example("X/indices/zarr.json", "codecs.0.configuration.endian", "big")   # garbage indices
@example("y/zarr.json", "codecs.0.configuration.endian", "big")           # garbage scores
@example("zarr.json", "committed.nnz", 301)
def fuzz(f, field, value):
    dst = os.path.join(root, "fuzz.zarr")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    meta = os.path.join(dst, f)
    doc = json.load(open(meta))
    target = doc["attributes"] if f == "zarr.json" and field.split(".")[0] not in ("zarr_format", "node_type") else doc
    try:
        put(target, field, value)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return                                   # that field does not exist in this file
    json.dump(doc, open(meta, "w"))
    print("fuzz", f, field, repr(value), flush=True)
    try:
        store = sr.GroupStore.open(dst)
        got = sp.vstack([b.X for b in store.blocks(max_rows=64)]).toarray() if store.n_rows else np.zeros((0, 8))
        sr.RankRLS(alpha=1.0).fit(store)
    except (ValueError, FileNotFoundError, TypeError) as exc:      # StoreFormatError is a ValueError
        assert str(exc), "an error without a message"
        return
    # opened and read: then what it read is what was appended (a prefix when committed counts shrank)
    np.testing.assert_array_equal(got, ref[: got.shape[0]])
fuzz()
print("ok", flush=True)
"""


def test_store_metadata_fuzz_gives_clear_errors_or_the_data_never_a_crash(tmp_path, fork_server):
    # a real process (forked from the pre-imported fork server, tests/_forked.py): a crash kills only it
    proc = fork_server.run(["-c", textwrap.dedent(_CHILD), str(tmp_path), "80"], timeout=900)
    last = proc.stdout.strip().split("\n")[-1:]
    assert proc.returncode == 0, f"child exited {proc.returncode} after {last}:\n{proc.stderr[-3000:]}"
    assert last == ["ok"]

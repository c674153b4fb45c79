"""Doc ids from every ingest source: a Parquet column (``--docid-column``), an .npz ``docid`` array
(``--docids``) and a zarr store that keeps them (copied) — run files (``predict --run``) then name the documents.

The ids come from MQ2008's ``#docid = ...`` comments split by hand (no streamrank code), written into the
Parquet/npz files beside the rows they belong to.
"""
from __future__ import annotations

import re
import tarfile

import numpy as np
import pytest

from _cli_inproc import run_cli

import streamrank as sr
from streamrank.datasets._paths import data_path

ARCHIVE = data_path("letor", "MQ2008_QueryLevelNorm.tar.gz")
MEMBER = "MQ2008/Fold1/test.txt"
pytestmark = pytest.mark.skipif(not ARCHIVE.exists(), reason="MQ2008 archive not available")
N_LINES = 400


run = run_cli   # (exit code, stdout, stderr) of cli.main in this process


@pytest.fixture(scope="module")
def rows():
    """(X, y, qid, docid) of the member's first whole queries (~N_LINES lines), parsed by hand."""
    with tarfile.open(ARCHIVE) as tf:
        text = tf.extractfile(MEMBER).read().decode()
    X, y, q, d = [], [], [], []
    for line in text.splitlines():
        if not line.strip():
            continue
        body, comment = line.split("#", 1)
        parts = body.split()
        qid = int(parts[1].split(":")[1])
        if len(q) >= N_LINES and qid != q[-1]:
            break
        feats = dict(p.split(":") for p in parts[2:])
        X.append([float(feats[str(j)]) for j in range(1, 47)])
        y.append(float(parts[0]))
        q.append(qid)
        d.append(re.search(r"docid\s*=\s*(\S+)", comment).group(1))
    return np.array(X), np.array(y), np.array(q), d


def _run_ids(path):
    lines = [ln.split() for ln in path.read_text().splitlines()]
    assert all(len(r) == 6 for r in lines)
    return {(r[0], r[2]) for r in lines}


def _check_run(tmp_path, store_path, q, d):
    """fit + predict --run on the store: the run names every (query, document) of the input once."""
    m = tmp_path / "m.zarr"
    rc, _, err = run("fit", "--store", store_path, "--model", m, "--learner", "rankrls", "-q")
    assert rc == 0, err
    out = tmp_path / "run.trec"
    rc, _, err = run("predict", "--model", m, "--store", store_path, "--run", out)
    assert rc == 0, err
    assert _run_ids(out) == {(str(a), b) for a, b in zip(q, d, strict=True)}


@pytest.mark.slow   # CLI ingests of Parquet and a predict: ~1.5 CPU-s
def test_parquet_docid_column(rows, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    X, y, q, d = rows
    cols = {f"f_{j}": X[:, j] for j in range(X.shape[1])}
    half = len(y) // 2
    cut = int(np.flatnonzero(q != q[half])[np.flatnonzero(q != q[half]) > half][0])   # a query boundary
    for i, (a, b) in enumerate([(0, cut), (cut, len(y))]):     # two part files, small row groups
        t = pa.table({"label": y[a:b], "query": [f"q{v}" for v in q[a:b]], "doc_id": d[a:b],
                      **{k: v[a:b] for k, v in cols.items()}})
        pq.write_table(t, tmp_path / f"part-{i}.parquet", row_group_size=37)
    store = tmp_path / "p.zarr"
    rc, _, err = run("ingest", tmp_path / "part-*.parquet", "--store", store, "--label", "label", "--qid", "query",
                     "--docid-column", "doc_id", "--max-rows", 50, "-q")
    assert rc == 0, err
    s = sr.GroupStore.open(store)
    assert s.has_docids and len(s.batches) > 2 and s.docids() == d
    assert s.feature_names == [f"f_{j}" for j in range(X.shape[1])]       # doc_id is not a feature
    np.testing.assert_allclose(np.vstack([b.X for b in s.blocks()]), X.astype(np.float32))
    assert s.verify() == len(s.batches)
    _check_run(tmp_path, store, [f"q{v}" for v in q], d)
    # the same files again: nothing added; without the column: refused, the store unchanged
    rc, _, err = run("ingest", tmp_path / "part-*.parquet", "--store", store, "--label", "label", "--qid", "query",
                     "--docid-column", "doc_id", "--max-rows", 50, "-q")
    assert rc == 0, err
    assert sr.GroupStore.open(store).n_rows == len(y)
    rc, _, err = run("ingest", tmp_path / "part-0.parquet", "--store", store, "--label", "label", "--qid", "query",
                     "--batch-id", "other", "-q")
    assert rc != 0 and "--docid-column" in err
    assert sr.GroupStore.open(store).n_rows == len(y)


def test_parquet_docid_column_types_and_refusals(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from streamrank.io.parquet import ingest_parquet, iter_parquet

    t = pa.table({"y": [1.0, 0.0, 2.0], "qid": [1, 1, 2], "a": [0.5, 1.5, 2.5], "doc": [10, 20, 30]})
    pq.write_table(t, tmp_path / "int.parquet")
    (chunk,) = iter_parquet(tmp_path / "int.parquet", label="y", qid="qid", docid="doc")
    assert list(chunk.docid) == ["10", "20", "30"] and chunk.feature_names == ["a"]
    (plain,) = iter_parquet(tmp_path / "int.parquet", label="y", qid="qid", features=["a"])
    assert plain.docid is None
    pq.write_table(t.set_column(3, "doc", pa.array(["x", None, "z"])), tmp_path / "null.parquet")
    with pytest.raises(ValueError, match="doc id column 'doc' is null at row 1"):
        list(iter_parquet(tmp_path / "null.parquet", label="y", qid="qid", docid="doc"))
    pq.write_table(t.set_column(3, "doc", pa.array(["x", "a b", "z"])), tmp_path / "space.parquet")
    with pytest.raises(ValueError, match=r"docid\[1\]"):
        ingest_parquet(tmp_path / "s.zarr", tmp_path / "space.parquet", label="y", qid="qid", docid="doc")
    with pytest.raises(KeyError, match="--docid-column column 'nope'"):
        list(iter_parquet(tmp_path / "int.parquet", label="y", qid="qid", docid="nope"))
    ingest_parquet(tmp_path / "plain.zarr", tmp_path / "int.parquet", label="y", qid="qid", features=["a"])
    with pytest.raises(ValueError, match="without document ids"):
        ingest_parquet(tmp_path / "plain.zarr", tmp_path / "int.parquet", label="y", qid="qid", docid="doc",
                       batch_id="again")


@pytest.mark.slow   # CLI ingests and a predict: ~1 s warm
def test_npz_docid_array(rows, tmp_path):
    X, y, q, d = rows
    np.savez_compressed(tmp_path / "day.npz", X=X, y=y, qid=q, docid=np.array(d))
    store = tmp_path / "n.zarr"
    rc, _, err = run("ingest", tmp_path / "day.npz", "--store", store, "--docids", "--max-rows", 60, "-q")
    assert rc == 0, err
    s = sr.GroupStore.open(store)
    assert s.has_docids and len(s.batches) > 2 and s.docids() == d
    _check_run(tmp_path, store, q, d)
    # an archive without ids: refused with --docids, and refused into a store that keeps ids
    np.savez(tmp_path / "bare.npz", X=X[:8], y=y[:8], qid=q[:8] + 10**6)
    rc, _, err = run("ingest", tmp_path / "bare.npz", "--store", tmp_path / "x.zarr", "--docids", "-q")
    assert rc != 0 and "docid" in err and not (tmp_path / "x.zarr").exists()
    rc, _, err = run("ingest", tmp_path / "bare.npz", "--store", store, "-q")
    assert rc != 0 and "keeps document ids" in err
    assert sr.GroupStore.open(store).n_rows == len(y)
    # bytes ids (UTF-8) read the same; without --docids a new store keeps none
    np.savez(tmp_path / "b.npz", X=X, y=y, qid=q, docid=np.array([s.encode() for s in d]))
    rc, _, err = run("ingest", tmp_path / "b.npz", "--store", tmp_path / "b.zarr", "--docids", "--max-rows", 500, "-q")
    assert rc == 0, err
    assert sr.GroupStore.open(tmp_path / "b.zarr").docids() == d
    rc, _, err = run("ingest", tmp_path / "b.npz", "--store", tmp_path / "nb.zarr", "-q")
    assert rc == 0, err
    assert not sr.GroupStore.open(tmp_path / "nb.zarr").has_docids


def test_iter_npz_docids_chunks_follow_the_rows(tmp_path):
    from streamrank.io.npz import iter_npz

    q = np.array([1, 1, 2, 3, 3, 3, 4])
    ids = np.array([f"d{i}" for i in range(7)])
    np.savez(tmp_path / "f.npz", X=np.arange(14.0).reshape(7, 2), y=np.zeros(7), qid=q, docid=ids)
    for rows in (1, 2, 3, 7):
        parts = list(iter_npz(tmp_path / "f.npz", chunk_rows=rows, docids=True))
        plain = list(iter_npz(tmp_path / "f.npz", chunk_rows=rows))
        assert [p[2].tolist() for p in parts] == [p[2].tolist() for p in plain]     # same chunks of whole queries
        for X, _, _, d in parts:                      # each id beside its own row (row r has X[r, 0] = 2r)
            assert d == [f"d{int(v) // 2}" for v in X[:, 0]]
        assert sum((p[3] for p in parts), []) == list(ids)
    np.savez(tmp_path / "two.npz", X=np.zeros((2, 1)), y=np.zeros(2), qid=[1, 1], docid=np.array([["a"], ["b"]]))
    with pytest.raises(ValueError, match="docid must be 1-D"):
        list(iter_npz(tmp_path / "two.npz", docids=True))
    np.savez(tmp_path / "short.npz", X=np.zeros((2, 1)), y=np.zeros(2), qid=[1, 1], docid=np.array(["a"]))
    with pytest.raises(ValueError, match="docid has 1 rows but X has 2"):
        list(iter_npz(tmp_path / "short.npz", docids=True))


@pytest.mark.slow   # three CLI ingests and a predict: ~2 CPU-s
def test_zarr_ingest_copies_the_doc_ids(rows, tmp_path):
    X, y, q, d = rows
    src = sr.GroupStore.create(tmp_path / "src.zarr", X.shape[1], docids=True)
    k = int(np.flatnonzero(q != q[0])[0])
    src.append(X[:k], y[:k], q[:k], batch_id="a", docid=d[:k])
    src.append(X[k:], y[k:], q[k:], batch_id="b", docid=d[k:])
    rc, _, err = run("ingest", tmp_path / "src.zarr", "--store", tmp_path / "copy.zarr", "--max-rows", 45, "-q")
    assert rc == 0, err
    c = sr.GroupStore.open(tmp_path / "copy.zarr")
    assert c.has_docids and c.docids() == d and c.verify() == len(c.batches)
    _check_run(tmp_path, tmp_path / "copy.zarr", q, d)
    # a store without ids cannot feed one that keeps them
    plain = sr.GroupStore.create(tmp_path / "plain.zarr", X.shape[1])
    plain.append(X[:k], y[:k], q[:k] + 10**6)
    rc, _, err = run("ingest", tmp_path / "plain.zarr", "--store", tmp_path / "copy.zarr", "-q")
    assert rc != 0 and "keeps document ids" in err

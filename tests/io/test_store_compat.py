"""Stores written by streamrank 5a88973 (local stores then written without zarr, io/_local_zarr) still work.

``data/stores_written_by_5a88973.tar.gz`` holds six small stores (dense, CSR,
document ids, two outputs, string query ids, row columns), three appends
each, written by that commit's local store writer.  Written again here (every
store now goes through zarr's ``LocalStore``), the same appends give the same
files byte for byte (time stamps and store ids aside); the old stores open,
verify, read the same blocks, and take a further append.
"""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr

DATA = Path(__file__).parent / "data" / "stores_written_by_5a88973.tar.gz"

SCENARIOS = {
    "dense": dict(),
    "sparse": dict(sparse=True),
    "docids": dict(docids=True),
    "two_outputs": dict(n_outputs=2),
    "string_ids": dict(str_ids=True),
    "row_columns": dict(row_columns=("weight", "click", "position")),
}


def _days(rng, n_days, rows, n_features, sparse=False, str_ids=False):
    """The appends the stores were written with (the generator of tests/io/test_local_zarr.py at 5a88973)."""
    out = []
    q = 0
    for _ in range(n_days):
        sizes = rng.integers(1, 9, size=rows // 4)
        sizes = sizes[np.cumsum(sizes) <= rows]
        qid = np.repeat(np.arange(q, q + len(sizes)), sizes)
        q += len(sizes)
        X = rng.normal(size=(len(qid), n_features)).astype(np.float32)
        X[rng.random(X.shape) < 0.6] = 0
        if str_ids:
            qid = np.array([f"q-{i}é" for i in qid], dtype=object)
        out.append((sp.csr_matrix(X) if sparse else X, rng.integers(0, 3, len(qid)).astype(float), qid))
    return out


def _appends(name, n_days=3):
    """``(X, y, qid, extra)`` of each append the store ``name`` was written with at 5a88973."""
    opts = SCENARIOS[name]
    rng = np.random.default_rng(7)
    out = []
    for i, (X, y, qid) in enumerate(_days(rng, n_days, 150, 5, sparse=opts.get("sparse", False),
                                          str_ids=opts.get("str_ids", False))):
        n = X.shape[0]
        if opts.get("n_outputs") == 2:
            y = np.stack([y, -y], axis=1)
        extra = {}
        if opts.get("docids"):
            extra["docid"] = [f"d{i}-{r}" for r in range(n)]
        for c in opts.get("row_columns", ()):
            extra[c] = {"weight": rng.random(n), "click": rng.integers(0, 2, n), "position": rng.integers(1, 9, n)}[c]
        out.append((X, y, qid, extra))
    return out


def _write(path, name):
    opts = {k: v for k, v in SCENARIOS[name].items() if k != "str_ids"}
    store = sr.GroupStore.create(path, 5, chunk_rows=64, **opts)
    for i, (X, y, qid, extra) in enumerate(_appends(name)):
        assert store.append(X, y, qid, batch_id=f"day{i}", **extra)


def _files(path: Path) -> dict:
    out = {}
    for f in sorted(path.rglob("*")):
        if f.is_file() and f.name != ".streamrank.lock":
            data = f.read_bytes()
            if f == path / "zarr.json":          # the root document: time stamps and the store id differ
                doc = json.loads(data)
                a = doc["attributes"]
                a["created"], a["store_id"] = "T", "ID"
                for e in a.get("log", []):
                    e["time"] = "T"
                data = json.dumps(doc, indent=1).encode()
            out[str(f.relative_to(path))] = data
    return out


@pytest.fixture(scope="module")
def old_stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("old")
    with tarfile.open(DATA) as tar:
        tar.extractall(root, filter="data")
    return root


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_zarr_writes_the_files_the_old_writer_wrote(tmp_path, old_stores, name):
    _write(tmp_path / "new.zarr", name)
    old, new = _files(old_stores / f"{name}.zarr"), _files(tmp_path / "new.zarr")
    assert sorted(old) == sorted(new)
    for k in old:
        assert old[k] == new[k], k


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_old_stores_open_read_verify_and_append(tmp_path, old_stores, name):
    import shutil

    path = tmp_path / "s.zarr"
    shutil.copytree(old_stores / f"{name}.zarr", path)
    days = _appends(name, n_days=4)                          # the three stored days, and one more
    store = sr.GroupStore.open(path)
    assert store.verify() == 3
    dense = [(X.toarray() if sp.issparse(X) else X) for X, *_ in days]
    got = [(b.X.toarray() if sp.issparse(b.X) else b.X, b.y) for b in store.blocks(max_rows=100)]
    np.testing.assert_array_equal(np.concatenate([g[0] for g in got]), np.concatenate(dense[:3]))
    np.testing.assert_array_equal(np.concatenate([g[1] for g in got]), np.concatenate([d[1] for d in days[:3]]))
    X4, y4, q4, extra = days[3]
    if name == "docids":
        extra = {"docid": [f"d3-{r}" for r in range(X4.shape[0])]}
    assert sr.GroupStore.open(path, mode="a").append(X4, y4, q4, batch_id="day3", **extra)
    again = sr.GroupStore.open(path)
    assert again.verify() == 4 and again.n_rows == sum(d.shape[0] for d in dense)
    np.testing.assert_array_equal(
        np.concatenate([b.X.toarray() if sp.issparse(b.X) else b.X for b in again.blocks(max_rows=100)]),
        np.concatenate(dense))

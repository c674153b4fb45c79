"""Local stores written and read without zarr (io/_local_zarr, issue 22) are the stores zarr writes, byte for byte.

Each scenario runs twice in the same process: once with zarr doing the I/O
(``local_root`` patched to answer None, the code path before issue 22's
change) and once through :mod:`streamrank.io._local_zarr`; every file of the
two stores must be equal byte for byte, except the root ``zarr.json``'s time
stamps and store id.  Fresh interpreters show that a local ingest, open and
read import no zarr, and that stores at URLs / of another layout still get it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from streamrank.io import _local_zarr, group_store
from streamrank.io._local_zarr import LocalArray, LocalGroup, local_root
from streamrank.io.schema import StoreFormatError, compressors, every_chunk

ROOT = Path(__file__).resolve().parents[2]


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


def _both(tmp_path, monkeypatch, scenario):
    """Run ``scenario(path)`` with zarr's I/O and with the local one; return the two stores' files."""
    with monkeypatch.context() as m:
        m.setattr(group_store, "local_root", lambda *a, **k: None)
        scenario(tmp_path / "zarr.zarr")
    scenario(tmp_path / "local.zarr")
    return _files(tmp_path / "zarr.zarr"), _files(tmp_path / "local.zarr")


def _days(rng, n_days, rows, n_features, sparse=False, str_ids=False):
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


SCENARIOS = {
    "dense": dict(),
    "sparse": dict(sparse=True),
    "docids": dict(docids=True),
    "two_outputs": dict(n_outputs=2),
    "string_ids": dict(str_ids=True),
    "row_columns": dict(row_columns=("weight", "click", "position")),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_stores_are_byte_identical_to_zarrs(tmp_path, monkeypatch, name):
    opts = dict(SCENARIOS[name])
    str_ids = opts.pop("str_ids", False)

    def scenario(path):
        rng = np.random.default_rng(7)
        store = sr.GroupStore.create(path, 5, chunk_rows=64, **opts)
        for i, (X, y, qid) in enumerate(_days(rng, 3, 150, 5, sparse=opts.get("sparse", False), str_ids=str_ids)):
            n = X.shape[0]
            if opts.get("n_outputs") == 2:
                y = np.stack([y, -y], axis=1)
            extra = {}
            if opts.get("docids"):
                extra["docid"] = [f"d{i}-{r}" for r in range(n)]
            for c in opts.get("row_columns", ()):
                extra[c] = {"weight": rng.random(n), "click": rng.integers(0, 2, n),
                            "position": rng.integers(1, 9, n)}[c]
            assert store.append(X, y, qid, batch_id=f"day{i}", **extra)
        again = sr.GroupStore.open(path)
        assert again.verify() == 3
        return again

    zarr_files, local_files = _both(tmp_path, monkeypatch, scenario)
    assert sorted(zarr_files) == sorted(local_files)
    for k in zarr_files:
        assert zarr_files[k] == local_files[k], k


def test_torn_tail_repair_is_byte_identical(tmp_path, monkeypatch):
    """A killed append (arrays grown, chunks written, no commit) is cut back by the next append the same way."""
    def scenario(path):
        rng = np.random.default_rng(3)
        store = sr.GroupStore.create(path, 4, chunk_rows=32)
        (X, y, q), (X2, y2, q2), (X3, y3, q3) = _days(rng, 3, 100, 4)
        store.append(X, y, q, batch_id="a")
        arr = store._arrays["X"]._arr              # a writer killed after writing rows past the commit
        arr.resize((X.shape[0] + X2.shape[0], 4))
        arr[X.shape[0]:] = X2
        again = sr.GroupStore.open(path, mode="a")
        again.append(X3, y3, q3 + 1000, batch_id="b")
        assert again.n_rows == X.shape[0] + X3.shape[0]

    zarr_files, local_files = _both(tmp_path, monkeypatch, scenario)
    assert zarr_files == local_files


def test_local_array_matches_zarr_on_random_writes(tmp_path):
    """resize / row writes / reads in a random order: the same files and values as zarr's own array."""
    import zarr

    rng = np.random.default_rng(11)
    for dtype, width in (("float32", 3), ("float64", None), ("int64", None), ("uint8", None), ("int32", None)):
        for empty in (True, False):
            shape, chunks = ((0, width), (16, width)) if width else ((0,), (16,))
            zp, lp = tmp_path / f"z-{dtype}-{empty}", tmp_path / f"l-{dtype}-{empty}"
            zroot = zarr.open_group(store=zarr.storage.LocalStore(str(zp)), mode="a")
            kw = dict(shape=shape, chunks=chunks, dtype=dtype, compressors=compressors(np.dtype(dtype).itemsize),
                      fill_value=0)
            with zarr.config.set({"array.write_empty_chunks": empty}):
                za = zroot.create_array("a", **kw)
            token = _local_zarr.write_empty_chunks(empty)
            try:
                la = local_root(str(lp), (), create=True).create_array("a", **kw)
            finally:
                _local_zarr._WRITE_EMPTY.reset(token)
            n = 0
            for _ in range(25):
                op = rng.integers(0, 3)
                if op == 0:
                    n = int(rng.integers(0, 80))
                    za.resize((n,) + shape[1:])
                    la.resize((n,) + shape[1:])
                elif op == 1 and n:
                    a = int(rng.integers(0, n))
                    b = int(rng.integers(a, n + 1))
                    v = (rng.integers(0, 3, size=(b - a,) + shape[1:]) * rng.integers(0, 2)).astype(dtype)
                    za[a:b] = v
                    la[a:b] = v
                elif n:
                    a = int(rng.integers(0, n))
                    b = int(rng.integers(a, n + 1))
                    np.testing.assert_array_equal(za[a:b], la[a:b])
                    np.testing.assert_array_equal(za[a], la[a])
                assert _files(zp) == _files(lp), (dtype, empty)
            assert la.shape == za.shape and la.chunks == za.chunks and la.dtype == za.dtype
            if width is None:                        # (1-D only: CSR indptr)
                idx = np.array([0, n - 1, n // 2]) if n else np.zeros(0, np.int64)
                np.testing.assert_array_equal(za.get_coordinate_selection(idx), la.get_coordinate_selection(idx))


def test_local_array_reads_damage_and_refuses_other_layouts(tmp_path):
    root = local_root(str(tmp_path / "s"), (), create=True)
    with every_chunk(zarr_too=False):
        a = root.create_array("a", shape=(10,), chunks=(4,), dtype="int64", compressors=compressors(8), fill_value=0)
    a[:] = np.arange(10)
    np.testing.assert_array_equal(a[2:9], np.arange(2, 9))
    assert a[-1] == 9 and isinstance(root["a"], LocalArray) and isinstance(LocalGroup(tmp_path / "s"), LocalGroup)
    with pytest.raises(KeyError):
        root["nothing"]
    f = tmp_path / "s" / "a" / "c" / "1"
    data = bytearray(f.read_bytes())
    data[10] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(StoreFormatError, match="CRC-32C"):
        a[4:6]
    with pytest.raises(StoreFormatError, match="CRC-32C"):       # a partial write reads the chunk first
        a[5:6] = [1]
    with pytest.raises(IndexError):
        a[10]
    ro = LocalGroup(tmp_path / "s", read_only=True)["a"]
    with pytest.raises(PermissionError):
        ro[0:1] = [1]
    doc = json.loads((tmp_path / "s" / "a" / "zarr.json").read_text())
    doc["codecs"] = doc["codecs"][:2]                               # the first stores: no crc32c
    (tmp_path / "s" / "a" / "zarr.json").write_text(json.dumps(doc))
    assert local_root(str(tmp_path / "s"), ("a",)) is None
    with pytest.raises(ValueError):
        LocalArray(tmp_path / "s", "a", doc)
    assert local_root("s3://bucket/x.zarr", ("a",)) is None


def _fresh(code: str, cwd) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_local_ingest_open_and_read_import_no_zarr(tmp_path):
    """A fresh interpreter: the CLI's ingest of LETOR text, reopening and streaming the store import no zarr."""
    lines = [f"{i % 3} qid:{i // 5} 1:{i * 0.5} 2:{1 - i * 0.25} 3:0.125" for i in range(40)]
    (tmp_path / "a.txt").write_text("\n".join(lines) + "\n")
    got = _fresh("""
        import sys
        from streamrank.cli._app import main
        assert main(["ingest", "a.txt", "--store", "s.zarr", "-q"]) == 0
        import streamrank as sr
        s = sr.GroupStore.open("s.zarr")
        n = sum(b.n_rows for b in s.blocks(max_rows=7, shuffle=False))
        assert s.verify() == 1
        print(n, "zarr" in sys.modules)
    """, tmp_path)
    assert got.split()[-2:] == ["40", "False"]


def test_other_layouts_and_tuple_stores_keep_zarr(tmp_path):
    """A store whose arrays lack the crc32c codec (the first stores) opens through zarr and reads the same."""
    store = sr.GroupStore.create(tmp_path / "s.zarr", 2)
    store.append(np.arange(6.0).reshape(3, 2), [1.0, 0.0, 1.0], [1, 1, 2], batch_id="a")
    got = _fresh(f"""
        import json, sys
        from pathlib import Path
        import streamrank as sr
        p = Path({str(tmp_path / "s.zarr")!r})
        print(type(sr.GroupStore.open(p)._root).__name__, "zarr" in sys.modules)
        t = sr.TupleStore.create(p.parent / "t.zarr", 2, 2)
        print("zarr" in sys.modules)
    """, tmp_path)
    assert got.split() == ["LocalGroup", "False", "True"]


def test_a_store_of_the_first_layout_stays_with_zarr(tmp_path, monkeypatch):
    """Arrays without the crc32c codec (the first stores): opened, appended to and read through zarr, as before."""
    from streamrank.io import _qid_text

    blosc_only = lambda itemsize: compressors(itemsize)[:1]                        # noqa: E731
    with monkeypatch.context() as m:
        m.setattr(group_store, "local_root", lambda *a, **k: None)
        m.setattr(group_store, "compressors", blosc_only)
        m.setattr(_qid_text, "compressors", blosc_only)
        old = sr.GroupStore.create(tmp_path / "old.zarr", 3)
    doc = json.loads((tmp_path / "old.zarr" / "X" / "zarr.json").read_text())
    assert [c["name"] for c in doc["codecs"]] == ["bytes", "blosc"]
    X = np.arange(12.0).reshape(4, 3)
    assert old.append(X, [1.0, 0.0, 2.0, 1.0], [5, 5, 6, 6], batch_id="a")
    again = sr.GroupStore.open(tmp_path / "old.zarr", mode="a")
    assert type(again._root).__name__ == "Group" and again._zstore is not None
    assert again.append(X + 1, [0.0, 1.0, 0.0, 1.0], [7, 7, 8, 8], batch_id="b")
    back = sr.GroupStore.open(tmp_path / "old.zarr")
    np.testing.assert_array_equal(np.concatenate([b.X for b in back.blocks(max_rows=3, shuffle=False)]),
                                  np.vstack([X, X + 1]).astype(np.float32))
    assert back.verify() == 2


def test_a_group_store_command_does_not_import_the_tuple_store(tmp_path):
    """``cli._stores._open_store`` imports the tuple store's module only for a tuple store (issue 22)."""
    sr.GroupStore.create(tmp_path / "g.zarr", 2).append(np.ones((2, 2)), [1.0, 0.0], [1, 1], batch_id="a")
    sr.TupleStore.create(tmp_path / "t.zarr", 2, 2)
    got = _fresh("""
        import sys
        from streamrank.cli._stores import _open_store
        print(_open_store("g.zarr").n_rows, "streamrank.io.tuple_store" in sys.modules)
        print(type(_open_store("t.zarr")).__name__, "streamrank.io.tuple_store" in sys.modules)
    """, tmp_path)
    assert got.split() == ["2", "False", "TupleStore", "True"]

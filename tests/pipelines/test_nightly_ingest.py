"""Nightly ingest in bounded chunks: resumable after a kill, idempotent, verified after the append."""
from __future__ import annotations

import io
import signal
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import streamrank as sr
from pipeline_data import make_day

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from streamrank.pipelines import nightly  # noqa: E402
from streamrank.pipelines._nightly_ingest import ingest, iter_day  # noqa: E402

CHILD = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from streamrank.pipelines import nightly
    import streamrank.io._group_append as append   # its write_attrs: the commit point of an append

    real, calls = append.write_attrs, []

    def die_at_third(*args, **kwargs):   # two chunks committed, the third one's commit never happens
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)

    append.write_attrs = die_at_third
    sys.exit(nightly.main(sys.argv[1:]))
""")


def _big_day(d, n_groups=40):
    return make_day(d, n_groups=n_groups)


def _text(path, X, y, qid):
    with open(path, "w") as fh:
        for i in range(len(y)):
            fh.write(f"{y[i]:g} qid:{qid[i]} " + " ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(X[i])) + "\n")
    return path


def _content(store):
    b = list(store.blocks(max_rows=10**6))
    return b[0].X, b[0].y, b[0].row_qid()


@pytest.mark.parametrize("kind", ["text", "npz", "npz_compressed", "zarr"])
def test_day_read_in_chunks_of_whole_groups(tmp_path, kind):
    X, y, qid = _big_day(1)
    if kind == "text":
        p = _text(tmp_path / "d.txt", X, y, qid)
    elif kind == "zarr":
        s = sr.GroupStore.create(tmp_path / "d.zarr", n_features=X.shape[1])
        s.append(X, y, qid)
        p = tmp_path / "d.zarr"
    else:
        p = tmp_path / "d.npz"
        (np.savez if kind == "npz" else np.savez_compressed)(p, X=X, y=y, qid=qid)
    chunks = list(iter_day(p, chunk_bytes=2048))
    assert len(chunks) > 3
    for (_, _, a), (_, _, b) in zip(chunks, chunks[1:]):
        assert a[-1] != b[0]                       # never a query cut in two
    np.testing.assert_allclose(np.concatenate([c[0] for c in chunks]), X, rtol=1e-6)
    np.testing.assert_array_equal(np.concatenate([c[2] for c in chunks]), qid)
    rep = ingest(tmp_path / "s.zarr", [p], chunk_bytes=2048)[0]
    store = sr.GroupStore.open(tmp_path / "s.zarr")
    assert rep["appended"] and rep["chunks"] == len(chunks) == len(store.batches)
    assert store.batches[-1]["batch_id"] == rep["batch_id"] == nightly.content_hash(p)   # the day's last chunk
    assert all(e["batch_id"] == f"{rep['batch_id']}#{e['rows'][0]}" for e in store.batches[:-1])
    assert rep["rows"] == [0, len(y)] and rep["groups"] == [0, 40]
    np.testing.assert_array_equal(_content(store)[2], qid)
    again = ingest(tmp_path / "s.zarr", [p], chunk_bytes=2048)[0]     # duplicate: nothing read or appended
    assert not again["appended"] and len(sr.GroupStore.open(tmp_path / "s.zarr").batches) == len(chunks)


def test_killed_chunked_ingest_resumes_with_another_chunk_size(tmp_path, fork_server):
    store, models = tmp_path / "logs.zarr", tmp_path / "models"
    day1 = tmp_path / "d1.npz"
    np.savez(day1, **dict(zip("X y qid".split(), _big_day(1))))
    X, y, qid = _big_day(2)
    day2 = _text(tmp_path / "d2.txt", X, y, qid)
    argv = ["--store", str(store), "--models", str(models), "--alphas", "0.5,2", "--no-plot", "--tolerance", "1"]
    assert nightly.main(argv + ["--new", str(day1)]) == 0
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(root=str(ROOT)))
    proc = fork_server.run([str(script), *argv, "--new", str(day2), "--chunk-mb", "0.002"],   # a real process,
                           timeout=300)                                                # forked (tests/_forked.py)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    s = sr.GroupStore.open(store)
    h = nightly.content_hash(day2)
    part = [e for e in s.batches if e["batch_id"].startswith(h)]
    assert len(part) == 2 and all("#" in e["batch_id"] for e in part)   # two chunks committed, day not complete
    assert s.verify() == 3 and nightly.current_version(models) == "v0001"
    buf = io.StringIO()
    rep = nightly.run_night(store, [day2], models, alphas=[0.5, 2.0], tolerance=1.0, plot=False, out=buf,
                            chunk_bytes=3000)
    assert rep["status"] == "promoted" and rep["ingest"][0]["appended"]
    s = sr.GroupStore.open(store)
    assert s.batches[-1]["batch_id"] == h and s.n_groups == 80
    np.testing.assert_array_equal(_content(s)[2][-len(qid):], qid)
    # every chunk of the day (also those of the killed run) and the batch before it
    assert rep["verify"] == {"batches": len(rep["ingest"][0]["batch_ids"]) + 1, "full": False}
    scratch = sr.RankRLS(alpha=rep["alpha"], solver="primal").fit(s)
    np.testing.assert_allclose(sr.load(models / "current").coef_, scratch.coef_, rtol=1e-8)


def test_verify_new_batches_and_full_verify(tmp_path, capsys):
    store, models = tmp_path / "logs.zarr", tmp_path / "models"
    days = []
    for d in (1, 2, 3):
        days.append(tmp_path / f"d{d}.npz")
        np.savez(days[-1], **dict(zip("X y qid".split(), make_day(d))))
    run = dict(alphas=[1.0], tolerance=1.0, plot=False)
    r1 = nightly.run_night(store, [days[0]], models, out=io.StringIO(), **run)
    assert r1["verify"] == {"batches": 1, "full": False}
    r2 = nightly.run_night(store, [days[1]], models, out=io.StringIO(), **run)
    assert r2["verify"] == {"batches": 2, "full": False}      # the new batch + the one whose last chunk it rewrote
    dup = nightly.run_night(store, [days[1]], models, out=io.StringIO(), **run)
    assert dup["verify"] == {"batches": 0, "full": False}
    # damage night 1's data on disk: a nightly run re-reads only new batches, --verify reads them all
    import zarr

    y = zarr.open_group(str(store), mode="r+")["y"]
    v = y[:5]
    y[:5] = v + 1.0
    r3 = nightly.run_night(store, [days[2]], models, out=io.StringIO(), **run)
    assert r3["status"] == "promoted" and r3["verify"]["batches"] == 2
    before = nightly.current_version(models)
    with pytest.raises(sr.io.schema.StoreFormatError, match="batch 'sha256:"):
        nightly.run_night(store, [days[2]], models, verify=True, full=True, out=io.StringIO(), **run)
    # the command line: the same error as one line, exit code 4 (bad data)
    capsys.readouterr()
    assert nightly.main(["--store", str(store), "--new", str(days[2]), "--models", str(models), "--alphas", "1",
                         "--no-plot", "--verify", "--full"]) == 4
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("streamrank nightly: error: ") and "batch 'sha256:" in err
    assert nightly.current_version(models) == before and len(nightly.list_versions(models)) == 3


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=15, deadline=None)
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=25), first=st.integers(60, 900),
       second=st.integers(60, 900), stop_after=st.integers(0, 6), kind=st.sampled_from(["npz", "text"]))
def test_interrupted_ingest_equals_one_shot_whatever_the_chunks(tmp_path_factory, sizes, first, second, stop_after,
                                                                kind):
    """Chunk sizes before and after an interruption at any chunk: the store holds the day once, in order."""
    tmp = tmp_path_factory.mktemp("h")
    rng = np.random.default_rng(len(sizes))
    qid = np.repeat(np.arange(len(sizes)) + 100, sizes)
    X = rng.normal(size=(len(qid), 3)).astype(np.float32)
    y = rng.integers(0, 3, len(qid)).astype(np.float64)
    if kind == "npz":
        day = tmp / "d.npz"
        np.savez(day, X=X, y=y, qid=qid)
    else:
        day = _text(tmp / "d.txt", X, y, qid)
    store = tmp / "s.zarr"
    real = sr.GroupStore.append
    calls = []

    def interrupted(self, *a, **k):
        if len(calls) == stop_after:
            raise KeyboardInterrupt
        calls.append(1)
        return real(self, *a, **k)

    sr.GroupStore.append = interrupted
    try:
        ingest(store, [day], chunk_bytes=first)
        complete = True
    except KeyboardInterrupt:
        complete = False
    finally:
        sr.GroupStore.append = real
    rep = ingest(store, [day], chunk_bytes=second)[0]
    assert rep["appended"] == (not complete)
    s = sr.GroupStore.open(store)
    Xs, ys, qs = _content(s)
    np.testing.assert_allclose(Xs, X, rtol=1e-6)
    np.testing.assert_array_equal(ys, y)
    np.testing.assert_array_equal(qs, qid)
    h = nightly.content_hash(day)
    assert s.batches[-1]["batch_id"] == h
    assert all(e["batch_id"] == f"{h}#{e['rows'][0]}" for e in s.batches[:-1])
    assert s.verify() == len(s.batches)

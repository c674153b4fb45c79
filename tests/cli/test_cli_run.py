"""Run files: ``ingest --docids`` keeps LETOR's ``#docid = ...`` ids in the store; ``predict --run`` writes a
TREC run."""
from __future__ import annotations

import re
import tarfile

import numpy as np
import pytest

from _cli_inproc import run_cli

import streamrank as sr
from streamrank.datasets._paths import data_path
from streamrank.io.schema import StoreFormatError

ARCHIVE = data_path("letor", "MQ2008_QueryLevelNorm.tar.gz")
MEMBER = "MQ2008/Fold1/test.txt"
pytestmark = pytest.mark.skipif(not ARCHIVE.exists(), reason="MQ2008 archive not available")
ROWS = 600


run = run_cli   # (exit code, stdout, stderr) of cli.main in this process


def _raw_lines(n):
    """(qid, docid) of the member's first lines, split by hand (no streamrank code)."""
    with tarfile.open(ARCHIVE) as tf:
        text = tf.extractfile(MEMBER).read().decode()
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        body, comment = line.split("#", 1)
        out.append((int(re.search(r"qid:(\d+)", body).group(1)), comment.split("docid =")[1].split()[0]))
        if len(out) >= n + 2000:
            break
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    rc, _, err = run("ingest", f"{ARCHIVE}:{MEMBER}", "--store", d / "test.zarr", "--limit", ROWS, "--docids",
                     "--chunk-mb", "0.05", "-q")                    # several chunks: ids follow the parser
    assert rc == 0, err
    rc, _, err = run("ingest", f"{ARCHIVE}:{MEMBER}", "--store", d / "plain.zarr", "--limit", ROWS, "-q")
    assert rc == 0, err
    rc, _, err = run("fit", "--store", d / "test.zarr", "--model", d / "m.zarr", "--learner", "rankrls", "-q")
    assert rc == 0, err
    return d


@pytest.mark.slow   # CLI ingest, fit and predict: ~1.4 s warm
def test_ingest_keeps_the_letor_doc_ids(data):
    store = sr.GroupStore.open(data / "test.zarr")
    assert store.has_docids and len(store.batches) > 1
    raw = _raw_lines(store.n_rows)[:store.n_rows]
    assert store.docids() == [d for _, d in raw]
    assert list(np.repeat(store.qid, np.diff(store.group_ptr))) == [q for q, _ in raw]
    assert store.verify() == len(store.batches)
    # ingesting the same file again appends nothing (batch ids), ids included
    rc, _, err = run("ingest", f"{ARCHIVE}:{MEMBER}", "--store", data / "test.zarr", "--limit", ROWS, "--docids",
                     "--chunk-mb", "0.05", "-q")
    assert rc == 0, err
    assert sr.GroupStore.open(data / "test.zarr").docids() == store.docids()


def _parse_run(path):
    rows = [ln.split() for ln in path.read_text().splitlines()]
    assert all(len(r) == 6 and r[1] == "Q0" for r in rows)
    return rows


# the module's fixture ingests and fits MQ2008 through the CLI (12 s wall under load 16 with the first test):
# the quick loop leaves out every test that needs it and keeps the doc-id checks of the store below
@pytest.mark.slow
@pytest.mark.parametrize("which", ["test", "plain"])
def test_predict_run_is_a_trec_run_of_the_scores(data, tmp_path, which):
    out = tmp_path / "run.trec"
    rc, stdout, err = run("predict", "--model", data / "m.zarr", "--store", data / f"{which}.zarr", "--run", out,
                          "--run-tag", "mq_rls", "--max-rows", 100)
    assert rc == 0, err
    store = sr.GroupStore.open(data / f"{which}.zarr")
    model = sr.load(data / "m.zarr")
    X = np.vstack([b.X for b in store.blocks()])
    scores = model.predict(X)
    names = store.docids() if which == "test" else [f"row{r}" for r in range(store.n_rows)]
    qid_rows = np.repeat(store.qid, np.diff(store.group_ptr))
    row_of = {(int(qid_rows[r]), n): r for r, n in enumerate(names)}   # an id may recur in another query
    assert len(row_of) == store.n_rows
    lines = _parse_run(out)
    assert len(lines) == store.n_rows and {r[5] for r in lines} == {"mq_rls"}
    seen_q = []
    for q in dict.fromkeys(r[0] for r in lines):
        mine = [r for r in lines if r[0] == q]
        seen_q.append(int(q))
        rows = [row_of[int(q), r[2]] for r in mine]
        assert sorted(rows) == list(np.flatnonzero(qid_rows == int(q)))        # every document of the query once
        assert [int(r[3]) for r in mine] == list(range(1, len(mine) + 1))
        got = np.array([float(r[4]) for r in mine])
        np.testing.assert_allclose(got, scores[rows], rtol=1e-12)    # 17 digits (BLAS may cut blocks otherwise)
        assert np.all(np.diff(got) <= 0)
    assert seen_q == list(store.qid)


@pytest.mark.slow   # the module's CLI fit (see above)
def test_run_needs_an_output_and_refuses_tuple_models(data, tmp_path):
    rc, _, err = run("predict", "--model", data / "m.zarr", "--store", data / "test.zarr")
    assert rc == 2 and "--run" in err
    rc, _, err = run("predict", "--model", data / "m.zarr", "--store", data / "test.zarr", "--run",
                     tmp_path / "r.trec", "--run-tag", "two words")
    assert rc == 4 and not (tmp_path / "r.trec").exists()


def test_store_doc_ids_are_checked_and_checksummed(tmp_path):
    s = sr.GroupStore.create(tmp_path / "s.zarr", 2, docids=True)
    with pytest.raises(ValueError, match="pass docid="):
        s.append(np.ones((2, 2)), [1.0, 0.0], [1, 1])
    with pytest.raises(ValueError, match=r"docid\[1\]"):
        s.append(np.ones((2, 2)), [1.0, 0.0], [1, 1], docid=["a", "b c"])
    with pytest.raises(ValueError, match="2 rows"):
        s.append(np.ones((2, 2)), [1.0, 0.0], [1, 1], docid=["a"])
    assert s.n_rows == 0
    s.append(np.ones((3, 2)), [1.0, 0.0, 2.0], [1, 1, 2], docid=["d1", "d2", "dé3"])
    assert sr.GroupStore.open(tmp_path / "s.zarr").docids(1, 3) == ["d2", "dé3"]
    arr = s._arrays["docid/bytes"]
    raw = np.asarray(arr[:])
    raw[0] = ord("x")
    arr[:] = raw                                   # damage a committed id behind the store's back
    with pytest.raises(StoreFormatError, match="checksum"):
        sr.GroupStore.open(tmp_path / "s.zarr").verify()
    plain = sr.GroupStore.create(tmp_path / "p.zarr", 2)
    with pytest.raises(ValueError, match="keeps no document ids"):
        plain.append(np.ones((1, 2)), [1.0], [1], docid=["a"])


@pytest.mark.slow   # the module's CLI fit (see above)
@pytest.mark.parametrize("which", ["test", "plain"])
def test_predict_qrels_writes_the_stores_labels_beside_the_run(data, tmp_path, which):
    """``predict --run --qrels``: the store's labels as TREC judgments, each row named as the run names it (the
    LETOR ``#docid`` or ``row<N>``), so ``evaluate --run --qrels`` scores the run with nothing made by hand."""
    run_path, qrels = tmp_path / "run.txt", tmp_path / "qrels.txt"
    rc, _, err = run("predict", "--model", data / "m.zarr", "--store", data / f"{which}.zarr", "--run", run_path,
                     "--qrels", qrels)
    assert rc == 0, err
    raw = _raw_lines(ROWS)
    with tarfile.open(ARCHIVE) as tf:
        labels = [int(ln.split()[0]) for ln in tf.extractfile(MEMBER).read().decode().splitlines() if ln.strip()]
    store = sr.GroupStore.open(data / f"{which}.zarr")
    names = [d for _, d in raw][:store.n_rows] if which == "test" else [f"row{r}" for r in range(store.n_rows)]
    want = [f"{q} 0 {d} {v}" for (q, _), d, v in zip(raw[:store.n_rows], names, labels, strict=False)]
    assert qrels.read_text().splitlines() == want
    assert {(r[0], r[2]) for r in _parse_run(run_path)} == {(w.split()[0], w.split()[2]) for w in want}
    rc, out, err = run("evaluate", "--run", run_path, "--qrels", qrels, "--metrics", "ndcg@10,map", "--gain",
                       "linear", "--empty", "zero", "--json")
    assert rc == 0, err
    import json

    got = json.loads(out)
    assert got["n_queries"]["ndcg@10"] == store.n_groups and 0 < got["metrics"]["ndcg@10"] <= 1


def test_qrels_needs_a_run(tmp_path):
    rc, _, err = run("predict", "--model", tmp_path / "m.zarr", "--store", tmp_path / "s.zarr", "--out",
                     tmp_path / "s.npy", "--qrels", tmp_path / "q.txt")
    assert rc == 2 and "--run" in err and not (tmp_path / "q.txt").exists()

"""``predict --run`` from a file names documents by the file's own ids (issue 24), and a Parquet file without
a label column is predicted (evaluate still needs the labels and says so).

The reference for the doc ids is the store path: the same MQ2008 slice ingested with ``--docids`` and
predicted with ``--run`` from the store, whose ids are read by the ingest's own docid reader.
"""
from __future__ import annotations

import contextlib
import io
import re
import tarfile

import numpy as np
import pytest

import streamrank as sr
from streamrank import cli
from streamrank.datasets._paths import data_path

ARCHIVE = data_path("letor", "MQ2008_QueryLevelNorm.tar.gz")


def main(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def mq(tmp_path_factory):
    if not ARCHIVE.exists():
        pytest.skip("MQ2008 archive not available")
    d = tmp_path_factory.mktemp("mqids")
    with tarfile.open(ARCHIVE) as tf:
        lines = tf.extractfile("MQ2008/Fold1/test.txt").read().decode().splitlines(keepends=True)
    q, n = None, 0
    for n, line in enumerate(lines):         # whole queries, about 300 rows
        if n >= 300 and line.split()[1] != q:
            break
        q = line.split()[1]
    assert "#docid = GX" in lines[0]
    (d / "test.txt").write_text("".join(lines[:n]))
    assert main("ingest", d / "test.txt", "--store", d / "test.zarr", "--docids", "-q")[0] == 0
    assert main("fit", "--store", d / "test.zarr", "--model", d / "m.zarr", "--learner", "rankrls", "-q")[0] == 0
    return d


@pytest.mark.slow   # CLI fit and predict on a LETOR file: 3.2 s wall under load 11
def test_run_from_a_letor_file_names_documents_by_their_docid_comments(mq):
    d = mq
    assert main("predict", "--model", d / "m.zarr", "--store", d / "test.zarr", "--run", d / "store.trec",
                "-q")[0] == 0
    rc, out, err = main("predict", "--model", d / "m.zarr", "--data", d / "test.txt", "--run", d / "file.trec")
    assert rc == 0, err
    assert "doc ids from the file)" in out
    want = (d / "store.trec").read_text()
    assert (d / "file.trec").read_text() == want            # the same ids, ranks and scores as from the store
    ids = {line.split()[2] for line in want.splitlines()}
    assert all(i.startswith("GX") for i in ids) and not any(i.startswith("row") for i in ids)
    comments = re.findall(r"#docid = (\S+)", (d / "test.txt").read_text())
    assert ids == set(comments)


@pytest.mark.slow   # the module's MQ2008 CLI fit, then predict: 3.7 s wall under load 15
def test_rows_without_a_docid_comment_are_named_by_their_row(mq, tmp_path):
    d = mq
    lines = (d / "test.txt").read_text().splitlines(keepends=True)
    cut = {1, 5, len(lines) - 1}                             # these lines lose their comment
    (tmp_path / "mixed.txt").write_text("".join(line.split("#")[0].rstrip() + "\n" if i in cut else line
                                                for i, line in enumerate(lines)))
    (tmp_path / "none.txt").write_text("".join(line.split("#")[0].rstrip() + "\n" for line in lines))
    rc, out, err = main("predict", "--model", d / "m.zarr", "--data", tmp_path / "mixed.txt", "--run",
                        tmp_path / "mixed.trec")
    assert rc == 0, err
    assert f"row numbers for {len(cut)} rows without one" in out
    rc, out, err = main("predict", "--model", d / "m.zarr", "--data", tmp_path / "none.txt", "--run",
                        tmp_path / "none.trec")
    assert rc == 0 and "row numbers of the file as doc ids (no doc ids in it)" in out, err
    score = {}                                               # (qid, name) -> score of each run line
    for name in ("mixed", "none"):
        score[name] = {(f[0], f[2]): f[4] for f in
                       (line.split() for line in (tmp_path / f"{name}.trec").read_text().splitlines())}
    docid = re.findall(r"#docid = (\S+)", (d / "test.txt").read_text())
    qid = [line.split()[1][4:] for line in lines]
    for r in range(len(lines)):                              # each row: its id, or row<N> with N its row
        name = f"row{r}" if r in cut else docid[r]
        assert score["mixed"][(qid[r], name)] == score["none"][(qid[r], f"row{r}")]
    assert len(score["mixed"]) == len(lines)


@pytest.mark.slow   # the module's MQ2008 CLI fit, a parquet table, predict: 3.0 s wall under load 15
def test_parquet_without_a_label_is_predicted_and_names_rows_by_the_docid_column(mq, tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    d = mq
    store = sr.GroupStore.open(d / "test.zarr")
    X = np.concatenate([b.X for b in store.blocks()])
    qid = np.repeat(store.qid, np.diff(store.group_ptr))
    docid = store.docids()
    cols = {f"f{j + 1}": X[:, j] for j in range(X.shape[1])}
    pq.write_table(pa.table({"query": qid, "doc": docid, **cols}), tmp_path / "day.parquet", row_group_size=70)
    assert main("predict", "--model", d / "m.zarr", "--store", d / "test.zarr", "--out", tmp_path / "a.npy",
                "--run", tmp_path / "store.trec", "-q")[0] == 0
    rc, _, err = main("predict", "--model", d / "m.zarr", "--data", tmp_path / "day.parquet", "--qid", "query",
                      "--docid-column", "doc", "--out", tmp_path / "b.npy", "--run", tmp_path / "file.trec", "-q")
    assert rc == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "b.npy"), np.load(tmp_path / "a.npy"))
    assert (tmp_path / "file.trec").read_text() == (tmp_path / "store.trec").read_text()
    rc, _, err = main("predict", "--model", d / "m.zarr", "--data", tmp_path / "day.parquet", "--qid", "query",
                      "--features-from-prefix", "f", "--run", tmp_path / "rows.trec", "-q")   # row numbers
    assert rc == 0, err
    assert {line.split()[2] for line in (tmp_path / "rows.trec").read_text().splitlines()} == \
        {f"row{r}" for r in range(len(qid))}
    # evaluating needs the labels, and says so; so does predict without the query ids
    rc, _, err = main("evaluate", "--model", d / "m.zarr", "--data", tmp_path / "day.parquet", "--qid", "query")
    assert rc == 4 and "evaluating needs the labels" in err and "--label COL" in err, err
    rc, _, err = main("predict", "--model", d / "m.zarr", "--data", tmp_path / "day.parquet",
                      "--out", tmp_path / "c.npy")
    assert rc == 4 and "--qid COL" in err and not (tmp_path / "c.npy").exists(), err

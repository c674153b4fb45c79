"""The CLI refuses what it cannot do (issue 24): options a learner ignores, overwriting a model, padding a
text with fewer features, formats told by content, 1-based lines; and predict/evaluate straight from files.

Most commands run in-process (``cli.main``, the console script's code); the files are tiny LETOR texts
written here and a MQ2008 slice read from the archive beside the checkout.
"""
from __future__ import annotations

import tarfile

import numpy as np
import pytest

from _cli_inproc import run_cli

import streamrank as sr
from streamrank.datasets._paths import data_path

ARCHIVE = data_path("letor", "MQ2008_QueryLevelNorm.tar.gz")


main = run_cli   # (exit code, stdout, stderr) of cli.main in this process


THREE = "1 qid:1 1:0.5 2:1 3:1\n0 qid:1 1:0.1 2:0 3:0\n2 qid:2 1:0.3 2:0.2 3:1\n1 qid:2 1:0.3 2:0.2 3:0\n"
TWO = "1 qid:5 1:0.5 2:1\n0 qid:5 1:0.1 2:0\n"


@pytest.fixture
def small(tmp_path):
    (tmp_path / "three.txt").write_text(THREE)
    (tmp_path / "two.txt").write_text(TWO)
    assert main("ingest", tmp_path / "three.txt", "--store", tmp_path / "s.zarr", "-q")[0] == 0
    return tmp_path


@pytest.mark.parametrize("extra,words", [
    (["--learner", "rankrls", "--gamma", "0.5"], "--gamma does not apply to --learner rankrls"),
    (["--learner", "rankrls", "--gamma", "1"], "--gamma does not apply"),            # even the default value
    (["--learner", "cg", "--n-basis", "10"], "--n-basis does not apply to --learner cg"),
    (["--learner", "kernel", "--degree", "3"], "--degree does not apply to --kernel rbf"),
    (["--learner", "kernel", "--kernel", "linear", "--gamma", "2"], "--gamma does not apply to --kernel linear"),
    (["--learner", "sgd-pairwise", "--alpha", "2"], "its regularization is --l1 / --l2"),
    (["--learner", "sgd-bilinear", "--steps", "5", "--tol", "1e-3"], "--tol does not apply"),
    (["--learner", "rankrls", "--checkpoint-every", "5"], "--checkpoint-every does not apply"),
    (["--learner", "rankrls", "--scoring", "ndcg@5"], "--scoring is the cross-validation score"),
])
def test_options_a_learner_ignores_are_refused_before_reading(tmp_path, extra, words):
    # the store does not exist: the refusal comes before any data is opened
    rc, _, err = main("fit", "--store", tmp_path / "none.zarr", "--model", tmp_path / "m.zarr", *extra)
    assert rc == 2 and words in err and err.count("\n") == 1, err
    assert not (tmp_path / "m.zarr").exists()


def test_options_that_apply_are_taken(small):
    rc, _, err = main("fit", "--store", small / "s.zarr", "--model", small / "k.zarr", "--learner", "kernel",
                      "--kernel", "poly", "--degree", "3", "--coef0", "1", "--gamma", "0.5", "-q")
    assert rc == 0, err
    assert sr.load(small / "k.zarr").get_params()["degree"] == 3


def test_fit_onto_an_existing_model_needs_overwrite(small):
    m = small / "m.zarr"
    assert main("fit", "--store", small / "s.zarr", "--model", m, "--learner", "rankrls", "--alpha", "2", "-q")[0] == 0
    before = (m / "zarr.json").read_bytes()
    rc, _, err = main("fit", "--store", small / "s.zarr", "--model", m, "--learner", "rankrls", "--alpha", "8", "-q")
    assert rc == 5 and "pass --overwrite" in err
    assert (m / "zarr.json").read_bytes() == before and sr.load(m).alpha == 2.0
    rc, _, err = main("cv", "--store", small / "s.zarr", "--learner", "rankrls", "--alphas", "1,2", "--folds", "query",
                      "--model", m, "-q")
    assert rc == 5 and "pass --overwrite" in err
    rc, _, err = main("fit", "--store", small / "s.zarr", "--model", m, "--learner", "rankrls", "--alpha", "8",
                      "--overwrite", "-q")
    assert rc == 0, err
    assert sr.load(m).alpha == 8.0


def test_fewer_features_than_the_store_is_an_error_unless_padded_on_purpose(small):
    s = small / "s.zarr"
    rc, _, err = main("ingest", small / "two.txt", "--store", s)
    assert rc == 4 and "has 2 features" in err and "has 3" in err and "--n-features 3" in err, err
    assert sr.GroupStore.open(s).n_rows == 4                          # nothing appended
    rc, _, err = main("ingest", small / "two.txt", "--store", s, "--n-features", "4")
    assert rc == 4 and "holds 3 features" in err
    rc, _, err = main("ingest", small / "two.txt", "--store", s, "--n-features", "3", "-q")
    assert rc == 0, err
    store = sr.GroupStore.open(s)
    assert store.n_rows == 6 and np.all(np.concatenate([b.X for b in store.blocks()])[4:, 2] == 0)
    # a new store takes --n-features as its width
    rc, _, _ = main("ingest", small / "two.txt", "--store", small / "wide.zarr", "--n-features", "5", "-q")
    assert rc == 0 and sr.GroupStore.open(small / "wide.zarr").n_features == 5


def test_a_failed_first_ingest_leaves_nothing_and_names_1_based_lines(tmp_path):
    # qid 1 comes back on line 4: the store's append refuses it (after creating the store)
    (tmp_path / "recur.txt").write_text("1 qid:1 1:0.5\n0 qid:1 1:0.1\n2 qid:2 1:0.3\n1 qid:1 1:0.3\n")
    rc, _, err = main("ingest", tmp_path / "recur.txt", "--store", tmp_path / "s.zarr")
    assert rc == 4 and "(line 4)" in err and "at line 1 and again at line 4" in err and "at row" not in err, err
    assert not (tmp_path / "s.zarr").exists()
    (tmp_path / "bad.txt").write_text("1 qid:1 1:0.5\n0 qid:1 1:0.1\nx qid:2 1:0.3\n")
    rc, _, err = main("ingest", tmp_path / "bad.txt", "--store", tmp_path / "s.zarr")
    assert rc == 4 and "bad.txt:3:" in err and not (tmp_path / "s.zarr").exists()
    # a second source failing after the first committed: the store keeps the first (a re-run resumes)
    (tmp_path / "ok.txt").write_text("1 qid:7 1:0.5\n0 qid:7 1:0.1\n")
    rc, _, _ = main("ingest", tmp_path / "ok.txt", tmp_path / "recur.txt", "--store", tmp_path / "s.zarr")
    assert rc == 4 and sr.GroupStore.open(tmp_path / "s.zarr").n_rows == 2


def test_format_by_content_lists_the_supported_formats_never_bytes(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    t = pa.table({"label": [1.0, 0, 2, 1], "query": [1, 1, 2, 2], "f_a": [0.5, 0.1, 0.3, 0.2],
                  "f_b": [1.0, 0, 0.2, 0.1]})
    pq.write_table(t, tmp_path / "day.parquet")
    pq.write_table(t, tmp_path / "day.txt")                     # a Parquet file with a text file's name
    np.save(tmp_path / "a.npy", np.zeros(3))
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)) * 4)
    for src, extra, words in [("day.parquet", ["--format", "letor"], "it is a Parquet file"),
                              ("a.npy", [], "a .npy array"), ("blob.bin", [], "binary data")]:
        rc, _, err = main("ingest", tmp_path / src, "--store", tmp_path / "s.zarr", *extra)
        assert rc == 4 and words in err and "supported: LETOR/svmlight text" in err, err
        assert "PAR1" not in err and "\\x" not in err and "NUMPY" not in err
        assert not (tmp_path / "s.zarr").exists()
    rc, _, err = main("ingest", tmp_path / "day.txt", "--store", tmp_path / "s.zarr")
    assert rc == 4 and "is Parquet: name the label and query id columns" in err     # told by content
    rc, _, err = main("ingest", tmp_path / "day.txt", "--store", tmp_path / "s.zarr", "--label", "label",
                      "--qid", "query", "-q")
    assert rc == 0 and sr.GroupStore.open(tmp_path / "s.zarr").n_rows == 4


def test_plot_suggests_only_options_the_learner_takes(small):
    for learner, refused, advised in [("sgd-pairwise", "--checkpoint-every", "records no curve"),
                                      ("rankrls", "--checkpoint-every", "--learner rankrls --alphas GRID --cv K")]:
        m = small / f"{learner}.zarr"
        assert main("fit", "--store", small / "s.zarr", "--model", m, "--learner", learner, "-q")[0] == 0
        rc, _, err = main("plot", "--model", m, "--out", small / "p.png")
        assert rc == 4 and advised in err and refused not in err, err


# ------------------------------------------------------------ predict/evaluate from files
@pytest.fixture(scope="module")
def mq_slice(tmp_path_factory):
    if not ARCHIVE.exists():
        pytest.skip("MQ2008 archive not available")
    d = tmp_path_factory.mktemp("mq")
    with tarfile.open(ARCHIVE) as tf:
        lines = tf.extractfile("MQ2008/Fold1/test.txt").read().decode().splitlines(keepends=True)
    q, n = None, 0
    for n, line in enumerate(lines):         # whole queries, about 400 rows
        if n >= 400 and line.split()[1] != q:
            break
        q = line.split()[1]
    (d / "test.txt").write_text("".join(lines[:n]))
    assert main("ingest", d / "test.txt", "--store", d / "test.zarr", "-q")[0] == 0
    assert main("fit", "--store", d / "test.zarr", "--model", d / "m.zarr", "--learner", "rankrls", "-q")[0] == 0
    return d


@pytest.mark.slow   # CLI fit, evaluate and predict on a LETOR file: 2.2 s wall under load 11
def test_evaluate_and_predict_a_letor_file_directly(mq_slice):
    d = mq_slice
    rc, want, _ = main("evaluate", "--model", d / "m.zarr", "--store", d / "test.zarr", "--json")
    assert rc == 0
    rc, got, err = main("evaluate", "--model", d / "m.zarr", "--data", d / "test.txt", "--json", "-q")
    assert rc == 0, err
    import json

    assert json.loads(got)["metrics"] == pytest.approx(json.loads(want)["metrics"], rel=1e-12)
    assert json.loads(got)["n_queries"] == json.loads(want)["n_queries"]
    assert main("predict", "--model", d / "m.zarr", "--store", d / "test.zarr", "--out", d / "a.npy", "-q")[0] == 0
    rc, _, err = main("predict", "--model", d / "m.zarr", "--data", d / "test.txt", "--out", d / "b.npy",
                      "--run", d / "b.trec", "-q")
    assert rc == 0, err
    np.testing.assert_array_equal(np.load(d / "b.npy"), np.load(d / "a.npy"))
    assert len((d / "b.trec").read_text().splitlines()) == len(np.load(d / "a.npy"))
    assert sorted(p.name for p in d.iterdir()) == ["a.npy", "b.npy", "b.trec", "m.zarr", "test.txt", "test.zarr"]


def test_evaluate_a_parquet_file_directly_matches_the_store(mq_slice, tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    d = mq_slice
    store = sr.GroupStore.open(d / "test.zarr")
    X = np.concatenate([b.X for b in store.blocks()])
    y = np.concatenate([b.y for b in store.blocks()])
    qid = np.repeat(store.qid, np.diff(store.group_ptr))
    cols = {f"f{j + 1}": X[:, j] for j in range(X.shape[1])}
    pq.write_table(pa.table({"rel": y, "query": qid, **cols}), tmp_path / "test.parquet", row_group_size=100)
    rc, want, _ = main("evaluate", "--model", d / "m.zarr", "--store", d / "test.zarr", "--json")
    rc, got, err = main("evaluate", "--model", d / "m.zarr", "--data", tmp_path / "test.parquet", "--label", "rel",
                        "--qid", "query", "--json", "-q")
    assert rc == 0, err
    import json

    assert json.loads(got)["metrics"] == pytest.approx(json.loads(want)["metrics"], rel=1e-12)
    rc, _, err = main("evaluate", "--model", d / "m.zarr", "--data", tmp_path / "test.parquet")
    assert rc == 4 and "--label COL --qid COL" in err


def test_a_wider_text_into_an_existing_store_blames_the_store(tmp_path):
    """A 3-feature text ingested into an existing 2-feature store: the error says the store holds 2 features
    (the text is well formed; it was meant for another store) and names the line; nothing is appended."""
    (tmp_path / "two.txt").write_text(TWO)
    (tmp_path / "three.txt").write_text(THREE)
    rc, _, err = main("ingest", tmp_path / "two.txt", "--store", tmp_path / "s.zarr", "-q")
    assert rc == 0, err
    rc, _, err = main("ingest", tmp_path / "three.txt", "--store", tmp_path / "s.zarr")
    assert rc == 4, err
    assert f"the existing store {tmp_path / 's.zarr'} holds 2 features" in err
    assert "three.txt:1: feature index out of range" in err and "another --store" in err
    assert sr.GroupStore.open(tmp_path / "s.zarr").n_rows == 2


@pytest.mark.parametrize("name,text,what", [("f.csv", "label,qid,f1\n1,2,0.5\n", "CSV"),
                                            ("f.tsv", "1\t2\t0.5\n0\t2\t0.1\n", "TSV")])
def test_a_delimited_table_is_an_unsupported_format(tmp_path, name, text, what):
    """A CSV/TSV file is refused as a format streamrank does not read (exit 6, naming Parquet), not parsed as
    LETOR text with a 'bad label'; nothing is created."""
    (tmp_path / name).write_text(text)
    rc, _, err = main("ingest", tmp_path / name, "--store", tmp_path / "s.zarr")
    assert rc == 6 and f"looks like {what}" in err and "Parquet" in err and "bad label" not in err, err
    assert not (tmp_path / "s.zarr").exists()


def test_a_mistyped_parquet_column_is_found_among_all_columns(tmp_path):
    """The closest column names come first and every column is listed (it was the first 10: the one meant, the
    30th, was hidden)."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    cols = {f"f_{j:02d}": np.arange(4.0) for j in range(29)}
    pd.DataFrame({**cols, "query_id": ["a", "a", "b", "b"], "label": [1.0, 0, 1, 0]}).to_parquet(tmp_path / "t.parquet")
    rc, _, err = main("ingest", tmp_path / "t.parquet", "--store", tmp_path / "s.zarr", "--label", "label",
                      "--qid", "query_idd")
    assert rc == 4 and "did you mean ['query_id']" in err and "'f_28'" in err, err


def test_info_lists_unnamed_weights_by_column(tmp_path):
    """A model without feature names: its weights are listed by column and info says export needs names (it
    showed made-up names x0, x1, ... that export then said did not exist)."""
    X, y, qid = np.random.default_rng(0).normal(size=(40, 3)), np.arange(40) % 3, np.repeat(np.arange(4), 10)
    sr.save(sr.RankRLS(alpha=1.0).fit(X, y, qid), tmp_path / "m.zarr")
    rc, out, err = main("info", "--model", tmp_path / "m.zarr")
    assert rc == 0, err
    assert "column 0" in out and " x0" not in out and "needs --feature-names" in out


def test_a_typo_in_the_model_directory_creates_nothing(tmp_path, small):
    """``fit --model modles/m.zarr`` (a mistyped directory): exit 3 naming the directory; no directory tree is
    created behind the user's back."""
    rc, _, err = main("fit", "--store", small / "s.zarr", "--model", tmp_path / "modles" / "m.zarr", "--learner",
                      "rankrls")
    assert rc == 3 and "modles" in err and "does not exist" in err, err
    assert not (tmp_path / "modles").exists()

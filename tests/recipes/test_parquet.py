"""Parquet path on real data (issue 18): MQ2008 written as Parquet with string query ids.

The model fitted from the Parquet files (through ``streamrank ingest`` and
through pandas) equals the one fitted from the LETOR text to 1e-10.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

from _cli_inproc import run_cli

import streamrank as sr
from streamrank.datasets import letor
from recipes_testdata import need
from _lazy_modules import LazyModule, needs

pa = LazyModule("pyarrow")          # imported by the first test that uses it, not at collection
pq = LazyModule("pyarrow.parquet")
pd = LazyModule("pandas")
pytestmark = needs("pyarrow", "pandas")

LIMIT = 2500   # rows of MQ2008 fold 1 train (whole queries): ~60 queries


def _run(*args):
    rc, out, err = run_cli(*args)
    assert rc == 0, err
    return out


def _fails(*args):
    rc, _, err = run_cli(*args)
    assert rc != 0
    return err


@pytest.fixture(scope="module")
def mq(tmp_path_factory):
    archive = need("letor/MQ2008_QueryLevelNorm.tar.gz")
    member = letor.letor_member("MQ2008", 1, "train")
    tmp = tmp_path_factory.mktemp("mqpq")
    parts = tmp / "parts"
    files = letor.write_letor_parquet(parts, archive, member=member, n_features=46, rows_per_file=700,
                                      row_group_rows=128, limit_rows=LIMIT)
    text_store = letor.write_letor_store(tmp / "text.zarr", archive, member=member, n_features=46,
                                         limit_rows=LIMIT)
    X, y, q = map(np.concatenate, zip(*letor.iter_letor(archive, member=member, n_features=46,
                                                       limit_rows=LIMIT)))
    return dict(tmp=tmp, parts=parts, files=files, text_store=text_store, X=X, y=y, qid=q, archive=archive,
                member=member)


@pytest.mark.slow   # the module's MQ2008 parquet files: 9.9 s wall under load 11 (~3 CPU-s)
def test_parquet_files_have_string_qids_and_split_queries(mq):
    t = pq.read_table(mq["parts"])
    assert t.schema.field("qid").type == pa.string()
    assert t.column_names[:3] == ["qid", "label", "f_1"] and t.num_rows == len(mq["y"])
    assert len(mq["files"]) >= 3
    # queries straddle row groups and files: the hard case of the ingest
    first = pq.ParquetFile(mq["files"][0])
    second = pq.ParquetFile(mq["files"][1])
    last_q = first.read_row_group(first.num_row_groups - 1).column("qid")[-1].as_py()
    assert second.read_row_group(0).column("qid")[0].as_py() == last_q


@pytest.mark.slow   # ingests of a table and of the LETOR text: 3.1 s wall under load 11
def test_ingest_parquet_equals_letor_text_to_1e_10(mq):
    store_path = mq["tmp"] / "pq.zarr"
    out = _run("ingest", mq["parts"], "--store", store_path, "--label", "label", "--qid", "qid",
               "--max-rows", 300)
    assert f"ingested {len(mq['y']):,} rows" in out
    store = sr.GroupStore.open(store_path)
    text = mq["text_store"]
    assert store.n_rows == text.n_rows and store.n_groups == text.n_groups
    assert list(store.qid) == [f"q{int(v)}" for v in text.qid]          # the ids as written, round-trip
    assert store.feature_names == [f"f_{j}" for j in range(1, 47)]
    a = sr.RankRLS(alpha=0.5).fit(store)
    b = sr.RankRLS(alpha=0.5).fit(text)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-10, atol=1e-12)
    assert list(a.feature_names_in_) == store.feature_names                 # store names reach the model
    # per-query metrics keyed by the original string id
    res = sr.metrics.evaluate(store, a, metrics=("ndcg",), keep_per_query=True)["ndcg@10"]
    assert res.qid[0] == store.qid[0] and isinstance(res.qid[0], str)
    # idempotent per file content: a second run adds nothing
    again = _run("ingest", mq["parts"], "--store", store_path, "--label", "label", "--qid", "qid",
                 "--max-rows", 300)
    assert "ingested 0 rows" in again and sr.GroupStore.open(store_path).n_rows == store.n_rows


@pytest.mark.slow   # two fits on MQ2008 tables: 0.9 s wall under load 11, and the module's fixture
def test_fit_from_pandas_parquet_equals_letor_text(mq):
    df = pd.read_parquet(mq["parts"])
    a = sr.RankRLS(alpha=0.5).fit(df.drop(columns=["qid", "label"]), df["label"], qid=df["qid"].to_numpy())
    with pytest.raises(ValueError, match="column named 'qid' besides the qid= given"):
        sr.RankRLS(alpha=0.5).fit(df, df["label"], qid=df["qid"].to_numpy())
    b = sr.RankRLS(alpha=0.5).fit(np.asarray(mq["X"], dtype=np.float32), mq["y"], mq["qid"])
    # pandas hands qid/label as columns of the same frame: they must not become features
    with pytest.raises(ValueError, match="column named 'qid' but qid= was not given"):
        sr.RankRLS(alpha=0.5).fit(df.drop(columns="label"), df["label"])
    c = sr.RankRLS(alpha=0.5).fit(df, "label", qid="qid")
    np.testing.assert_allclose(c.coef_, b.coef_, rtol=1e-10, atol=1e-12)
    assert list(c.feature_names_in_) == [f"f_{j}" for j in range(1, 47)]
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-10, atol=1e-12)
    # an Arrow table and a reordered frame predict the same
    t = pq.read_table(mq["parts"])
    np.testing.assert_allclose(c.predict(t.drop_columns(["qid", "label"])), c.predict(mq["X"]), rtol=1e-12)


@pytest.mark.slow   # the recipe CLI and an append: 2.2 s wall under load 11
def test_recipe_cli_and_store_append_of_a_table(mq, recipe, tmp_path):
    rec = recipe("letor")
    out = tmp_path / "one.parquet"
    assert rec.main(["--dataset", "MQ2008", "--fold", "1", "--split", "train", "--limit", "400",
                     "--to-parquet", "--out", str(out), "--data-dir", str(mq["archive"].parent)]) == 0
    t = pq.read_table(out)
    store = sr.GroupStore.create(tmp_path / "s.zarr", 46, feature_names=[f"f_{j}" for j in range(46, 0, -1)])
    assert store.append(t, y="label", qid="qid", batch_id="day-1")
    X = np.column_stack([t.column(f"f_{j}").to_numpy() for j in range(46, 0, -1)])
    blocks = list(store.blocks(max_rows=10**6))
    np.testing.assert_array_equal(blocks[0].X, X)                           # matched by name, not position
    assert list(store.qid) == list(dict.fromkeys(t.column("qid").to_pylist()))


def test_parquet_errors_are_clear(tmp_path, monkeypatch):
    t = pa.table({"qid": ["a", "a", "b", "a"], "label": [1.0, 0, 1, 0], "f_1": [1.0, 2, 3, 4],
                  "f_2": pa.array([1.0, 2, 3, 4], pa.float32())})
    pq.write_table(t, tmp_path / "bad.parquet", row_group_size=2)
    err = _fails("ingest", tmp_path / "bad.parquet", "--store", tmp_path / "s.zarr", "--label", "label",
                 "--qid", "qid", "--max-rows", 1)
    assert "qid 'a' (batch row 0) is already in batch 'bad.parquet@" in err
    err = _fails("ingest", tmp_path / "bad.parquet", "--store", tmp_path / "t.zarr")
    assert "name the label and query id columns with --label COL --qid COL" in err
    err = _fails("ingest", tmp_path / "bad.parquet", "--store", tmp_path / "t.zarr", "--label", "label",
                 "--qid", "query")
    assert "--qid column 'query' is not in the file" in err
    # --features and --features-from-prefix select and order the columns
    good = pa.table({"qid": ["a", "a", "b"], "label": [1.0, 0, 1], "f_1": [1.0, 2, 3], "f_2": [4.0, 5, 6],
                     "other": [7.0, 8, 9]})
    pq.write_table(good, tmp_path / "good.parquet")
    _run("ingest", tmp_path / "good.parquet", "--store", tmp_path / "u.zarr", "--label", "label",
         "--qid", "qid", "--features", "f_2,f_1")
    assert sr.GroupStore.open(tmp_path / "u.zarr").feature_names == ["f_2", "f_1"]
    _run("ingest", tmp_path / "good.parquet", "--store", tmp_path / "v.zarr", "--label", "label",
         "--qid", "qid", "--features-from-prefix", "f_", "--sparse")
    v = sr.GroupStore.open(tmp_path / "v.zarr")
    assert v.feature_names == ["f_1", "f_2"] and v.sparse and v.n_rows == 3
    # without pyarrow: one line naming the extra
    monkeypatch.setitem(sys.modules, "pyarrow.dataset", None)
    from streamrank._tables import require_pyarrow

    with pytest.raises(ImportError, match=r"pip install 'streamrank\[parquet\]'"):
        require_pyarrow()

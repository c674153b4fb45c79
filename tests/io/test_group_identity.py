"""String query ids in stores and group identity (batch, qid) vs global (issue 18)."""
import json

import numpy as np
import pytest

import streamrank as sr
from streamrank.io import groups
from streamrank.io.schema import StoreFormatError


def _day(ids, rows=2, n=3, seed=0):
    rng = np.random.default_rng(seed)
    qid = np.repeat(np.asarray(ids, dtype=object), rows)
    X = rng.normal(size=(len(qid), n))
    y = rng.integers(0, 3, size=len(qid)).astype(float)
    return X, y, qid


def test_string_qids_round_trip_and_blocks(tmp_path):
    store = sr.GroupStore.create(tmp_path / "s.zarr", 3)
    X, y, q = _day(["q-ä", "q-b", "long query id " * 5])
    assert store.append(X, y, q, batch_id="d1")
    X2, y2, q2 = _day(["q-c", ""], seed=1)
    store.append(X2, y2, q2, batch_id="d2")
    again = sr.GroupStore.open(tmp_path / "s.zarr")
    assert again.qid_kind == "str"
    assert list(again.qid) == ["q-ä", "q-b", "long query id " * 5, "q-c", ""]
    got = [v for b in again.blocks(max_rows=3) for v in b.qid]
    assert got == list(again.qid)
    assert again.verify() == 2
    # learners fit from the store equal the in-memory fit with the same string ids
    a = sr.RankRLS(alpha=1.0).fit(again)
    b = sr.RankRLS(alpha=1.0).fit(np.vstack([X, X2]), np.concatenate([y, y2]), np.concatenate([q, q2]))
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-6)
    # one kind per store
    with pytest.raises(TypeError, match="holds str query ids; got int ids"):
        store.append(X2, y2, np.repeat([1, 2], 2), batch_id="d3")


def test_batch_identity_is_default_a_recurring_query_is_a_new_group(tmp_path):
    store = sr.GroupStore.create(tmp_path / "s.zarr", 3)
    assert store.group_identity == "batch"
    store.append(*_day(["cheap flights", "hotels"]), batch_id="2024-11-01")
    store.append(*_day(["cheap flights", "cars"], seed=1), batch_id="2024-11-02")
    assert list(store.qid) == ["cheap flights", "hotels", "cheap flights", "cars"]
    assert list(store.group_batches()) == ["2024-11-01"] * 2 + ["2024-11-02"] * 2
    # pieces of one batch (id#i) are one batch: a query may not come back in a later piece
    store.append(*_day(["a", "b"]), batch_id="2024-11-03#0")
    with pytest.raises(ValueError, match=r"qid 'b' \(batch row 2\) is already in batch '2024-11-03' as group 5"):
        store.append(*_day(["c", "b"]), batch_id="2024-11-03#1")
    assert store.n_groups == 6
    # metrics per query follow the same groups: one entry per (batch, qid)
    model = sr.RankRLS(alpha=1.0).fit(store)
    res = sr.metrics.evaluate(store, model, metrics=("ndcg",), keep_per_query=True)["ndcg@10"]
    assert list(res.qid) == list(store.qid)
    with pytest.raises(ValueError, match="'cheap flights' is more than one group"):
        res.by_qid()


def test_global_identity_refuses_a_recurring_query(tmp_path):
    store = sr.GroupStore.create(tmp_path / "s.zarr", 3, group_identity="global")
    store.append(*_day(["x", "y"]), batch_id="d1")
    with pytest.raises(ValueError, match=r"qid 'y' \(batch row 0\) is already in the store as group 1.*"
                                         "group_identity='global'"):
        store.append(*_day(["y"]), batch_id="d2")
    with pytest.raises(ValueError, match="group_identity must be one of"):
        sr.GroupStore.create(tmp_path / "t.zarr", 3, group_identity="day")


def test_duplicate_check_streams_in_bounded_pieces(tmp_path, monkeypatch):
    """The committed ids are never loaded whole: the check reads SCAN_PIECE keys at a time."""
    monkeypatch.setattr(groups, "SCAN_PIECE", 3)
    store = sr.GroupStore.create(tmp_path / "s.zarr", 3, group_identity="global")
    for d in range(4):
        store.append(*_day([f"d{d}-q{i}" for i in range(5)], seed=d), batch_id=f"d{d}")
    reads = []
    real = groups.np.isin

    def spy(a, b, *args, **kw):
        reads.append(len(a))
        return real(a, b, *args, **kw)

    monkeypatch.setattr(groups.np, "isin", spy)
    with pytest.raises(ValueError, match=r"qid 'd2-q4' .* as group 14"):
        store.append(*_day(["new", "d2-q4"]), batch_id="d9")
    assert max(reads) <= 3 and sum(reads) >= 15
    assert store._qid_cache is None   # the store's ids were not loaded into memory


def test_integer_ids_keep_their_behaviour_and_qid_text_is_checked(tmp_path):
    store = sr.GroupStore.create(tmp_path / "s.zarr", 3)
    store.append(*_day([5, 6]), batch_id="a")
    assert store.qid.dtype == np.int64 and list(store.qid) == [5, 6]
    s2 = sr.GroupStore.create(tmp_path / "t.zarr", 3)
    s2.append(*_day(["aa", "bb"]), batch_id="a")
    # damage the offsets of the string ids: readers refuse them instead of slicing garbage
    off = sr.GroupStore.open(tmp_path / "t.zarr")._root["qid_text/offsets"]
    import zarr

    arr = zarr.open_array(str(tmp_path / "t.zarr" / "qid_text" / "offsets"), mode="r+")
    arr[1] = 1000
    with pytest.raises(StoreFormatError, match="qid_text/offsets"):
        _ = sr.GroupStore.open(tmp_path / "t.zarr").qid
    del off


def test_old_stores_without_identity_attribute_are_global(tmp_path):
    store = sr.GroupStore.create(tmp_path / "s.zarr", 3)
    store.append(*_day([1, 2]), batch_id="a")
    meta = tmp_path / "s.zarr" / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"].pop("group_identity")
    doc["attributes"].pop("qid_kind")
    meta.write_text(json.dumps(doc))
    old = sr.GroupStore.open(tmp_path / "s.zarr", mode="a")  # an attribute edit, not a layout edit: opens
    assert old.group_identity == "global" and old.qid_kind == "int"
    with pytest.raises(ValueError, match="already in the store"):
        old.append(*_day([2]), batch_id="b")


@pytest.mark.slow   # CLI info and an ingest copy: 2.2 s wall under load 15
def test_info_shows_identity_and_ingest_copy_keeps_batches(tmp_path, capsys):
    from streamrank import cli

    src = sr.GroupStore.create(tmp_path / "src.zarr", 3)
    src.append(*_day(["q1", "q2"]), batch_id="day-1")
    src.append(*_day(["q2", "q3"], seed=1), batch_id="day-2")
    assert cli.main(["info", str(tmp_path / "src.zarr"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["group_identity"] == "batch" and info["qid_kind"] == "str" and info["groups"] == 4
    # copying the store keeps its batches as batches: q2 of day 1 and of day 2 stay two groups
    assert cli.main(["ingest", str(tmp_path / "src.zarr"), "--store", str(tmp_path / "dst.zarr"),
                     "--max-rows", "100"]) == 0
    dst = sr.GroupStore.open(tmp_path / "dst.zarr")
    assert list(dst.qid) == list(src.qid)
    assert len(set(dst.group_batches())) == 2

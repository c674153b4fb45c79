"""LETOR recipe on slices of the real MQ2008 / OHSUMED archives."""
from __future__ import annotations

import gzip
import io
import tarfile

import numpy as np
import pytest

import streamrank as sr
from streamrank.datasets import letor
from recipes_testdata import need


_TEXT = {}


def _sklearn_rows(archive, member, n):
    from sklearn.datasets import load_svmlight_file

    if member not in _TEXT:
        with tarfile.open(archive, "r:gz") as tf:
            _TEXT[member] = tf.extractfile(member).read()
    text = _TEXT[member]
    head = b"".join(text.splitlines(keepends=True)[:n])
    return load_svmlight_file(io.BytesIO(head), n_features=46, query_id=True)


@pytest.mark.slow   # a real MQ2008 slice against sklearn: ~1 s warm
def test_mq2008_slice_matches_sklearn(tmp_path, recipe, capsys):
    archive = need("letor/MQ2008_QueryLevelNorm.tar.gz")
    rec = recipe("letor")
    out = tmp_path / "mq.zarr"
    assert rec.main(["--dataset", "MQ2008", "--fold", "1", "--split", "test", "--limit", "300",
                     "--chunk-mb", "0.05", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Qin and T.-Y. Liu" in text and "46 features" in text
    store = sr.GroupStore.open(out)
    assert store.n_features == 46 and 300 <= store.n_rows < 400
    blocks = list(store.blocks(max_rows=100_000))
    X = np.concatenate([b.X for b in blocks])
    y = np.concatenate([b.y for b in blocks])
    qid = np.concatenate([b.row_qid() for b in blocks])
    Xs, ys, qs = _sklearn_rows(archive, "MQ2008/Fold1/test.txt", store.n_rows)
    np.testing.assert_array_equal(X, Xs.toarray().astype(np.float32))
    np.testing.assert_array_equal(y, ys)
    np.testing.assert_array_equal(qid, qs)
    assert set(np.unique(y)) <= {0.0, 1.0, 2.0}
    # the limit cuts at a query boundary: the next row of the file starts a new query
    Xn, yn, qn = _sklearn_rows(archive, "MQ2008/Fold1/test.txt", store.n_rows + 1)
    assert qn[-1] != qid[-1]


@pytest.mark.slow   # real LETOR archives: ~2 s warm
def test_any_tar_member_and_null_values(tmp_path, recipe):
    archive = need("letor/OHSUMED_LETOR3.tar.gz")
    rec = recipe("letor")
    out = tmp_path / "oh.zarr"
    assert rec.main(["--input", str(archive), "--member", "OHSUMED/Feature-null/ALL/OHSUMED.txt",
                     "--features", "45", "--null-value", "0", "--limit", "200", "--out", str(out)]) == 0
    store = sr.GroupStore.open(out)
    assert store.n_features == 45 and store.n_rows >= 200
    with pytest.raises(ValueError, match=r"OHSUMED\.txt:\d+: NULL feature value"):
        letor.write_letor_store(tmp_path / "x.zarr", archive, member="OHSUMED/Feature-null/ALL/OHSUMED.txt",
                                n_features=45, limit_rows=200)


def test_plain_gz_input_and_errors(tmp_path, recipe):
    p = tmp_path / "f.txt.gz"
    p.write_bytes(gzip.compress(b"2 qid:5 1:0.5 2:1 #a\n0 qid:5 1:0.1\n1 qid:9 2:0.3\n"))
    rec = recipe("letor")
    assert rec.main(["--input", str(p), "--out", str(tmp_path / "g.zarr")]) == 0
    s = sr.GroupStore.open(tmp_path / "g.zarr")
    assert (s.n_rows, s.n_groups, s.n_features) == (3, 2, 2)
    np.testing.assert_array_equal(s.qid, [5, 9])
    assert rec.main(["--input", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "m.zarr")]) == 3
    with pytest.raises(ValueError, match="member"):
        with letor.open_letor(tmp_path / "a.tar.gz"):
            pass
    with pytest.raises(ValueError, match="split"):
        letor.letor_member("MQ2008", 1, "dev")
    with pytest.raises(SystemExit):
        rec.main(["--help"])

"""20 Newsgroups, MNIST and Reuters recipes on small slices of the real archives."""
from __future__ import annotations

import numpy as np
import pytest

import streamrank as sr
from streamrank.datasets.tuples import check_class_tuples
from recipes_testdata import need


def _all_tuples(store):
    bs = list(store.batches(batch_size=100_000, shuffle_buffer=0))
    return np.concatenate([b.tuples for b in bs]), bs


def _row_norms(M):
    return np.sqrt(np.asarray(M.multiply(M).sum(axis=1)).ravel())


def _check_tuple_dir(out, n_train, n_test, n_features):
    tr = sr.TupleStore.open(out / "train.zarr")
    te = sr.TupleStore.open(out / "test.zarr")
    ytr = np.load(out / "labels_train.npy")
    yte = np.load(out / "labels_test.npy")
    assert tr.n_tuples == n_train and te.n_tuples == n_test
    assert tr.n_queries == tr.n_items == len(ytr) and te.n_queries == len(yte) and te.n_items == len(ytr)
    assert tr.Q.shape[1] == tr.D.shape[1] == n_features
    t, batches = _all_tuples(tr)
    check_class_tuples(t, ytr, ytr, same_set=True)
    tt, _ = _all_tuples(te)
    check_class_tuples(tt, yte, ytr)
    # batches carry the rows the tuples name
    b = batches[0]
    assert (b.Q != tr.Q[b.tuples[:, 0]]).nnz == 0 and (b.D_neg != tr.D[b.tuples[:, 2]]).nnz == 0
    for M in (tr.Q, te.Q):
        n = _row_norms(M)
        assert np.all((np.abs(n - 1) < 1e-5) | (n == 0)) and (n > 0).mean() > 0.95
        assert M.dtype == np.float32 and M.min() >= 0
    return tr, te, ytr, yte


@pytest.mark.slow   # vectorises a real newsgroups slice: ~2.5 CPU-s
def test_newsgroups_slice(tmp_path, recipe, capsys):
    need("20newsgroups/20news-bydate.tar.gz")
    out = tmp_path / "ng"
    assert recipe("newsgroups").main(["--out", str(out), "--limit", "100", "--tuples", "3000",
                                      "--test-tuples", "500", "--chunk-tuples", "1000"]) == 0
    assert "Lang" in capsys.readouterr().out
    tr, te, ytr, yte = _check_tuple_dir(out, 3000, 500, tr_features := len((out / "vocabulary.txt").read_text().split()))
    assert tr_features <= 10_000 and len(ytr) == len(yte) == 100       # 5 per newsgroup and split
    assert np.array_equal(np.bincount(ytr), np.full(20, 5))
    assert (out / "classes.txt").read_text().split()[0] == "alt.atheism"


@pytest.mark.slow   # a real-dataset recipe, like the others here: 1.4 s wall under load 7
def test_mnist_slice(tmp_path, recipe):
    need("mnist/train-images-idx3-ubyte.gz")
    from streamrank.datasets.mnist import read_idx

    out = tmp_path / "mn"
    assert recipe("mnist").main(["--out", str(out), "--limit", "300", "--tuples", "2000",
                                 "--test-tuples", "400"]) == 0
    tr, te, ytr, yte = _check_tuple_dir(out, 2000, 400, 784)
    assert ytr[0] == 5 and yte[0] == 7                                   # the well-known first labels
    img = read_idx(need("mnist/train-images-idx3-ubyte.gz"), limit=2)
    assert img.shape == (2, 28, 28) and img.dtype == np.uint8
    row = img[0].reshape(-1).astype(np.float64) / 255
    np.testing.assert_allclose(tr.Q[0].toarray().ravel(), row / np.linalg.norm(row), rtol=1e-6)


def test_mnist_bad_file(tmp_path):
    from streamrank.datasets.mnist import read_idx

    p = tmp_path / "x.idx"
    p.write_bytes(b"\x00\x00\x0d\x01" + (3).to_bytes(4, "big") + b"\x00" * 12)
    with pytest.raises(ValueError, match="not unsigned byte"):
        read_idx(p)
    p.write_bytes(b"\x00\x00\x08\x01" + (9).to_bytes(4, "big") + b"\x00" * 3)
    with pytest.raises(ValueError, match="truncated"):
        read_idx(p)


@pytest.mark.slow   # a real Reuters slice and a fit: ~1.2 CPU-s
def test_reuters_slice(tmp_path, recipe, capsys):
    need("reuters21578/reuters21578.tar.gz")
    out = tmp_path / "re"
    assert recipe("reuters").main(["--out", str(out), "--limit", "300", "--topics", "10"]) == 0
    assert "Reuters-21578" in capsys.readouterr().out
    topics = (out / "topics.txt").read_text().split()
    assert len(topics) == 10 and topics[0] == "earn"
    tr = sr.GroupStore.open(out / "train.zarr")
    te = sr.GroupStore.open(out / "test.zarr")
    assert (tr.n_rows, te.n_rows) == (300, 300) and tr.n_groups == te.n_groups == 1
    assert tr.n_outputs == 10 and tr.sparse
    blocks = list(tr.blocks(max_rows=1000))
    assert len(blocks) == 1
    X, Y = blocks[0].X, blocks[0].y
    assert Y.shape == (300, 10) and set(np.unique(Y)) <= {0.0, 1.0} and Y[:, 0].sum() > 0
    n = _row_norms(X)
    assert np.all((np.abs(n - 1) < 1e-5) | (n == 0))
    # the tf-idf carries the topics: a centroid scorer separates 'earn' well (AUC per column)
    Xt, Yt = next(iter(te.blocks(max_rows=1000))).X, next(iter(te.blocks(max_rows=1000))).y
    C = np.asarray(X.T @ Y / np.maximum(Y.sum(axis=0), 1))              # (features, topics)
    auc = sr.metrics.auc(Yt[:, :3], np.asarray(Xt @ C)[:, :3])
    assert auc.shape == (3,) and auc[0] > 0.9


@pytest.mark.slow   # a real Reuters slice: ~1.2 CPU-s
def test_reuters_train_size(tmp_path):
    need("reuters21578/reuters21578.tar.gz")
    from streamrank.datasets.reuters import load_reuters

    d = load_reuters(limit=200, train_size=150, n_topics=5, max_features=None)
    assert d.X_train.shape[0] == 150 and d.X_test.shape[0] == 250
    assert d.Y_train.shape == (150, 5) and d.X_train.shape[1] == len(d.vocabulary)
    with pytest.raises(ValueError, match="train_size"):
        load_reuters(limit=10, train_size=50)

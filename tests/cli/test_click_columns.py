"""Click logs end to end through the CLI: ingest maps weight/click/position columns by name (Parquet, .npz,
zarr->zarr), ``fit --weights weight`` and ``fit --ips --propensity ...`` equal the library's in-memory fits.

The log is MQ2008 (Fold1 train, a small slice) run through the position-based click simulation
(streamrank.datasets.clicks): a logging ranker's top 10, (1/k)^eta examination, graded attractiveness.
"""
from __future__ import annotations

import numpy as np
import pytest

import streamrank as sr
from streamrank.clicks import estimate_propensity, ips_weights, position_based_propensity
from streamrank.datasets._paths import data_path

from _cli_inproc import run_cli as run

ARCHIVE = data_path("letor", "MQ2008_QueryLevelNorm.tar.gz")
pytestmark = pytest.mark.skipif(not ARCHIVE.exists(), reason="MQ2008 archive not available")


@pytest.fixture(scope="module")
def log():
    """(X float32, click, session, position, weight) of a simulated click log on ~300 MQ2008 rows."""
    from streamrank.datasets.clicks import simulate_clicks
    from streamrank.datasets.letor import iter_letor, letor_member

    parts = list(iter_letor(ARCHIVE, member=letor_member("MQ2008", 1, "train"), n_features=46, limit_rows=300))
    X = np.concatenate([p[0] for p in parts]).astype(np.float32)
    y = np.concatenate([p[1] for p in parts])
    q = np.concatenate([p[2] for p in parts])
    score = X.astype(np.float64) @ np.linspace(-1, 1, 46)                   # a (poor) logging ranker
    c = simulate_clicks(y, q, score, k=10, eta=1.0, n_sessions=2, random_state=0)
    rand = simulate_clicks(y, q, score, k=10, eta=1.0, n_sessions=6, randomize=True, random_state=1)
    w = np.random.default_rng(2).uniform(0.5, 2.0, size=c.row.size)
    return (X[c.row], c.clicks, c.session, c.position, w), (X[rand.row], rand.clicks, rand.session, rand.position)


def _parquet(tmp_path, data, parts=2):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    X, click, sess, pos, w = data
    d = tmp_path / "log"
    d.mkdir()
    bounds = np.r_[0, np.flatnonzero(np.diff(sess)) + 1, len(sess)]
    cut = int(bounds[len(bounds) // 2])
    for i, (a, b) in enumerate([(0, cut), (cut, len(sess))][:parts]):
        cols = {f"f_{j}": X[a:b, j] for j in range(X.shape[1])}
        cols.update(session=sess[a:b], clicked=click[a:b].astype(np.int8), rank=pos[a:b].astype(np.int32),
                    w=w[a:b])
        pq.write_table(pa.table(cols), d / f"part-{i}.parquet", row_group_size=97)
    return d


def _ingest_parquet(tmp_path, data, store, *extra):
    d = _parquet(tmp_path, data)
    rc, _, err = run("ingest", d, "--store", store, "--label", "clicked", "--qid", "session",
                     "--features-from-prefix", "f_", "--max-rows", "100", "-q", *extra)
    assert rc == 0, err


def _fit(store, model, *opts):
    alpha = () if "sgd-bilinear" in opts else ("--alpha", "0.5")
    rc, out, err = run("fit", "--store", store, "--model", model, *alpha, "-q", *opts)
    return rc, out, err


@pytest.mark.slow   # CLI ingest and fit: ~1.5 s warm
def test_parquet_columns_by_name_and_ips_fit_equal_the_library(log, tmp_path):
    data, _ = log
    X, click, sess, pos, w = data
    s = tmp_path / "clicks.zarr"
    _ingest_parquet(tmp_path, data, s, "--click-column", "clicked", "--position-column", "rank",
                    "--weight-column", "w")
    store = sr.GroupStore.open(s)
    assert store.row_columns == ("weight", "click", "position") and store.n_features == 46   # never features
    np.testing.assert_array_equal(store.read_column("click"), click)
    np.testing.assert_array_equal(store.read_column("position"), pos)
    np.testing.assert_array_equal(store.read_column("weight"), w)
    assert store.verify() >= 2
    Xd = X.astype(np.float64)
    # --ips with the true propensities: = RankRLS(ties="exclude") on clicks with IPS row weights
    rc, _, err = _fit(s, tmp_path / "ips.zarr", "--learner", "rankrls", "--ips", "--propensity", "eta=1",
                      "--clip", "0.05")
    assert rc == 0, err
    p = position_based_propensity(10, 1.0)
    want = sr.RankRLS(alpha=0.5, ties="exclude").fit(Xd, click, sess,
                                                     sample_weight=ips_weights(click, pos, p, clip=0.05))
    got = sr.load(tmp_path / "ips.zarr")
    assert got.ties == "exclude"
    np.testing.assert_allclose(got.coef_, want.coef_, rtol=0, atol=1e-8)
    # the same with p from a file
    (tmp_path / "p.txt").write_text("\n".join(map(str, p)))
    rc, _, err = _fit(s, tmp_path / "ipsf.zarr", "--learner", "rankrls", "--ips", "--propensity",
                      tmp_path / "p.txt", "--clip", "0.05")
    assert rc == 0, err
    np.testing.assert_allclose(sr.load(tmp_path / "ipsf.zarr").coef_, want.coef_, rtol=0, atol=1e-12)
    # --weights weight: the row weights of the column, labels = the ingested label (clicks here)
    rc, _, err = _fit(s, tmp_path / "w.zarr", "--learner", "rankrls", "--weights", "weight")
    assert rc == 0, err
    want = sr.RankRLS(alpha=0.5).fit(Xd, click, sess, sample_weight=w)
    np.testing.assert_allclose(sr.load(tmp_path / "w.zarr").coef_, want.coef_, rtol=0, atol=1e-8)
    # cg with the weights equals the primal
    rc, _, err = _fit(s, tmp_path / "cg.zarr", "--learner", "cg", "--tol", "1e-12", "--weights", "weight")
    assert rc == 0, err
    np.testing.assert_allclose(sr.load(tmp_path / "cg.zarr").coef_, want.coef_, rtol=0, atol=1e-7)


@pytest.mark.slow   # CLI runs: ~1 s warm
def test_propensity_estimated_from_a_randomized_store(log, tmp_path):
    data, (Xr, cr, sr_, pr) = log
    X, click, sess, pos, w = data
    rand = sr.GroupStore.create(tmp_path / "rand.zarr", 46, row_columns=("click", "position"))
    rand.append(Xr, cr, sr_, click=cr, position=pr)
    s = tmp_path / "clicks.zarr"
    _ingest_parquet(tmp_path, data, s, "--click-column", "clicked", "--position-column", "rank")
    rc, _, err = _fit(s, tmp_path / "m.zarr", "--learner", "rankrls", "--ips", "--propensity",
                      f"estimate:{tmp_path / 'rand.zarr'}", "--clip", "0.1")
    assert rc == 0, err
    p = estimate_propensity(cr, pr)
    want = sr.RankRLS(alpha=0.5, ties="exclude").fit(X.astype(np.float64), click, sess,
                                                     sample_weight=ips_weights(click, pos, p, clip=0.1))
    np.testing.assert_allclose(sr.load(tmp_path / "m.zarr").coef_, want.coef_, rtol=0, atol=1e-8)


@pytest.mark.slow   # CLI ingests: ~1 s warm
def test_npz_arrays_and_zarr_copy_keep_the_columns(log, tmp_path):
    data, _ = log
    X, click, sess, pos, w = data
    npz = tmp_path / "log.npz"
    np.savez(npz, X=X, y=click, qid=sess, clk=click.astype(np.int8), position=pos, w=w)
    a = tmp_path / "a.zarr"
    rc, _, err = run("ingest", npz, "--store", a, "--click-column", "clk", "--position-column", "position",
                     "--weight-column", "w", "--max-rows", "100", "-q")
    assert rc == 0, err
    sa = sr.GroupStore.open(a)
    assert sa.row_columns == ("weight", "click", "position") and len(sa.batches) > 2
    np.testing.assert_array_equal(sa.read_column("position"), pos)
    # a second night into the same store must name its columns again
    rc, _, err = run("ingest", npz, "--store", a, "--batch-id", "night-2", "-q")
    assert rc != 0 and "keeps a 'weight' column: name it (--weight-column COL)" in err
    b = tmp_path / "b.zarr"
    rc, _, err = run("ingest", a, "--store", b, "--format", "zarr", "--max-rows", "64", "-q")
    assert rc == 0, err
    sb = sr.GroupStore.open(b)
    assert sb.row_columns == sa.row_columns and sb.verify() >= 1
    for c, v in (("weight", w), ("click", click), ("position", pos)):
        np.testing.assert_array_equal(sb.read_column(c), v)
    rc, out, _ = run("info", b)
    assert rc == 0 and "row_columns" in out and "position" in out


# each cell ingests a parquet table (1-2 s wall under load 13): the quick loop keeps one refusal of --ips, one of
# --weights and the learner's
_QUICK_REFUSALS = {0, 4, 6}


@pytest.mark.parametrize("opts, match", [c if i in _QUICK_REFUSALS else pytest.param(*c, marks=pytest.mark.slow)
                                         for i, c in enumerate([
    (("--learner", "rankrls", "--ips"), "--ips needs --propensity"),
    (("--learner", "rankrls", "--propensity", "eta=1"), "--propensity / --clip are options of --ips"),
    (("--learner", "rankrls", "--ips", "--propensity", "eta=1", "--weights", "weight"), "not both"),
    (("--learner", "rankrls", "--ips", "--propensity", "eta=1", "--ties", "include"), "not the IPS objective"),
    (("--learner", "rankrls", "--weights", "click"), "its column 'weight'"),
    (("--learner", "rankrls", "--ips", "--propensity", "beta=2"), "expected eta=E, estimate:STORE"),
    (("--learner", "sgd-bilinear", "--weights", "weight"), "--weights does not apply to --learner sgd-bilinear"),
])])
def test_fit_refusals(log, tmp_path, opts, match):
    data, _ = log
    s = tmp_path / "s.zarr"
    _ingest_parquet(tmp_path, data, s, "--click-column", "clicked", "--position-column", "rank",
                    "--weight-column", "w")
    rc, _, err = _fit(s, tmp_path / "m.zarr", *opts)
    assert rc == 2 and match in err, err
    assert not (tmp_path / "m.zarr").exists()


def test_a_store_without_the_columns_and_letor_refuse(log, tmp_path):
    data, _ = log
    s = tmp_path / "plain.zarr"
    _ingest_parquet(tmp_path, data, s)
    assert sr.GroupStore.open(s).row_columns == ()
    rc, _, err = _fit(s, tmp_path / "m.zarr", "--learner", "rankrls", "--ips", "--propensity", "eta=1")
    assert rc == 2 and "keeps no 'click' column" in err
    rc, _, err = _fit(s, tmp_path / "m.zarr", "--learner", "rankrls", "--weights", "weight")
    assert rc == 2 and "keeps no 'weight' column" in err
    txt = tmp_path / "t.txt"
    txt.write_text("1 qid:1 1:0.5 2:0.1\n0 qid:1 1:0.2 2:0.3\n")
    rc, _, err = run("ingest", txt, "--store", tmp_path / "t.zarr", "--click-column", "c", "-q")
    assert rc != 0 and "LETOR text has no weight/click/position columns" in err
    assert not (tmp_path / "t.zarr").exists()


def test_sgd_pairwise_ips_fit_equals_the_library(log, tmp_path):
    """``--learner sgd-pairwise --ips``: pairs sampled on the clicks, each weighted 1/p(position of the click)."""
    from streamrank.io.weighted import ips_weighted

    data, _ = log
    s = tmp_path / "clicks.zarr"
    _ingest_parquet(tmp_path, data, s, "--click-column", "clicked", "--position-column", "rank")
    rc, _, err = run("fit", "--store", s, "--model", tmp_path / "m.zarr", "--learner", "sgd-pairwise", "--ips",
                     "--propensity", "eta=1", "--clip", "0.1", "--seed", "3", "-q")
    assert rc == 0, err
    p = position_based_propensity(10, 1.0)
    want = sr.PairwiseSGDRanker(random_state=3).fit(ips_weighted(sr.GroupStore.open(s), p, clip=0.1),
                                                     batch_size=1024)
    np.testing.assert_allclose(sr.load(tmp_path / "m.zarr").coef_, want.coef_, rtol=0, atol=1e-12)
    assert np.any(want.coef_ != 0)

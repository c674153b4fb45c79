"""The nightly pipeline on click logs: day files carry click/position/weight columns (mapped by name), rankrls,
sparse-kernel and sgd-pairwise train with IPS (``--ips --propensity``) or the row weights (``--weights weight``):
three statistics nights equal a from-scratch weighted (IPS) fit on the whole store, and sgd-pairwise nights the
same partial_fit calls on the weighted store; sgd-bilinear is refused.

The days are MQ2008 (Fold1 train, a small slice) through the position-based click simulation
(streamrank.datasets.clicks).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import streamrank as sr
from streamrank.datasets._paths import data_path
from streamrank.io.weighted import ips_weighted, with_weights
from streamrank.pipelines import nightly
from _lazy_modules import LazyModule, needs

ARCHIVE = data_path("letor", "MQ2008_QueryLevelNorm.tar.gz")
pytestmark = [pytest.mark.skipif(not ARCHIVE.exists(), reason="MQ2008 archive not available"), needs("pyarrow")]
pa = LazyModule("pyarrow")          # imported by the first test that uses it, not at collection
pq = LazyModule("pyarrow.parquet")
GRID = "0.01,1,100"


@pytest.fixture(scope="module")
def days(tmp_path_factory):
    """Three Parquet day files of simulated sessions (sessions numbered across days)."""
    from streamrank.datasets.clicks import simulate_clicks
    from streamrank.datasets.letor import iter_letor, letor_member

    parts = list(iter_letor(ARCHIVE, member=letor_member("MQ2008", 1, "train"), n_features=46, limit_rows=240))
    X = np.concatenate([p[0] for p in parts]).astype(np.float32)
    y = np.concatenate([p[1] for p in parts])
    q = np.concatenate([p[2] for p in parts])
    score = X.astype(np.float64) @ np.linspace(-1, 1, 46)
    d = tmp_path_factory.mktemp("days")
    files = []
    for day in range(3):
        c = simulate_clicks(y, q, score, k=10, eta=1.0, n_sessions=1, random_state=day,
                            session_start=1000 * day)
        w = np.random.default_rng(10 + day).uniform(0.5, 2.0, size=c.row.size)
        cols = {f"f_{j}": X[c.row, j] for j in range(46)}
        cols.update(session=c.session, clicked=c.clicks.astype(np.int8), rank=c.position.astype(np.int32), w=w)
        f = d / f"day-{day}.parquet"
        pq.write_table(pa.table(cols), f)
        files.append(f)
    return files


def _argv(store, models, day, *extra):
    return ["--store", str(store), "--new", str(day), "--models", str(models), "--alphas", GRID, "--no-plot",
            "--label", "clicked", "--qid", "session", "--features-from-prefix", "f_", "--click-column", "clicked",
            "--position-column", "rank", "--weight-column", "w", *extra]


def _version(models):
    cur = (models / "current").read_text().strip()
    return sr.load(models / cur), json.loads((models / cur / "version.json").read_text())


@pytest.mark.slow   # three nightly runs and a fit: ~2 s warm
def test_three_ips_nights_equal_a_from_scratch_ips_fit(days, tmp_path, capsys):
    store, models = tmp_path / "clicks.zarr", tmp_path / "models"
    for day in days:
        assert nightly.main(_argv(store, models, day, "--ips", "--propensity", "eta=1", "--clip", "0.05",
                                  "--tolerance", "1.0")) == 0
    s = sr.GroupStore.open(store)
    assert s.row_columns == ("weight", "click", "position") and len(s.batches) == 3
    model, meta = _version(models)
    assert meta["weighting"] == {"ips": {"propensity": "eta=1", "clip": 0.05}} and meta["mode"] == "incremental"
    assert model.ties == "exclude"
    src = ips_weighted(s, sr.clicks.position_based_propensity(10, 1.0), clip=0.05)
    scratch = sr.RankRLS(alpha=model.alpha, ties="exclude").fit(src)
    np.testing.assert_allclose(model.coef_, scratch.coef_, rtol=0, atol=1e-8)
    # λ: the library's fold selection on the same weighted source chooses the same value
    cv = sr.RankRLS(ties="exclude").cross_validate(src, alphas=[0.01, 1, 100], folds=5)
    assert cv.best_alpha == model.alpha
    # another weighting on the same model line is refused (statistics cannot be mixed) until --full
    rc = nightly.main(_argv(store, models, days[0], "--weights", "weight"))
    assert rc != 0 and "run once with --full" in capsys.readouterr().err


@pytest.mark.slow   # nightly runs: ~1 s warm
def test_a_weights_night_equals_the_weighted_fit(days, tmp_path):
    store, models = tmp_path / "w.zarr", tmp_path / "models"
    for day in days[:2]:
        assert nightly.main(_argv(store, models, day, "--weights", "weight", "--tolerance", "1.0")) == 0
    model, meta = _version(models)
    assert meta["weighting"] == {"weights": "weight"}
    scratch = sr.RankRLS(alpha=model.alpha).fit(with_weights(sr.GroupStore.open(store), "weight"))
    np.testing.assert_allclose(model.coef_, scratch.coef_, rtol=0, atol=1e-8)


@pytest.mark.parametrize("extra, match", [
    (("--ips",), "--ips needs --propensity"),
    (("--ips", "--propensity", "eta=1", "--learner", "sgd-bilinear"), "--learner sgd-bilinear cannot be weighted"),
    (("--weights", "weight", "--learner", "sgd-bilinear"), "a TupleStore, which has no row weights"),
    (("--ips", "--propensity", "eta=1", "--ties", "include"), "not the IPS objective"),
    (("--clip", "0.1"), "options of --ips"),
])
def test_usage_errors_before_anything_is_written(days, tmp_path, capsys, extra, match):
    with pytest.raises(SystemExit) as exc:
        nightly.main(_argv(tmp_path / "s.zarr", tmp_path / "m", days[0], *extra))
    assert exc.value.code == 2 and match in capsys.readouterr().err
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.slow   # nightly runs: ~1 s warm
def test_npz_and_store_days_bring_their_columns(days, tmp_path):
    """Night 1 an .npz day (arrays named by --click-column ...), night 2 a store day (its own columns): the
    store keeps every column in step, and the model equals the from-scratch IPS fit."""
    t0, t1 = pq.read_table(days[0]).to_pydict(), pq.read_table(days[1]).to_pydict()
    feats = [f"f_{j}" for j in range(46)]
    npz = tmp_path / "day-0.npz"
    np.savez(npz, X=np.column_stack([t0[f] for f in feats]).astype(np.float32), y=np.asarray(t0["clicked"]),
             qid=np.asarray(t0["session"]), clicked=np.asarray(t0["clicked"]), rank=np.asarray(t0["rank"]),
             w=np.asarray(t0["w"]))
    day_store = sr.GroupStore.create(tmp_path / "day-1.zarr", 46, row_columns=("weight", "click", "position"))
    day_store.append(np.column_stack([t1[f] for f in feats]), t1["clicked"], t1["session"], weight=t1["w"],
                     click=t1["clicked"], position=t1["rank"])
    store, models = tmp_path / "s.zarr", tmp_path / "models"
    for day in (npz, tmp_path / "day-1.zarr"):
        assert nightly.main(_argv(store, models, day, "--ips", "--propensity", "eta=1", "--tolerance", "1.0")) == 0
    s = sr.GroupStore.open(store)
    np.testing.assert_array_equal(s.read_column("position"), np.r_[t0["rank"], t1["rank"]])
    np.testing.assert_array_equal(s.read_column("weight"), np.r_[t0["w"], t1["w"]])
    model, _ = _version(models)
    src = ips_weighted(s, sr.clicks.position_based_propensity(10, 1.0))
    np.testing.assert_allclose(model.coef_, sr.RankRLS(alpha=model.alpha, ties="exclude").fit(src).coef_,
                               rtol=0, atol=1e-8)


def _weighted_source(store, how):
    if how == "weights":
        return with_weights(store, "weight")
    return ips_weighted(store, sr.clicks.position_based_propensity(10, 1.0), clip=0.05)


_HOW = {"weights": ("--weights", "weight"), "ips": ("--ips", "--propensity", "eta=1", "--clip", "0.05")}


@pytest.mark.slow   # three nightly runs and two fits: ~3 s warm
@pytest.mark.parametrize("how", ["weights", "ips"])
def test_sparse_kernel_weighted_nights_equal_the_weighted_fit(days, tmp_path, capsys, how):
    store, models = tmp_path / "k.zarr", tmp_path / "models"
    kernel = ("--learner", "sparse-kernel", "--n-basis", "20", "--gamma", "0.05", "--seed", "3")
    for day in days:
        assert nightly.main(_argv(store, models, day, *kernel, *_HOW[how], "--tolerance", "1.0")) == 0
    model, meta = _version(models)
    assert meta["mode"] == "incremental" and meta["learner"] == "sparse-kernel"
    assert meta["weighting"] == ({"weights": "weight"} if how == "weights"
                                 else {"ips": {"propensity": "eta=1", "clip": 0.05}})
    assert model.ties == ("exclude" if how == "ips" else "include")
    s = sr.GroupStore.open(store)
    src = _weighted_source(s, how)
    scratch = sr.KernelRankRLS(gamma=0.05, alpha=model.alpha, basis=model.basis_, ties=model.ties).fit(src)
    a, b = model.dual_coef_, scratch.dual_coef_
    np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-8 * np.abs(b).max())
    # the weights matter: the same fit without them is another model
    plain = sr.KernelRankRLS(gamma=0.05, alpha=model.alpha, basis=model.basis_, ties=model.ties).fit(
        s if how == "weights" else _weighted_source(s, "ips").inner)
    assert np.abs(plain.dual_coef_ - b).max() > 1e-3 * np.abs(b).max()
    # λ from the fold statistics kept night by night = the library's k-fold choice on the weighted store
    cv = sr.KernelRankRLS(gamma=0.05, basis=model.basis_, ties=model.ties).fit(src)
    assert cv.cross_validate(alphas=[0.01, 1, 100], folds=5).best_alpha == model.alpha
    # the line keeps its weighting: another one (or none) is refused until --full
    other = _HOW["ips" if how == "weights" else "weights"]
    for extra in (other, ()):
        assert nightly.main(_argv(store, models, days[0], *kernel, *extra)) != 0
        assert "run once with --full" in capsys.readouterr().err


@pytest.mark.slow   # three nightly runs: ~2 s warm
@pytest.mark.parametrize("how", ["weights", "ips"])
def test_sgd_pairwise_weighted_nights_resume_as_partial_fit_on_the_weighted_store(days, tmp_path, capsys, how):
    store, models = tmp_path / "p.zarr", tmp_path / "models"
    sgd = ("--learner", "sgd-pairwise", "--seed", "5", "--gate-fraction", "0")
    for day in days:
        assert nightly.main(_argv(store, models, day, *sgd, *_HOW[how], "--tolerance", "1.0")) == 0
    model, meta = _version(models)
    assert meta["mode"] == "incremental" and meta["weighting"] == nightly.read_version(models, "v0001")["weighting"]
    s = sr.GroupStore.open(store)
    src = _weighted_source(s, how)
    replay = sr.PairwiseSGDRanker(random_state=5)     # the same partial_fit calls, by hand, in one process
    unweighted = sr.PairwiseSGDRanker(random_state=5)
    for e in s.batches:
        for b in src.groups(*e["groups"]).blocks():
            assert b.weight is not None
            replay.partial_fit(b.X, b.y, b.row_qid(), sample_weight=b.weight)
            unweighted.partial_fit(b.X, b.y, b.row_qid())
    assert model.t_ == replay.t_ == s.n_rows
    np.testing.assert_array_equal(model.coef_, replay.coef_)          # bit-identical
    assert not np.array_equal(model.coef_, unweighted.coef_)          # and the weights took part
    # an unweighted night on the weighted line is refused (its steps were taken with the weights)
    assert nightly.main(_argv(store, models, days[0], *sgd)) != 0
    assert "run once with --full" in capsys.readouterr().err


def test_run_night_refuses_a_weighted_sgd_bilinear_line_before_the_ingest(days, tmp_path):
    with pytest.raises(ValueError, match="--learner sgd-bilinear cannot be weighted: .*TupleStore"):
        nightly.run_night(tmp_path / "t.zarr", [days[0]], tmp_path / "m", learner="sgd-bilinear",
                          weighting={"weights": "weight"}, plot=False)
    assert not (tmp_path / "t.zarr").exists()

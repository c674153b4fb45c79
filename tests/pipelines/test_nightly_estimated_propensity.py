"""Nightly ``--ips --propensity estimate:em|harvest``: θ re-estimated every night from the store, warm-started,
the line retrained in full (issue 37)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import streamrank as sr
from streamrank.io.weighted import ips_weighted
from streamrank.pipelines import nightly
from streamrank.position_bias import estimate_propensity_em, harvest_propensity
from _lazy_modules import LazyModule, needs

pytestmark = [needs("pyarrow")]
pa = LazyModule("pyarrow")
pq = LazyModule("pyarrow.parquet")


@pytest.fixture(scope="module")
def days(tmp_path_factory):
    from streamrank.datasets.clicks import simulate_position_bias

    log = simulate_position_bias(n_queries=40, n_sessions=600, n_features=4, n_rankers=3, eta=1.0, random_state=7)
    d = tmp_path_factory.mktemp("days")
    files = []
    for day in range(3):
        m = (log.session >= 200 * day) & (log.session < 200 * (day + 1))
        cols = {f"f_{j}": log.X[m, j].astype(np.float32) for j in range(4)}
        cols.update(session=log.session[m], clicked=log.clicks[m].astype(np.int8),
                    rank=log.position[m].astype(np.int32), rk=log.ranker[m].astype(np.int32))
        f = d / f"day-{day}.parquet"
        pq.write_table(pa.table(cols), f)
        files.append(f)
    return files


def _argv(store, models, day, *extra):
    return ["--store", str(store), "--new", str(day), "--models", str(models), "--alphas", "0.1,10", "--no-plot",
            "--label", "clicked", "--qid", "session", "--features-from-prefix", "f_", "--click-column", "clicked",
            "--position-column", "rank", "--ranker-column", "rk", "--tolerance", "1.0", *extra]


def _version(models):
    cur = (models / "current").read_text().strip()
    return sr.load(models / cur), json.loads((models / cur / "version.json").read_text())


@pytest.mark.slow   # three nightly runs with an EM each: a few seconds
def test_em_nights_reestimate_warm_started_and_retrain_in_full(days, tmp_path):
    store, models = tmp_path / "c.zarr", tmp_path / "models"
    notes = []
    for day in days:
        assert nightly.main(_argv(store, models, day, "--ips", "--propensity", "estimate:em", "--clip", "0.05")) == 0
        model, meta = _version(models)
        notes.append(meta["propensity_estimate"])
        assert meta["mode"] == "full" and meta["weighting"]["ips"]["propensity"] == "estimate:em"
    assert [n["warm_start"] for n in notes] == [False, True, True]
    s = sr.GroupStore.open(store)
    assert s.row_columns == ("click", "position", "ranker") and notes[-1]["impressions"] == s.n_rows
    theta = np.array(notes[-1]["theta"])
    cold = estimate_propensity_em(s)
    np.testing.assert_allclose(theta, cold.theta, atol=5e-3)        # warm and cold starts meet
    scratch = sr.RankRLS(alpha=model.alpha, ties="exclude").fit(ips_weighted(s, theta, clip=0.05))
    np.testing.assert_allclose(model.coef_, scratch.coef_, rtol=0, atol=1e-8)


@pytest.mark.slow
def test_a_harvest_night(days, tmp_path):
    store, models = tmp_path / "h.zarr", tmp_path / "models"
    for day in days[:2]:
        assert nightly.main(_argv(store, models, day, "--ips", "--propensity", "estimate:harvest")) == 0
    model, meta = _version(models)
    note = meta["propensity_estimate"]
    h = harvest_propensity(sr.GroupStore.open(store))
    np.testing.assert_allclose(note["theta"], h.theta, rtol=1e-12)
    np.testing.assert_allclose(note["upper"], h.upper, rtol=1e-12)


@pytest.mark.slow   # two nightly runs with an EM each: a few seconds
@pytest.mark.parametrize("learner", ["sparse-kernel", "sgd-pairwise"])
def test_em_nights_of_the_other_weighted_lines_follow_theta(days, tmp_path, learner):
    """sparse-kernel and sgd-pairwise on an estimated θ: every night retrains in full with tonight's θ, and the
    model is the from-scratch fit (kernel: with its basis) / the same partial_fit calls on ips_weighted(θ)."""
    store, models = tmp_path / "c.zarr", tmp_path / "models"
    extra = (("--n-basis", "15", "--gamma", "0.5", "--seed", "3") if learner == "sparse-kernel"
             else ("--seed", "5", "--gate-fraction", "0"))
    for day in days[:2]:
        assert nightly.main(_argv(store, models, day, "--learner", learner, "--ips", "--propensity", "estimate:em",
                                  "--clip", "0.05", *extra)) == 0
        model, meta = _version(models)
        assert meta["mode"] == "full" and meta["weighting"]["ips"]["propensity"] == "estimate:em"
    assert meta["propensity_estimate"]["warm_start"] is True
    s = sr.GroupStore.open(store)
    src = ips_weighted(s, np.array(meta["propensity_estimate"]["theta"]), clip=0.05)
    if learner == "sparse-kernel":
        ref = sr.KernelRankRLS(gamma=0.5, alpha=model.alpha, basis=model.basis_, ties="exclude").fit(src)
        b = ref.dual_coef_
        np.testing.assert_allclose(model.dual_coef_, b, rtol=1e-8, atol=1e-8 * np.abs(b).max())
        return
    h0 = s.batches[-1]["groups"][0]          # the full retrain: the older days, then the held-out newest day
    replay = sr.PairwiseSGDRanker(random_state=5)
    for g0, g1 in ((0, h0), (h0, s.n_groups)):
        for b in src.groups(g0, g1).blocks():
            replay.partial_fit(b.X, b.y, b.row_qid(), sample_weight=b.weight)
    np.testing.assert_array_equal(model.coef_, replay.coef_)

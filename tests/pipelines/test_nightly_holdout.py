"""The promotion decision of the nightly pipeline is made on data neither compared model has seen."""
from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest

import streamrank as sr
from pipeline_data import make_day, make_tuple_day

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from streamrank.pipelines import nightly  # noqa: E402

ALPHAS = [0.25, 1.0, 4.0, 16.0]


def _npz(tmp, d):
    p = tmp / f"day{d}.npz"
    np.savez(p, **dict(zip("X y qid".split(), make_day(d))))
    return p


def _night(store, models, day, **kw):
    return nightly.run_night(store, [day], models, alphas=ALPHAS, tolerance=1.0, plot=False, out=io.StringIO(),
                             **kw)


@pytest.mark.slow   # nightly runs: ~1.3 s warm
def test_rankrls_candidate_without_the_newest_day_decides_and_the_refit_is_promoted(tmp_path):
    store, models = tmp_path / "logs.zarr", tmp_path / "models"
    r1 = _night(store, models, _npz(tmp_path, 1))
    v1 = nightly.read_version(models, "v0001")["validation"]
    assert r1["status"] == "promoted" and v1["scheme"] == "in-sample" and v1["groups"] == [0, 12]
    from streamrank.pipelines._nightly_versions import summary_line

    assert "in-sample: no earlier data to hold the newest day out of -> promoted" in summary_line(r1)
    _night(store, models, _npz(tmp_path, 2))
    r3 = _night(store, models, _npz(tmp_path, 3))
    meta = nightly.read_version(models, r3["version"])
    val = meta["validation"]
    assert val["scheme"] == "holdout" and val["groups"] == [24, 36] and val["candidate_trained_on"] == [0, 24]
    s = sr.GroupStore.open(store)
    before, day = s.groups(0, 24), s.groups(24, 36)
    # the candidate of the decision: nights 1-2 only, λ by 5-fold CV on them (the day takes no part)
    cand = sr.RankRLS(solver="primal")
    cv = cand.cross_validate(before, alphas=ALPHAS, folds=5)
    assert meta["selection"]["holdout_alpha"] == cv.best_alpha
    want = sr.metrics.evaluate(day, cand, k=10)
    assert meta["metrics"]["ndcg@10"] == pytest.approx(want["ndcg@10"].value, rel=1e-10)
    assert meta["metrics"]["disagreement"] == pytest.approx(want["disagreement"].value, rel=1e-10)
    # the current model (v0002, nights 1-2) on the same day
    cur = sr.metrics.evaluate(day, sr.load(models / "v0002"), k=10)["ndcg@10"].value
    assert meta["current_metrics"]["ndcg@10"] == pytest.approx(cur, rel=1e-10)
    # the promoted version is the refit on all three nights, λ from all folds
    final = sr.load(models / "current")
    ref = sr.RankRLS(solver="primal")
    assert final.alpha == ref.cross_validate(s, alphas=ALPHAS, folds=5).best_alpha == meta["selection"]["alpha"]
    np.testing.assert_allclose(final.coef_, ref.coef_, rtol=1e-8, atol=1e-12)


@pytest.mark.slow   # nightly runs: ~1 s warm
def test_rejected_candidate_is_judged_on_the_newest_day_only(tmp_path):
    store, models = tmp_path / "logs.zarr", tmp_path / "models"
    _night(store, models, _npz(tmp_path, 1))
    r2 = nightly.run_night(store, [_npz(tmp_path, 2)], models, alphas=ALPHAS, tolerance=-5.0, plot=False,
                           out=io.StringIO())
    assert r2["status"] == "rejected" and r2["excluded"] == [nightly.content_hash(_npz(tmp_path, 2))]
    r3 = _night(store, models, _npz(tmp_path, 3), readmit=[_npz(tmp_path, 2)])   # base = v0001: nights 2-3 new
    # (night 2 re-admitted: a rejected night is otherwise excluded), night 3 held out
    meta = nightly.read_version(models, r3["version"])
    assert meta["data"]["new_groups"] == 24 and meta["validation"]["groups"] == [24, 36]
    assert meta["validation"]["candidate_trained_on"] == [0, 24]
    # --full on a store the current model has seen whole: no honest slice, said so
    rf = _night(store, models, _npz(tmp_path, 3), full=True)
    assert nightly.read_version(models, rf["version"])["validation"]["scheme"] == "in-sample"


def test_sparse_kernel_holdout_candidate(tmp_path):
    store, models = tmp_path / "logs.zarr", tmp_path / "models"
    params = {"n_basis": 15, "gamma": 0.05, "random_state": 3}
    for d in (1, 2):
        rep = _night(store, models, _npz(tmp_path, d), learner="sparse-kernel", learner_params=params)
    meta = nightly.read_version(models, rep["version"])
    assert meta["validation"]["scheme"] == "holdout"
    s = sr.GroupStore.open(store)
    final = sr.load(models / "current")
    cand = sr.KernelRankRLS(gamma=0.05, alpha=meta["selection"]["holdout_alpha"], basis=final.basis_)
    cand.fit(s.groups(0, 12))
    want = sr.metrics.evaluate(s.groups(12, 24), cand, k=10)["ndcg@10"].value
    assert meta["metrics"]["ndcg@10"] == pytest.approx(want, rel=1e-8)


@pytest.mark.slow   # nightly runs: ~1 s warm
def test_sgd_progressive_validation_on_the_newest_day(tmp_path):
    store, models = tmp_path / "t.zarr", tmp_path / "models"
    run = dict(learner="sgd-bilinear", tolerance=1.0, plot=False, gate_fraction=0)   # every tuple trained on
    nightly.run_night(store, [make_tuple_day(tmp_path, 1)], models, out=io.StringIO(), **run)
    rep = nightly.run_night(store, [make_tuple_day(tmp_path, 2)], models, out=io.StringIO(), **run)
    meta = nightly.read_version(models, rep["version"])
    assert meta["validation"]["scheme"] == "progressive" and meta["validation"]["tuples"] == [300, 600]
    ts = sr.TupleStore.open(store)
    m = sr.load(models / "v0001")            # every batch of 4096 (here: the whole day) scored before learning
    Q, Dp, Dn = nightly.tuple_range(ts, 300, 600)
    want = sr.metrics.tuple_error(m.predict(Q, Dp), m.predict(Q, Dn))
    assert meta["metrics"]["tuple_error"] == pytest.approx(want) == meta["current_metrics"]["tuple_error"]


def test_pairwise_progressive_validation(tmp_path):
    store, models = tmp_path / "logs.zarr", tmp_path / "models"
    for d in (1, 2):
        rep = nightly.run_night(store, [_npz(tmp_path, d)], models, learner="sgd-pairwise", tolerance=1.0,
                                plot=False, out=io.StringIO(), learner_params={"random_state": 5}, max_rows=40)
    meta = nightly.read_version(models, rep["version"])
    assert meta["validation"]["scheme"] == "progressive" and set(meta["metrics"]) == {"ndcg@10", "disagreement"}
    # replay: each block of night 2 scored by the model before its partial_fit
    s = sr.GroupStore.open(store)
    m = sr.load(models / "v0001")
    ev = sr.metrics.RankingEvaluator(10, ("ndcg", "disagreement"))
    for b in s.groups(12, 24).blocks(max_rows=40):
        ev.update(b.y, m.predict(b.X), b.group_ptr, qid=b.qid, group_size=b.group_size,
                  group_offset=b.group_offset)
        m.partial_fit(b.X, b.y, b.row_qid())
    assert meta["metrics"]["ndcg@10"] == pytest.approx(ev.result()["ndcg@10"].value, rel=1e-12)


@pytest.mark.slow   # nightly runs: ~1 s warm
def test_sgd_fixed_validation_tuple_store(tmp_path):
    val = tmp_path / "val.zarr"
    nightly.ingest_tuples(val, [make_tuple_day(tmp_path, 9)])
    store, models = tmp_path / "t.zarr", tmp_path / "models"
    for d in (1, 2):
        rep = nightly.run_night(store, [make_tuple_day(tmp_path, d)], models, learner="sgd-bilinear", tolerance=1.0,
                                plot=False, out=io.StringIO(), validation=val)
    meta = nightly.read_version(models, rep["version"])
    assert meta["validation"] == {"scheme": "fixed-store", "store": str(val)}
    vs = sr.TupleStore.open(val)
    Q, Dp, Dn = nightly.tuple_range(vs, 0, vs.n_tuples)
    m = sr.load(models / "current")
    assert meta["metrics"]["tuple_error"] == pytest.approx(sr.metrics.tuple_error(m.predict(Q, Dp), m.predict(Q, Dn)))

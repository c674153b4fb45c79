"""A rejected day is kept out of later nights (issue 24), on MQ2008 days.

Night 1: 40 queries of Fold1 train.txt; night 2: the next 250 (promoted); night 3: the next 150 with
inverted labels (rejected by the gate, and excluded); night 4: 150 other queries (Fold1 vali.txt, good
labels).  Before the exclusion the rejected day stayed in every later candidate and night 4 was rejected
too; now night 4 is trained without it and promoted, and equals a from-scratch fit on the store without
the excluded day.
"""
from __future__ import annotations

import io
import json
import shutil

import numpy as np
import pytest

import streamrank as sr
from mq_days import ARCHIVE, read_queries, text_day
from streamrank.pipelines import nightly
from streamrank.pipelines._nightly_views import GroupSelection, group_view

ALPHAS = 2.0 ** np.arange(-4, 9, 2)

pytestmark = pytest.mark.skipif(not ARCHIVE.exists(), reason="MQ2008 archive not available")


@pytest.fixture(scope="module")
def days(tmp_path_factory):
    d = tmp_path_factory.mktemp("mq_excl")
    lines, starts = read_queries()
    vlines, vstarts = read_queries("MQ2008/Fold1/vali.txt")
    return {"first": text_day(d / "d1.txt", lines, starts, 0, 40),
            "more": text_day(d / "d2.txt", lines, starts, 40, 290),
            "inverted": text_day(d / "d3_inverted.txt", lines, starts, 290, 440, invert=True),
            "other": text_day(d / "d4.txt", vlines, vstarts, 0, 150),
            "other2": text_day(d / "d5.txt", vlines, vstarts, 150, 157)}


def _main(store, models, *args):
    out = io.StringIO()
    import contextlib

    with contextlib.redirect_stdout(out):
        rc = nightly.main(["--store", str(store), "--models", str(models), "--alphas", "2^-4:2^8:7", "--no-plot",
                           "--no-checks",   # the gate's exclusions (the data checks would quarantine the day first)
                           *map(str, args)])
    return rc, out.getvalue()


def _report(models):
    return json.loads(sorted((models / "reports").glob("*.json"))[-1].read_text())


@pytest.mark.slow   # several nightly runs: ~2 s warm
def test_a_rejected_day_is_excluded_and_the_next_good_night_is_promoted(days, tmp_path):
    store, models = tmp_path / "s.zarr", tmp_path / "m"
    for day in ("first", "more"):
        assert _main(store, models, "--new", days[day])[0] == 0
    rc, line3 = _main(store, models, "--new", days["inverted"])
    assert rc == 0 and "-> rejected; current=v0002; excluded from training: sha256:" in line3, line3
    inv = nightly.content_hash(days["inverted"])
    doc = json.loads((models / "excluded.json").read_text())
    (rec,) = doc["excluded"]
    assert rec["day"] == inv and rec["groups"] == [290, 440] and rec["version"] == "v0003"
    assert rec["reason"] == "rejected by the gate of v0003" and rec["batch_ids"] == [inv]
    assert rec["scores"]["candidate"]["ndcg@10"] < rec["scores"]["current"]["ndcg@10"] - 0.005
    shutil.copytree(store, tmp_path / "s_no_excl.zarr")
    shutil.copytree(models, tmp_path / "m_no_excl")

    rc, line4 = _main(store, models, "--new", days["other"])
    assert rc == 0 and "-> promoted; current=v0004" in line4, line4
    meta = nightly.read_version(models, "v0004")
    assert meta["base"] == "v0002" and meta["mode"] == "incremental" and meta["excluded"] == [inv]
    assert meta["data"]["new_groups"] == 150 and meta["data"]["excluded"] == [[290, 440]]
    assert meta["gate"]["groups"] == [0, 290]
    # the nightly's model = a from-scratch fit on the store without the excluded day
    s = sr.GroupStore.open(store)
    final = sr.load(models / "current")
    kept = group_view(s, 0, s.n_groups, [(290, 440)])
    assert kept.n_groups == s.n_groups - 150
    ref = sr.RankRLS(alpha=final.alpha, solver="primal").fit(kept)
    np.testing.assert_allclose(final.coef_, ref.coef_, rtol=1e-10, atol=1e-12)
    assert final.alpha == sr.RankRLS(solver="primal").cross_validate(kept, alphas=ALPHAS, folds=5).best_alpha

    # without the exclusion (the day re-admitted by hand) the same night is rejected: the old behaviour
    rc, line = _main(tmp_path / "s_no_excl.zarr", tmp_path / "m_no_excl", "--new", days["other"],
                     "--readmit", days["inverted"])
    assert rc == 0 and "-> rejected; current=v0002" in line, line
    rep = _report(tmp_path / "m_no_excl")
    assert rep["readmitted"] == [inv] and rep["data"]["new_groups"] == 300
    doc = json.loads((tmp_path / "m_no_excl" / "excluded.json").read_text())
    assert doc["history"][0]["event"] == "readmitted" and doc["history"][0]["day"] == inv
    assert {r["day"] for r in doc["excluded"]} == {inv, nightly.content_hash(days["other"])}   # rejected again


@pytest.mark.slow   # several nightly runs: ~2 s warm
def test_rejecting_a_trained_day_by_hand_retrains_without_it(days, tmp_path):
    store, models = tmp_path / "s.zarr", tmp_path / "m"
    for day in ("first", "more"):
        assert _main(store, models, "--new", days[day])[0] == 0
    bid = nightly.content_hash(days["first"])
    rc, line = _main(store, models, "--reject", bid)          # no --new: tonight trains on the store
    assert rc == 0 and "full v0003" in line, line
    rep = _report(models)
    assert rep["rejected_by_hand"] == [bid] and "excluded days inside the current model's data" in rep["retrain"]
    assert rep["status"] == "promoted" and rep["mode"] == "full"
    s = sr.GroupStore.open(store)
    final = sr.load(models / "current")
    ref = sr.RankRLS(alpha=final.alpha, solver="primal").fit(s.groups(40, 290))
    np.testing.assert_allclose(final.coef_, ref.coef_, rtol=1e-10, atol=1e-12)
    assert nightly.read_version(models, "v0003")["excluded"] == [bid]
    # nothing new and nothing changed: up to date; re-admitting a day that is not excluded is an error
    assert "model up to date" in _main(store, models, "--new", days["more"])[1]
    import contextlib

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc, _ = _main(store, models, "--readmit", days["more"])
    assert rc == 4 and "is not excluded (excluded days: ['sha256:" in err.getvalue()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit):
        nightly.main(["--store", str(store), "--models", str(models)])     # neither --new nor --reject/--readmit
    assert "--new DAYFILE... is required" in err.getvalue()


@pytest.mark.slow   # the MQ2008 days and an ingest: 7.8 s wall under load 11
def test_group_selection_reads_the_selected_groups(days, tmp_path):
    """GroupSelection = the same rows, labels, query ids as the groups picked one by one (a span read and
    run-by-run reads), for every block budget."""
    nightly.ingest(tmp_path / "t.zarr", [days["first"]])
    s = sr.GroupStore.open(tmp_path / "t.zarr")
    rng = np.random.default_rng(0)
    for groups in (np.arange(3, 30), np.sort(rng.choice(40, 12, replace=False)), np.array([0, 39]), np.array([], int)):
        view = GroupSelection(s, groups)
        want = [s.groups(int(g), int(g) + 1) for g in groups]
        X = np.vstack([b.X for w in want for b in w.blocks()] or [np.zeros((0, 46))])
        y = np.concatenate([b.y for w in want for b in w.blocks()] or [np.zeros(0)])
        for max_rows in (7, 50, 10_000):
            blocks = list(view.blocks(max_rows=max_rows, split_groups=True))
            got_X = np.vstack([b.X for b in blocks] or [np.zeros((0, 46))])
            np.testing.assert_array_equal(got_X, X)
            np.testing.assert_array_equal(np.concatenate([b.y for b in blocks] or [np.zeros(0)]), y)
        assert list(view._group_qid(0, view.n_groups)) == list(np.asarray(s.qid)[groups])
        assert view.n_rows == len(y) and view.n_groups == len(groups)
    with pytest.raises(ValueError, match="sorted unique"):
        GroupSelection(s, [3, 2])


@pytest.mark.slow   # three nightly runs per learner: 1.7-2.3 s wall under load 11
@pytest.mark.parametrize("learner", ["sparse-kernel", "sgd-pairwise"])
def test_other_learners_train_without_the_excluded_day(tmp_path, learner):
    """Sparse kernel: the fold statistics of night 3 skip the rejected night 2, and the model equals a
    from-scratch fit with its basis on the store without it.  sgd-pairwise: the same partial_fit calls on
    the kept groups (neither the excluded day nor the held-out queries)."""
    from pipeline_data import make_day

    from streamrank.pipelines._nightly_views import held_out

    store, models = tmp_path / "s.zarr", tmp_path / "m"
    params = ({"n_basis": 15, "gamma": 0.05, "random_state": 3} if learner == "sparse-kernel"
              else {"random_state": 5})
    paths = []
    for d in (1, 2, 3):
        p = tmp_path / f"day{d}.npz"
        np.savez(p, **dict(zip("X y qid".split(), make_day(d))))
        paths.append(p)
    run = dict(learner=learner, learner_params=params, alphas=[0.1, 1.0, 10.0], plot=False, out=io.StringIO())
    nightly.run_night(store, [paths[0]], models, tolerance=1.0, **run)
    r2 = nightly.run_night(store, [paths[1]], models, tolerance=-5.0, **run)       # forced rejection
    assert r2["status"] == "rejected" and r2["excluded"] == [nightly.content_hash(paths[1])]
    r3 = nightly.run_night(store, [paths[2]], models, tolerance=1.0, **run)
    assert r3["status"] == "promoted" and r3["data"]["excluded"] == [[12, 24]]
    s, final = sr.GroupStore.open(store), sr.load(models / "current")
    if learner == "sparse-kernel":
        kept = group_view(s, 0, s.n_groups, [(12, 24)])
        ref = sr.KernelRankRLS(gamma=0.05, alpha=final.alpha, basis=final.basis_).fit(kept)
        np.testing.assert_allclose(final.dual_coef_, ref.dual_coef_, rtol=1e-7, atol=1e-9)
        return
    replay = sr.PairwiseSGDRanker(random_state=5)
    for g0, g1 in ((0, 12), (24, 36)):
        for b in s.groups(g0, g1).blocks():
            rows = ~held_out(b.row_qid(), 0.1)
            replay.partial_fit(b.X[rows], b.y[rows], b.row_qid()[rows])
    assert final.t_ == replay.t_
    np.testing.assert_allclose(final.coef_, replay.coef_, rtol=1e-12, atol=1e-15)

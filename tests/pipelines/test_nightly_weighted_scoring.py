"""A weighted model line is gated and validated with the weights it trains on (issue 36, item 3).

Synthetic click days (stores with ``weight``/``click``/``position`` row columns): night 1 in-process, night 2
a real ``streamrank nightly`` process.  The gate's out-of-fold NDCG@10 and disagreement of an ``--ips`` line
equal the IPS-weighted metrics (targets: the clicks, weights 1/p on clicked rows) computed by hand from
RankRLS models refitted without each fold; the validation's current-model figure equals the weighted
metric of the current model on the newest day; the report and the text line say "ips-weighted".  An
unweighted line on the same days is scored unweighted, as before.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import streamrank as sr
from streamrank import metrics as M
from streamrank.clicks import position_based_propensity
from streamrank.io.weighted import ips_weighted, with_weights
from streamrank.pipelines import nightly

SCRIPT = Path(sys.executable).parent / "streamrank"
ALPHAS = "0.1,10,1000"
N_Q, N_DOC, N_F = 40, 8, 5


@pytest.fixture(scope="module")
def days(tmp_path_factory):
    """Two day stores: graded labels from a linear rule, positions from a noisy logging ranker, clicks from
    the position-based model (eta = 1), row weights uniform in [0.5, 2]."""
    d = tmp_path_factory.mktemp("click_days")
    rng = np.random.default_rng(36)
    coef = np.array([1.0, -0.7, 0.5, 0.0, 0.3])
    out = []
    for day in range(2):
        X = rng.normal(size=(N_Q * N_DOC, N_F))
        y = np.clip(np.round(X @ coef + 0.3 * rng.normal(size=len(X)) + 1), 0, 3)
        qid = np.repeat(np.arange(N_Q) + 1000 * day, N_DOC)
        logged = X @ coef + rng.normal(size=len(X))
        pos = np.concatenate([np.argsort(np.argsort(-logged[q * N_DOC:(q + 1) * N_DOC])) + 1 for q in range(N_Q)])
        click = (rng.random(len(X)) < (1.0 / pos) * (y / 3.0)).astype(np.int8)
        w = rng.uniform(0.5, 2.0, len(X))
        s = sr.GroupStore.create(d / f"day-{day}.zarr", N_F, row_columns=("weight", "click", "position"))
        s.append(X, y, qid, weight=w, click=click, position=pos.astype(np.int32))
        out.append(d / f"day-{day}.zarr")
    return out


def _argv(store, models, day, *extra):
    return ["--store", str(store), "--new", str(day), "--models", str(models), "--alphas", ALPHAS, "--no-plot",
            "--no-checks", "--tolerance", "1.0", *extra]


def _second_night_in_a_process(argv):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([str(SCRIPT), "nightly", *argv], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _report(models):
    files = sorted((Path(models) / "reports").glob("*.json"))
    return json.loads(files[-1].read_text())


def _arrays(src):
    blocks = list(src.blocks())
    X = np.concatenate([b.X for b in blocks]).astype(np.float64)
    y = np.concatenate([np.asarray(b.y, dtype=np.float64).reshape(-1) for b in blocks])
    w = np.concatenate([b.weight for b in blocks]) if blocks[0].weight is not None else None
    return X, y, w


def _out_of_fold_scores(src, qid, alpha, ties, n_folds=5):
    """Scores of every row from a RankRLS refitted (on ``src``'s targets and weights) without its fold."""
    from streamrank.rankrls.selection import fold_of

    X, y, w = _arrays(src)
    sizes = np.diff(src.group_ptr)
    group = np.repeat(np.arange(src.n_groups), sizes)
    fold = np.repeat(fold_of(np.asarray(qid), n_folds), sizes)
    s = np.zeros(len(y))
    for f in range(n_folds):
        tr = fold != f
        part = sr.as_source(X[tr], y[tr], group[tr])
        m = sr.RankRLS(alpha=alpha, ties=ties).fit(part if w is None else with_weights(part, w[tr]))
        s[~tr] = m.predict(X[~tr])
    return X, y, w, group, s


@pytest.mark.slow   # two nights (one a process) and ten small refits: ~10 s
def test_an_ips_line_is_gated_and_validated_with_its_training_weights(days, tmp_path):
    store, models = tmp_path / "s.zarr", tmp_path / "m"
    ips = ("--ips", "--propensity", "eta=1")
    assert nightly.main(_argv(store, models, days[0], *ips)) == 0
    line = _second_night_in_a_process(_argv(store, models, days[1], *ips))
    rep = _report(models)
    g = rep["gate"]
    assert g["weighted"] == "ips-weighted" and g["groups"] == [0, N_Q], g
    assert rep["validation"]["weighted"] == "ips-weighted"
    assert f"gate ndcg@10 (ips-weighted) {g['candidate']['ndcg@10']:.4f}" in line, line
    assert "newest day ndcg@10 (ips-weighted)" in line, line

    s = sr.GroupStore.open(store)
    src = ips_weighted(s, position_based_propensity(N_DOC, 1.0))
    cand = sr.load(models / rep["version"])
    X, y, w, group, oof = _out_of_fold_scores(src, s.qid, cand.alpha, "exclude")
    h = group < N_Q                                    # the gate's history: the groups of night 1
    np.testing.assert_array_equal(y, s.read_column("click").astype(np.float64))     # targets: the clicks
    want_ndcg = M.ndcg(y[h], oof[h], group[h], k=10, sample_weight=w[h])
    want_dis = M.disagreement(y[h], oof[h], group[h], sample_weight=w[h])
    assert g["candidate"]["ndcg@10"] == pytest.approx(want_ndcg, rel=1e-6)
    assert g["candidate"]["disagreement"] == pytest.approx(want_dis, rel=1e-6)
    # the figures are the weighted ones: unweighted they differ
    assert want_dis != pytest.approx(M.disagreement(y[h], oof[h], group[h]), rel=1e-3)
    # validation: the current model (v0001) on the newest day, scored with the IPS weights and the clicks
    cur = sr.load(models / "v0001")
    d = ~h
    assert rep["current_metrics"]["ndcg@10"] == pytest.approx(
        M.ndcg(y[d], cur.predict(X[d]), group[d], k=10, sample_weight=w[d]), rel=1e-9)
    assert rep["current_metrics"]["disagreement"] == pytest.approx(
        M.disagreement(y[d], cur.predict(X[d]), group[d], sample_weight=w[d]), rel=1e-9)
    # the data checks (which score the store's labels unweighted) do not take these figures as a reference
    checker = nightly._checker(models, {}, cand, rep["version"], 10, False, {"ips": {"propensity": "eta=1"}})
    assert checker.model_ref == {"ndcg": None, "disagreement": None}


@pytest.mark.slow   # two nights and five small refits: ~5 s
def test_an_unweighted_line_is_scored_as_before(days, tmp_path):
    store, models = tmp_path / "s.zarr", tmp_path / "m"
    for day in days:
        assert nightly.main(_argv(store, models, day)) == 0
    rep = _report(models)
    g = rep["gate"]
    assert "weighted" not in g and "weighted" not in rep["validation"]
    s = sr.GroupStore.open(store)
    cand = sr.load(models / rep["version"])
    X, y, w, group, oof = _out_of_fold_scores(s, s.qid, cand.alpha, cand.ties)
    assert w is None
    h = group < N_Q
    assert g["candidate"]["ndcg@10"] == pytest.approx(M.ndcg(y[h], oof[h], group[h], k=10), rel=1e-6)
    assert g["candidate"]["disagreement"] == pytest.approx(M.disagreement(y[h], oof[h], group[h]), rel=1e-6)
    checker = nightly._checker(models, {}, cand, rep["version"], 10, False, None)
    assert checker.model_ref == {"ndcg": rep["metrics"]["ndcg@10"], "disagreement": rep["metrics"]["disagreement"]}

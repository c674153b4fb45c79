"""``streamrank recipe clicks``: a simulated click log on a slice of the real MQ2008 archive, as a store with
click/position columns — equal to the library's simulation of the same rows, and trainable by IPS from the store."""
from __future__ import annotations

import numpy as np
import pytest

import streamrank as sr
from recipes_testdata import need
from streamrank.cli import main as cli_main


def _graded(limit):
    from streamrank.datasets import letor

    archive = need("letor/MQ2008_QueryLevelNorm.tar.gz")
    parts = list(letor.iter_letor(archive, member=letor.letor_member("MQ2008", 1, "train"), n_features=46,
                                  limit_rows=limit))
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]).astype(np.float64),
            np.concatenate([p[2] for p in parts]))


def _read(store):
    blocks = list(store.blocks(max_rows=1 << 20))
    return (np.concatenate([b.X for b in blocks]), np.concatenate([b.y for b in blocks]),
            np.concatenate([b.row_qid() for b in blocks]), store.read_column("click"), store.read_column("position"))


@pytest.mark.slow   # simulates a click log and trains: ~2 s warm
def test_click_store_is_the_simulated_log_and_trains_by_ips(tmp_path, recipe, capsys):
    from streamrank.clicks import estimate_propensity, ips_weights
    from streamrank.datasets.clicks import simulate_clicks
    from streamrank.io.weighted import ips_weighted

    need("letor/MQ2008_QueryLevelNorm.tar.gz")
    rec = recipe("clicks")
    out, rnd = tmp_path / "clicks.zarr", tmp_path / "random.zarr"
    args = ["--dataset", "MQ2008", "--fold", "1", "--limit", "400", "--sessions", "4", "--randomized-sessions", "6",
            "--eta", "1.5", "--log-queries", "3", "--seed", "7", "--batch-rows", "150", "--out", str(out),
            "--randomized-out", str(rnd)]
    assert rec.main(args) == 0
    text = capsys.readouterr().out
    assert "Qin and T.-Y. Liu" in text and "Joachims" in text and "eta=1.5" in text
    # the same rows, logging ranker and seeds through the library: the stored log is that log
    X, y, qid = _graded(400)
    score = rec.logging_scores(X.astype(np.float64), y, qid, 3, 7)
    log = simulate_clicks(y, qid, score, k=10, eta=1.5, n_sessions=4, random_state=8)
    store = sr.GroupStore.open(out)
    assert set(store.row_columns) == {"click", "position"}
    Xs, ys, qs, click, position = _read(store)
    np.testing.assert_array_equal(Xs, X[log.row])
    np.testing.assert_array_equal(ys, log.clicks)
    np.testing.assert_array_equal(click, log.clicks)
    np.testing.assert_array_equal(position, log.position)
    np.testing.assert_array_equal(qs, log.session)
    assert store.n_groups == log.n_sessions == 4 * np.unique(qid).size
    assert store.verify() == len(store.batches) > 1             # every batch (appended by whole sessions) checks
    assert 0 < log.clicks.mean() < 0.5 and position.min() == 1 and position.max() <= 10
    # position bias: a clicked row was shown higher on average than the rows shown
    assert position[click == 1].mean() < position.mean()
    # IPS from the store's columns = the in-memory IPS fit of the same log (1e-8)
    p = log.propensity
    from_store = sr.RankRLS(alpha=1.0, ties="exclude").fit(ips_weighted(store, p, clip=0.05))
    mem = sr.RankRLS(alpha=1.0, ties="exclude").fit(
        X[log.row].astype(np.float64), log.clicks, log.session,
        sample_weight=ips_weights(log.clicks, log.position, p, clip=0.05))
    np.testing.assert_allclose(from_store.coef_, mem.coef_, rtol=1e-8, atol=1e-10)
    # the randomized sessions estimate p from the store's columns (noisy on 400 rows: ranks 1..3, loosely)
    r = sr.GroupStore.open(rnd)
    _, _, _, rc, rp = _read(r)
    assert r.n_groups == 6 * np.unique(qid).size
    est = estimate_propensity(rc, rp, 10)
    assert est[0] == 1.0 and est[1] < 1.0


@pytest.mark.slow   # a click recipe through the CLI: 3.9 s wall under load 11
def test_recipe_through_the_cli_and_its_refusals(tmp_path, capsys):
    need("letor/MQ2008_QueryLevelNorm.tar.gz")
    out = tmp_path / "c.zarr"
    assert cli_main(["recipe", "clicks", "--limit", "200", "--sessions", "2", "--out", str(out)]) == 0
    assert sr.GroupStore.open(out).n_rows > 0
    capsys.readouterr()
    assert cli_main(["recipe", "clicks", "--limit", "200", "--out", str(out)]) == 5      # exists
    assert "pass --overwrite" in capsys.readouterr().err
    assert cli_main(["recipe", "clicks", "--noise", "2", "--out", str(tmp_path / "d.zarr")]) == 2
    assert "--noise" in capsys.readouterr().err
    assert cli_main(["recipe", "clicks", "--data-dir", str(tmp_path), "--out", str(tmp_path / "e.zarr")]) == 3
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("batch_rows", [1, 37])
@pytest.mark.slow   # simulated click logs: ~1 s warm
def test_batches_hold_whole_sessions(tmp_path, recipe, batch_rows):
    """Appends cut only between sessions, whatever --batch-rows (a session is one query group of the store)."""
    from streamrank.datasets.clicks import simulate_clicks

    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, size=60).astype(float)
    qid = np.repeat(np.arange(6), 10)
    X = rng.normal(size=(60, 3)).astype(np.float32)
    log = simulate_clicks(y, qid, rng.normal(size=60), k=5, n_sessions=3, random_state=1)
    store = recipe("clicks").write_click_store(tmp_path / f"s{batch_rows}.zarr", X, log, batch_rows=batch_rows)
    assert store.n_groups == 18 and store.n_rows == 90
    np.testing.assert_array_equal(np.diff(store.group_ptr), np.full(18, 5))

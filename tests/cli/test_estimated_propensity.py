"""``fit --ips --propensity estimate:em | estimate:harvest``: θ estimated from the training store itself (issue 37)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import streamrank as sr
from streamrank.clicks import ips_weights
from streamrank.datasets.clicks import simulate_position_bias
from streamrank.position_bias import estimate_propensity_em, harvest_propensity

from _cli_inproc import run_cli as run


@pytest.fixture(scope="module")
def click_store(tmp_path_factory):
    log = simulate_position_bias(n_queries=60, n_sessions=800, n_features=4, n_rankers=3, eta=1.0,
                                 random_state=4)
    path = tmp_path_factory.mktemp("est") / "clicks.zarr"
    s = sr.GroupStore.create(path, 4, row_columns=("click", "position", "ranker"))
    s.append(log.X, log.clicks, log.session, click=log.clicks, position=log.position, ranker=log.ranker)
    return path, log


def _record(model):
    import zarr

    attrs = dict(zarr.open_group(str(model), mode="r").attrs)
    found = []

    def walk(v):
        if isinstance(v, dict):
            if "ips" in v and isinstance(v["ips"], dict):
                found.append(v["ips"])
            for x in v.values():
                walk(x)
        elif isinstance(v, str) and v.startswith("{"):
            try:
                walk(json.loads(v))
            except ValueError:
                pass
    walk(attrs)
    return found[0]


@pytest.mark.parametrize("spec", ["estimate:em", "estimate:harvest"])
def test_fit_with_estimated_propensity_equals_the_library(click_store, tmp_path, spec):
    path, log = click_store
    rc, _, err = run("fit", "--store", path, "--model", tmp_path / "m.zarr", "--alpha", "0.5", "-q",
                     "--learner", "rankrls", "--ips", "--propensity", spec, "--clip", "0.05")
    assert rc == 0, err
    store = sr.GroupStore.open(path)
    theta = estimate_propensity_em(store).theta if spec == "estimate:em" else harvest_propensity(store).theta
    X32 = log.X.astype(np.float32).astype(np.float64)
    want = sr.RankRLS(alpha=0.5, ties="exclude").fit(
        X32, log.clicks, log.session, sample_weight=ips_weights(log.clicks, log.position, theta, clip=0.05))
    np.testing.assert_allclose(sr.load(tmp_path / "m.zarr").coef_, want.coef_, rtol=0, atol=1e-8)
    note = _record(tmp_path / "m.zarr")
    assert note["propensity"] == spec
    np.testing.assert_allclose(note["estimated"]["theta"], theta, rtol=1e-12)


def test_estimated_specs_refuse_a_store_without_the_columns(tmp_path):
    log = simulate_position_bias(n_queries=10, n_sessions=50, n_features=2, random_state=0)
    s = sr.GroupStore.create(tmp_path / "s.zarr", 2, row_columns=("click", "position"))
    s.append(log.X, log.clicks, log.session, click=log.clicks, position=log.position)
    rc, _, err = run("fit", "--store", tmp_path / "s.zarr", "--model", tmp_path / "m.zarr", "-q",
                     "--learner", "rankrls", "--ips", "--propensity", "estimate:harvest")
    assert rc != 0 and "keeps no 'ranker' column" in err
    from streamrank.io.weighted import propensity_from_spec

    with pytest.raises(ValueError, match="estimated from the training store itself"):
        propensity_from_spec("estimate:em")


def test_ingest_ranker_column_then_harvest(tmp_path):
    """``ingest --ranker-column``: a Parquet column kept as the store's ranker column, harvest reads it."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    log = simulate_position_bias(n_queries=30, n_sessions=600, n_features=3, n_rankers=3, random_state=1)
    cols = {f"f_{j}": log.X[:, j].astype(np.float32) for j in range(3)}
    cols.update(session=log.session, clicked=log.clicks.astype(np.int8), rank=log.position.astype(np.int32),
                rk=log.ranker.astype(np.int32))
    pq.write_table(pa.table(cols), tmp_path / "day.parquet")
    rc, _, err = run("ingest", tmp_path / "day.parquet", "--store", tmp_path / "s.zarr", "--label", "clicked",
                     "--qid", "session", "--features-from-prefix", "f_", "--click-column", "clicked",
                     "--position-column", "rank", "--ranker-column", "rk", "-q")
    assert rc == 0, err
    s = sr.GroupStore.open(tmp_path / "s.zarr")
    assert s.row_columns == ("click", "position", "ranker")
    np.testing.assert_array_equal(s.read_column("ranker"), log.ranker)
    want = harvest_propensity(key=log.doc, clicks=log.clicks, position=log.position, ranker=log.ranker)
    np.testing.assert_allclose(harvest_propensity(s).theta, want.theta, rtol=1e-12)

"""BlockSource.groups(g0, g1): a contiguous run of groups as a source (the nightly's new groups of a store)."""
from __future__ import annotations

import numpy as np
import pytest

import streamrank as sr
from streamrank.io.weighted import with_weights


@pytest.fixture
def rng():
    return np.random.default_rng(17)


def _data(rng, sizes=(3, 1, 4, 2, 5)):
    n = sum(sizes)
    X = rng.normal(size=(n, 3))
    y = rng.integers(0, 3, n).astype(float)
    qid = np.repeat(np.arange(10, 10 + len(sizes)), sizes)
    return X, y, qid, np.concatenate(([0], np.cumsum(sizes)))


@pytest.mark.parametrize("where", ["arrays", "store"])
def test_groups_hold_exactly_those_rows(where, rng, tmp_path):
    X, y, qid, gp = _data(rng)
    if where == "store":
        sr.GroupStore.create(tmp_path / "s.zarr", n_features=3).append(X, y, qid)
        src = sr.GroupStore.open(tmp_path / "s.zarr")
        X = np.concatenate([b.X for b in src.blocks()])       # as stored (float32)
    else:
        src = sr.as_source(X, y, qid)
    for g0, g1 in [(0, 5), (1, 3), (2, 2), (4, 5)]:
        part = src.groups(g0, g1)
        assert (part.n_groups, part.n_rows, part.n_features) == (g1 - g0, gp[g1] - gp[g0], 3)
        np.testing.assert_array_equal(part.group_ptr, gp[g0:g1 + 1] - gp[g0])
        blocks = list(part.blocks(max_rows=5))           # several blocks, each inside the range
        got_X = np.concatenate([b.X for b in blocks]) if blocks else np.zeros((0, 3))
        np.testing.assert_array_equal(got_X, X[gp[g0]:gp[g1]])
        np.testing.assert_array_equal(np.concatenate([b.row_qid() for b in blocks]) if blocks else [],
                                      qid[gp[g0]:gp[g1]])
        np.testing.assert_array_equal(part.read_y(0, part.n_rows), y[gp[g0]:gp[g1]])


def test_groups_keep_row_weights_and_refuse_bad_ranges(rng):
    X, y, qid, gp = _data(rng)
    w = rng.uniform(0.5, 2.0, len(y))
    part = with_weights(sr.as_source(X, y, qid), w).groups(1, 4)
    got = np.concatenate([b.weight for b in part.blocks(max_rows=4)])
    np.testing.assert_array_equal(got, w[gp[1]:gp[4]])
    # a learner fitted on the range equals one fitted on those rows
    a = sr.RankRLS(alpha=0.5).fit(part)
    b = sr.RankRLS(alpha=0.5).fit(X[gp[1]:gp[4]], y[gp[1]:gp[4]], qid[gp[1]:gp[4]], sample_weight=w[gp[1]:gp[4]])
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-10)
    src = sr.as_source(X, y, qid)
    for g0, g1 in [(-1, 2), (3, 2), (0, 6)]:
        with pytest.raises(ValueError, match="outside the source's 5 groups"):
            src.groups(g0, g1)

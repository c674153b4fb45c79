"""A store's weight column is read with the rows that use it, never whole (memory O(block), not O(rows)).

PairwiseSGDRanker's pairs carry the weights of the block they were drawn from (``PairBatch.pair_weight``)
and cg's groups cut across blocks get W_g from one streamed pass (``rankrls._group_weights``).  Each read
of the column is counted through the store; the results are the same floats as the in-memory weights'
(which is how they were computed before: ``w[rows[:, 0]] * w[rows[:, 1]]`` and differences of
``np.cumsum`` of the whole column).
"""
from __future__ import annotations

import numpy as np
import pytest

import streamrank as sr
from streamrank.io.pairs import pairs_from_groups
from streamrank.io.weighted import with_weights
from streamrank.rankrls._group_weights import GroupWeightTotals, weight_totals

SIZES = [40, 5, 300, 9, 120, 2, 60, 7]          # groups of 300, 120, 60, 40 rows are cut at max_rows=32


def _data(seed=3):
    rng = np.random.default_rng(seed)
    m = sum(SIZES)
    X = rng.normal(size=(m, 4)).astype(np.float32)
    y = rng.integers(0, 4, size=m).astype(float)
    qid = np.repeat(np.arange(len(SIZES)), SIZES)
    w = rng.uniform(0.1, 3.0, size=m)
    w[rng.random(m) < 0.1] = 0.0
    return X, y, qid, w


@pytest.fixture
def counted(tmp_path):
    """A weighted store whose weight reads are recorded as (r0, r1)."""
    X, y, qid, w = _data()
    st = sr.GroupStore.create(tmp_path / "s.zarr", n_features=X.shape[1], row_columns=("weight",))
    st.append(X, y, qid, weight=w)
    st = sr.GroupStore.open(tmp_path / "s.zarr")
    reads = []
    plain = st.read_column

    def read_column(name, r0=0, r1=None):
        out = plain(name, r0, r1)
        if name == "weight":
            reads.append(len(out))
        return out

    st.read_column = read_column
    return st, (X, y, qid, w), reads


def test_pairwise_sgd_reads_weights_per_block_and_equals_the_in_memory_fit(counted):
    st, (X, y, qid, w), reads = counted
    src = with_weights(st, "weight")
    for max_rows in (32, 128):                       # 32: groups larger than a block, sampled piece by piece
        reads.clear()
        a = sr.PairwiseSGDRanker(random_state=1).fit(src, n_pairs=2000, max_rows=max_rows, batch_size=64)
        b = sr.PairwiseSGDRanker(random_state=1).fit(X, y, qid, sample_weight=w, n_pairs=2000, max_rows=max_rows,
                                                     batch_size=64)
        np.testing.assert_array_equal(a.coef_, b.coef_)
        assert reads and max(reads) <= max_rows, (max_rows, max(reads))
        assert sum(reads) >= len(w)                  # every row's weight was read: in pieces
    assert src._all is None                          # the whole-column cache was never filled


@pytest.mark.filterwarnings("ignore:.*exceed the block budget")   # all pairs of a 300-row group: one block
def test_pair_weights_are_the_products_of_the_row_weights_bit_for_bit():
    X, y, qid, w = _data(5)
    src = with_weights(sr.as_source(X, y, qid), w)
    n = 0
    for max_rows in (32, 1000):
        for sampled in (None, 700):
            for b in pairs_from_groups(src, sampled, random_state=2, max_rows=max_rows, batch_size=50, shuffle=True):
                np.testing.assert_array_equal(b.pair_weight, w[b.rows[:, 0]] * w[b.rows[:, 1]])
                n += len(b)
    assert n > 1000
    plain = next(pairs_from_groups(sr.as_source(X, y, qid), 10, random_state=2))
    assert plain.pair_weight is None


@pytest.mark.parametrize("ties", ["include", "exclude"])
def test_cg_split_groups_read_weights_per_block_and_equal_the_in_memory_fit(counted, ties):
    st, (X, y, qid, w), reads = counted
    src = with_weights(st, "weight")
    a = sr.RankRLS(alpha=1.0, solver="cg", ties=ties).fit(src, max_rows=32)
    b = sr.RankRLS(alpha=1.0, solver="cg", ties=ties).fit(X, y, qid, sample_weight=w, max_rows=32)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert reads and max(reads) <= 32, max(reads)
    assert src._all is None


@pytest.mark.parametrize("max_rows", [1, 3, 32, 100, 10_000, None])
def test_group_totals_equal_the_whole_column_cumsum_bit_for_bit(max_rows):
    X, y, qid, w = _data(11)
    src = with_weights(sr.as_source(X, y, qid), w)
    gp = np.asarray(src.group_ptr)
    cw = np.concatenate(([0.0], np.cumsum(w)))      # the formula of the whole-column version
    total = weight_totals(src, max_rows)
    assert isinstance(total, GroupWeightTotals)
    for g in [2, 0, 4, 6, 2, len(SIZES) - 1]:        # split groups first, then others (re-read), again
        assert total(g) == cw[gp[g + 1]] - cw[gp[g]]
    assert weight_totals(sr.as_source(X, y, qid), max_rows) is None


def test_group_totals_hold_one_piece_and_look_through_views():
    X, y, qid, w = _data(13)
    src = with_weights(sr.as_source(X, y, qid), w)
    sizes = []
    base_read = src._read_weight

    def read(r0, r1):
        sizes.append(r1 - r0)
        return base_read(r0, r1)

    src._read_weight = read
    total = weight_totals(src, 16)
    total(2)                                         # the first request reads up to the last group > 16 rows
    assert max(sizes) <= 16 and sum(sizes) == total.rows_read == np.asarray(src.group_ptr)[-2]
    n = len(sizes)
    total(4), total(6)                               # kept from the same pass: nothing read again
    assert len(sizes) == n
    view = sr.as_source(X, y, qid)
    wrapped = type("View", (), {"inner": src, "group_ptr": src.group_ptr})()
    assert weight_totals(wrapped, 16).source is src and weight_totals(view, 16) is None

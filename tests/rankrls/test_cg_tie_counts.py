"""_split_groups.TieCounts: the first pass of a TieTable as a mergeable sum (what the dask setup step reduces).

Whatever the order the pieces are added and merged in, the table equals the
one built by ``TieTable.build`` and its class sums equal the explicit sums.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from streamrank.rankrls import _split_groups


def _pieces(X, y, qid, max_rows):
    return [b for b in sr.as_source(X, y, qid).blocks(max_rows=max_rows, split_groups=True) if _split_groups._is_piece(b)]


def _tree(parts, fan):
    while len(parts) > 1:
        nxt = []
        for i in range(0, len(parts), fan):
            acc = _split_groups.TieCounts(parts[i].n_features, parts[i].n_outputs, parts[i].cache_entries)
            for p in parts[i:i + fan]:
                acc.merge(p)
            nxt.append(acc)
        parts = nxt
    return parts[0]


def _table(pieces, n, v, max_rows, cache_entries, fan, order):
    parts = []
    for i in order:
        parts.append(_split_groups.TieCounts(n, v, cache_entries).add_piece(pieces[i]))
    tab = _split_groups.TieTable.from_counts(_tree(parts, fan), max_rows)
    if tab.needs_tied_sums:
        for i in order[::-1]:
            tab.add_tied_sums(int(pieces[i].group_start), tab.tied_sums_of_piece(pieces[i]))
        tab.needs_tied_sums = False
    return tab


@pytest.mark.parametrize("cache_entries", [1 << 20, 70, 0])
@pytest.mark.parametrize("sparse", [False, True])
def test_merged_counts_equal_build_any_order(cache_entries, sparse, rng):
    n = 4
    X = rng.normal(size=(60, n))
    X[np.abs(X) < 0.5] = 0
    y = np.round(rng.normal(size=(60, 2)), 1)
    qid = np.r_[np.zeros(40, np.int64), np.ones(20, np.int64)]       # two split groups at max_rows=7
    Xin = sp.csr_matrix(X) if sparse else X
    want = _split_groups.TieTable.build(sr.as_source(Xin, y, qid), 7, cache_entries)
    pieces = _pieces(Xin, y, qid, 7)
    assert len({int(b.group_start) for b in pieces}) == 2
    for fan, order in ((2, range(len(pieces))), (3, rng.permutation(len(pieces)))):
        got = _table(pieces, n, 2, 7, cache_entries, fan, list(order))
        assert (got.cached, got.n_passes) == (want.cached, want.n_passes)
        assert got.groups.keys() == want.groups.keys()
        for gid in want.groups:
            for (v1, c1, t1, S1, _), (v2, c2, t2, S2, _) in zip(got.groups[gid], want.groups[gid]):
                np.testing.assert_array_equal(v1, v2)
                np.testing.assert_array_equal(c1, c2)
                np.testing.assert_array_equal(t1, t2)
                assert (S1 is None) == (S2 is None)
                if S1 is not None:
                    np.testing.assert_allclose(S1, S2, rtol=1e-12, atol=1e-12)
    # the cached sums are the explicit class sums of the tied values
    if want.cached:
        for gid, rows in ((0, slice(0, 40)), (1, slice(40, 60))):
            for o in range(2):
                vals, cnt, tied, S, _ = want.groups[gid][o]
                for c in np.flatnonzero(tied >= 0):
                    np.testing.assert_allclose(S[tied[c]], X[rows][y[rows, o] == vals[c]].sum(axis=0),
                                               atol=1e-12)
    light = want.without_sums()
    assert all(t[3] is None for ent in light.groups.values() for t in ent)
    b = pieces[0]
    c1, n1 = light.rows(b, _split_groups._block_Y(b, 2), 1)
    c2, n2 = want.rows(b, _split_groups._block_Y(b, 2), 1)
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_array_equal(n1, n2)


def test_piece_sums_not_computed_beyond_budget(rng):
    """A piece whose distinct values alone exceed the budget never allocates their (values, n) sums."""
    X = rng.normal(size=(30, 5))
    y = np.arange(30.0)
    piece = _pieces(X, y, None, 10)[0]
    tc = _split_groups.TieCounts(5, 1, 49).add_piece(piece)        # 10 values x 5 features > 49
    assert not tc.cache and tc.groups[0][0][2] is None
    tc = _split_groups.TieCounts(5, 1, 50).add_piece(piece)
    assert tc.cache and tc.groups[0][0][2].shape == (10, 5)
    tc.merge(_split_groups.TieCounts(5, 1, 50).add_piece(_pieces(X, y, None, 10)[1]))   # 20 values: no longer fits
    assert not tc.cache and tc.groups[0][0][2] is None and tc.groups[0][0][1].sum() == 20

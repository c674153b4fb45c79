"""Memory bounds of the SGD rankers (issue 16).

* SparseSGDRanker: W has a bound (``max_memory_bytes``); a weak L1 ends in a MemoryLimitError naming
  the parameter, with the model holding the steps before it — not in a bare MemoryError after GBs.
* PairwiseSGDRanker: a query group larger than ``max_rows`` is streamed in pieces; memory does not grow
  with the size of one group (was: the group read whole, plus sort arrays over all its rows).
"""
from __future__ import annotations

import collections
import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from streamrank.io.pairs import pairs_from_groups
from streamrank.sgd import MemoryLimitError


def _tuples(n=600, nf=300, seed=1):
    return [sp.random(n, nf, density=0.03, format="csr", random_state=seed + k) for k in range(3)]


def test_bilinear_w_memory_bound_is_an_error_naming_the_parameter():
    Q, Dp, Dn = _tuples()
    free = sr.SparseSGDRanker(eta0=1.0, l1=0.0, init="zeros").partial_fit(Q, Dp, Dn)
    assert free.get_params()["max_memory_bytes"] is None
    bound = free.memory_bytes_ // 4
    m = sr.SparseSGDRanker(eta0=1.0, l1=0.0, init="zeros", max_memory_bytes=bound)
    with pytest.raises(MemoryLimitError, match=rf"more than max_memory_bytes={bound}; raise l1") as e:
        m.partial_fit(Q, Dp, Dn)
    assert isinstance(e.value, MemoryError)
    # the model holds the steps before the one that did not fit: the same W as those steps alone
    t = m.t_
    assert 0 < t < Q.shape[0] and m.memory_bytes_ <= bound + 8 * (t + 1)
    ref = sr.SparseSGDRanker(eta0=1.0, l1=0.0, init="zeros").partial_fit(Q[:t], Dp[:t], Dn[:t])
    assert (m.W_ != ref.W_).nnz == 0


def test_bilinear_w_below_the_bound_is_unchanged():
    """Near the bound the pool grows by less than doubling; W is the same as without a bound."""
    Q, Dp, Dn = _tuples()
    free = sr.SparseSGDRanker(eta0=1.0, l1=1e-4, init="zeros", shrink_every=10).partial_fit(Q, Dp, Dn)
    W = free.W_
    tight = 12 * W.nnz + 32 * Q.shape[1] + 4096          # entries + row records + slack of the segments
    m = sr.SparseSGDRanker(eta0=1.0, l1=1e-4, init="zeros", shrink_every=10,
                           max_memory_bytes=max(tight * 2, free.memory_bytes_ * 3 // 4))
    m.partial_fit(Q, Dp, Dn)
    assert m.memory_bytes_ <= m.max_memory_bytes + 8 * (m.t_ // 10 + 1)   # + the threshold sums
    assert (m.W_ != W).nnz == 0
    with pytest.raises(ValueError, match="max_memory_bytes"):
        sr.SparseSGDRanker(max_memory_bytes=0).partial_fit(Q, Dp, Dn)


def test_bilinear_default_bound_is_half_the_physical_memory():
    from streamrank.sgd.bilinear import _half_physical_memory

    m = sr.SparseSGDRanker()
    assert m._params()["max_bytes"] == _half_physical_memory() > 1 << 20


# ------------------------------------------------------------------ pairwise, giant groups
Y12 = np.array([0, 2, 1, 0, 2, 2, 1, 0, 3, 0, 1, 0.0])


@pytest.mark.parametrize("sparse", [False, pytest.param(True, marks=pytest.mark.slow)])   # the CSR twin: 2.2 s wall under load 13
def test_split_group_pairs_are_uniform_over_preference_pairs(sparse):
    """A 12-row group cut in pieces of 4: every ordered pair with y_i > y_j, each with probability 1/T."""
    X = np.arange(24, dtype=np.float64).reshape(12, 2) + 1
    src = sr.as_source(sp.csr_matrix(X) if sparse else X, Y12, np.full(12, 7))
    counts = collections.Counter()
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no OversizedGroupWarning: the group is never read whole
        for b in pairs_from_groups(src, 60_000, random_state=1, max_rows=4, batch_size=999, shuffle=True):
            Xp = b.X_pos.toarray() if sparse else b.X_pos
            Xn = b.X_neg.toarray() if sparse else b.X_neg
            np.testing.assert_array_equal(Xp, X[b.rows[:, 0]])
            np.testing.assert_array_equal(Xn, X[b.rows[:, 1]])
            np.testing.assert_array_equal(b.y_diff, Y12[b.rows[:, 0]] - Y12[b.rows[:, 1]])
            assert (b.qid == 7).all() and len(b) <= 999
            counts.update(map(tuple, b.rows.tolist()))
    pairs = [(i, j) for i in range(12) for j in range(12) if Y12[i] > Y12[j]]
    assert set(counts) == set(pairs) and sum(counts.values()) == 60_000
    from scipy.stats import chisquare   # here, not at collection: scipy.stats costs ~0.5 CPU-s to import

    assert chisquare([counts[p] for p in pairs]).pvalue > 1e-3


def test_split_and_whole_groups_share_the_draws_like_the_multinomial():
    """Mixed sources: a giant group among small ones gets its Binomial share (uniform over eligible queries)."""
    y = np.concatenate([Y12, [1, 0, 1, 0], [2, 2, 2], [0, 1]])         # the third group is not eligible
    qid = np.repeat([1, 2, 3, 4], [12, 4, 3, 2])
    X = np.random.default_rng(0).normal(size=(len(y), 3))
    per = collections.Counter()
    for b in pairs_from_groups(sr.as_source(X, y, qid), 30_000, random_state=2, max_rows=5):
        per.update(b.qid.tolist())
    assert sum(per.values()) == 30_000 and 3 not in per
    assert all(abs(per[q] - 10_000) < 500 for q in (1, 2, 4)), per


def _peak_fit(X, y, qid, **kw):
    src = sr.as_source(X, y, qid)
    tracemalloc.start()
    try:
        sr.PairwiseSGDRanker(eta0=0.1).fit(src, **kw)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow   # memory measured over many steps: ~0.7 s warm
def test_pairwise_memory_does_not_grow_with_one_group():
    rng = np.random.default_rng(0)
    n = 120_000
    X = rng.normal(size=(n, 4))
    y = rng.integers(0, 5, n).astype(np.float64)
    kw = dict(n_pairs=20_000, max_rows=2_000, batch_size=1_000)
    _peak_fit(X[:50], y[:50], np.zeros(50, int), n_pairs=50)            # compile outside the measure
    small = _peak_fit(X, y, np.repeat(np.arange(n // 10), 10), **kw)
    half = _peak_fit(X[: n // 2], y[: n // 2], np.zeros(n // 2, int), **kw)
    giant = _peak_fit(X, y, np.zeros(n, int), **kw)
    # was: ~8 MiB for the giant group (it and sort arrays over all its rows), ~4 MiB for half of it
    assert giant < 3 * small + (1 << 20), (giant, small)
    assert giant < 1.3 * half + (256 << 10), (giant, half)


@pytest.mark.slow   # a CLI ingest and fit: 2.0 s wall under load 11
def test_cli_fit_sgd_bilinear_memory_bound_is_one_line_exit_6(tmp_path, capsys):
    from streamrank.cli import main

    rng = np.random.default_rng(0)
    Q = sp.random(40, 300, density=0.05, format="csr", random_state=1)
    D = sp.random(60, 300, density=0.05, format="csr", random_state=2)
    t = np.stack([rng.integers(0, 40, 2000), rng.integers(0, 60, 2000), rng.integers(0, 60, 2000)], axis=1)
    ts = sr.TupleStore.create(tmp_path / "t.zarr", 300, 300)
    ts.append(Q, D, t, batch_id="day-1")
    argv = ["fit", "--store", str(tmp_path / "t.zarr"), "--model", str(tmp_path / "w.zarr"),
            "--learner", "sgd-bilinear", "--l1", "0", "--init", "zeros", "--eta0", "1", "-q"]
    assert main(argv + ["--max-memory-mb", "0.05"]) == 6
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "max_memory_bytes=52428" in err and "raise l1" in err
    assert not (tmp_path / "w.zarr").exists()
    assert main(argv + ["--max-memory-mb", "64"]) == 0, capsys.readouterr().err

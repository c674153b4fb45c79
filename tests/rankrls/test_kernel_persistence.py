"""A KernelRankRLS loaded with sr.load computes path, hold-outs and CV exactly like the fitted one."""
from __future__ import annotations

import numpy as np
import pytest
import zarr
from rankrls_testdata import make_groups

import streamrank as sr


def _roundtrip(m, path):
    sr.save(m, path)
    return sr.load(path)


def _close(a, b, tol=1e-10):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    assert np.abs(a - b).max() <= tol * max(np.abs(b).max(), 1.0)


@pytest.mark.parametrize("kw", [dict(kernel="rbf", gamma=0.4), dict(kernel="poly", degree=2, coef0=1.0),
                                dict(kernel="linear")])
@pytest.mark.parametrize("gw,ties", [("pair", "include"), ("query", "exclude"), ("size", "include")])
def test_loaded_dual_path_lqo_cv_equal_in_memory(kw, gw, ties, rng, tmp_path):
    X, y, qid, _ = make_groups(rng, n_groups=6, n_features=3, levels=3, min_size=2)
    m = sr.KernelRankRLS(alpha=0.7, group_weight=gw, ties=ties, **kw).fit(X, y, qid)
    m2 = _roundtrip(m, tmp_path / "m")
    alphas = [0.01, 0.7, 20.0]
    _close(m2.path(alphas), m.path(alphas))
    _close(m2.leave_query_out(), m.leave_query_out())
    _close(m2.leave_query_out(alpha=3.0), m.leave_query_out(alpha=3.0))
    r2 = m2.cross_validate(None, alphas, folds=3, scoring="squared")
    r1 = m.cross_validate(None, alphas, folds=3, scoring="squared")
    _close(r2.scores, r1.scores)
    assert r2.best_alpha == r1.best_alpha
    _close(m2.dual_coef_, m.dual_coef_)


def test_loaded_dual_multi_output_and_reloaded_twice(rng, tmp_path):
    X, y, qid, _ = make_groups(rng, n_groups=5, n_features=3, n_outputs=2, min_size=2)
    m = sr.KernelRankRLS(alpha=0.5, gamma=0.3).fit(X, y, qid)
    m2 = _roundtrip(m, tmp_path / "a")
    m3 = _roundtrip(m2, tmp_path / "b")          # a loaded model saves everything again
    for mm in (m2, m3):
        _close(mm.path([0.1, 2.0]), m.path([0.1, 2.0]))
        _close(mm.leave_query_out(), m.leave_query_out())
    want = m.cross_validate(None, [0.1, 2.0], folds="query", scoring="ndcg@3")   # (sets m.best_alpha_)
    for mm in (m2, m3):
        r = mm.cross_validate(None, [0.1, 2.0], folds="query", scoring="ndcg@3")
        _close(r.scores, want.scores)
        _close(mm.cv_predictions_, m.cv_predictions_)


@pytest.mark.parametrize("gw", ["pair", "query", "size"])
@pytest.mark.parametrize("ties", ["include", "exclude"])
def test_loaded_object_ranking_leave_pair_out(gw, ties, rng, tmp_path):
    X, y, _, _ = make_groups(rng, n_groups=3, n_features=3, min_size=4, levels=3)
    m = sr.KernelRankRLS(alpha=0.2, gamma=0.5, group_weight=gw, ties=ties).fit(X, y)
    m2 = _roundtrip(m, tmp_path / "m")
    iu, ju = np.triu_indices(len(y), 1)
    pairs = np.stack([iu, ju], axis=1)
    _close(m2.leave_pair_out(pairs), m.leave_pair_out(pairs))
    _close(m2.leave_pair_out(pairs[:7], alpha=5.0), m.leave_pair_out(pairs[:7], alpha=5.0))
    _close(m2.path([0.2, 1.0]), m.path([0.2, 1.0]))


def test_loaded_sparse_path_lqo_kfold(rng, tmp_path):
    X, y, qid, _ = make_groups(rng, n_groups=8, n_features=3, min_size=2)
    src = sr.as_source(X, y, qid)
    m = sr.KernelRankRLS(alpha=0.5, gamma=0.4, n_basis=10, random_state=1).fit(src, max_rows=7)
    m2 = _roundtrip(m, tmp_path / "m")
    _close(m2.path([0.05, 0.5, 5.0]), m.path([0.05, 0.5, 5.0]))
    with pytest.raises(ValueError, match="source="):
        m2.leave_query_out()
    _close(m2.leave_query_out(source=src), m.leave_query_out())
    _close(m2.leave_query_out(alpha=2.0, source=src), m.leave_query_out(alpha=2.0))
    with pytest.raises(ValueError, match="source="):
        m2.cross_validate(None, [0.1, 1.0], folds=3)
    assert m2.n_groups_ == m.n_groups_
    # with the data it refits (same reservoir seed, same basis) and agrees with the in-memory CV
    r2 = m2.cross_validate(src, [0.1, 1.0], folds=3)
    r1 = m.cross_validate(src, [0.1, 1.0], folds=3)
    _close(r2.scores, r1.scores)


def test_file_written_before_the_extra_arrays_still_loads(rng, tmp_path):
    """Backward compatibility (format version 1 without train_* / stats_* arrays): predict works,
    path and hold-outs ask for a refit."""
    X, y, qid, _ = make_groups(rng, n_groups=4, n_features=3, min_size=2)
    for kw, extra in ((dict(), ("train_y", "train_group_ptr", "train_group_qid")),
                      (dict(n_basis=5, random_state=0), ("stats_G", "stats_B"))):
        m = sr.KernelRankRLS(alpha=0.5, **kw).fit(X, y, qid)
        p = tmp_path / ("old" + str(len(extra)))
        sr.save(m, p)
        g = zarr.open_group(str(p), mode="r+")
        g.attrs["arrays"] = [a for a in g.attrs["arrays"] if a not in extra]
        del g.attrs["saved_arrays"]        # nor the record of its chunks (streamrank._model_record): an old model
        old = sr.load(p)
        np.testing.assert_array_equal(old.predict(X), m.predict(X))
        with pytest.raises(ValueError, match="refit"):
            old.path([1.0])
        with pytest.raises(ValueError, match="refit"):
            old.leave_query_out()
        with pytest.raises(ValueError, match="refit"):
            old.cross_validate(None, [1.0], folds=2)


def test_damaged_extra_arrays_are_a_format_error(rng, tmp_path):
    X, y, qid, _ = make_groups(rng, n_groups=4, n_features=3, min_size=2)
    m = sr.KernelRankRLS(alpha=0.5).fit(X, y, qid)
    sr.save(m, tmp_path / "m")
    g = zarr.open_group(str(tmp_path / "m"), mode="r+")
    del g["train_y"]
    g.create_array("train_y", shape=(3, 1), dtype="f8")[...] = 0.0
    with pytest.raises(sr.persistence.ModelFormatError, match="train_y"):
        sr.load(tmp_path / "m")

"""scikit-learn conventions for every learner: check_estimator, get/set_params, clone, GridSearchCV.

``check_estimator`` runs on every learner with a ``fit(X, y)`` entry point
(RankRLS primal and cg, KernelRankRLS dual and sparse, PairwiseSGDRanker); all
of them take ``sample_weight``, so scikit-learn's sample-weight checks run too.  Checks that pass no
``qid`` are valid: ``qid=None`` is one global group (object ranking).  The
checks listed in :data:`NOT_APPLICABLE` are expected to fail, each for the
reason given; every other check must pass.  Learners without ``fit(X, y)``
are covered by the parameter/clone tests only:

* ``SparseSGDRanker`` learns from (query, item, item) tuple sources —
  ``fit(tuple_source)`` / ``partial_fit(Q, D_pos, D_neg)`` — there is no
  ``(X, y)`` for scikit-learn's checks to pass;
* ``TransductiveRankRLS`` has ``fit_predict(X_lab, y_lab, qid_lab, X_unlab,
  qid_unlab)`` (transduction), not ``fit(X, y)``.

GridSearchCV with ``qid`` routed (how to)
-----------------------------------------
Every learner's ``get_metadata_routing`` asks for ``qid`` in ``fit``, so with
scikit-learn's metadata routing on, ``qid`` reaches ``fit`` and (for a
scorer that requests it) the scorer — both cut to the fold's rows; split
with ``GroupKFold`` on ``groups=qid`` so that a query is never cut::

    import sklearn
    from sklearn.metrics import make_scorer
    from sklearn.model_selection import GridSearchCV, GroupKFold

    sklearn.set_config(enable_metadata_routing=True)
    ndcg = make_scorer(lambda y, s, qid: sr.metrics.ndcg(y, s, qid, k=10)).set_score_request(qid=True)
    gs = GridSearchCV(sr.RankRLS(), {"alpha": [0.01, 1, 100]}, cv=GroupKFold(3), scoring=ndcg)
    gs.fit(X, y, qid=qid, groups=qid)
"""
from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pytest

import streamrank as sr

# scikit-learn is imported by the tests that use it, not at collection: every pytest(-xdist) process collects
# this module, and sklearn.utils.estimator_checks costs about 3 CPU-s to import (only the slow
# test_check_estimator needs it)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("sklearn") is None, reason="scikit-learn is not installed")


def clone(est):
    """sklearn.base.clone, imported on first use."""
    from sklearn.base import clone as sklearn_clone

    return sklearn_clone(est)

#: check name -> why it does not apply to streamrank's rankers
NOT_APPLICABLE = {
    "check_estimators_unfitted":
        "streamrank raises its own NotFittedError (a ValueError and AttributeError, the same bases as "
        "scikit-learn's) so that scikit-learn stays optional; test_unfitted_predict_raises checks it",
    "check_n_features_in_after_fitting":
        "predict does check the feature count against n_features_in_ (test_wrong_feature_count_raises); "
        "only scikit-learn's literal message wording differs",
    "check_complex_data":
        "complex input is refused with a ValueError naming the array; the check matches a literal "
        "scikit-learn message",
    "check_dtype_object":
        "object arrays are refused by design (no implicit string parsing); features must be numeric",
    "check_fit2d_predict1d":
        "1-D X is refused with 'X must be 2-D (rows, features) ... reshape'; the check matches "
        "scikit-learn's literal 'Reshape your data'",
    "check_requires_y_none":
        "fit(X) without y raises a TypeError/ValueError saying y is needed; the check matches a "
        "literal scikit-learn message",
}

_BASIS_WEIGHTS = ("the basis is a uniform sample of the rows: repeating a row changes which rows are drawn, a weight "
                  "of 2 does not (the weighted objective on a given basis is exact: "
                  "tests/core/test_sample_weight_contract.py)")
_SAMPLED_PAIR_WEIGHTS = ("pairs are sampled uniformly and the weight scales the step: a weight of 2 is the same "
                         "expected objective as a repeated row, not the same random pairs "
                         "(tests/sgd/test_sgd_pairwise_weights.py checks the weighted steps exactly)")

#: learner-specific additions to NOT_APPLICABLE
EXTRA = {
    "sparse-kernel": {"check_fit2d_1sample":
                      "sparse RankRLS refuses n_basis larger than the rows ('n_basis=5 exceeds the number of "
                      "training rows (1)'); the check matches literal phrases",
                      "check_sample_weight_equivalence_on_dense_data": _BASIS_WEIGHTS,
                      "check_sample_weight_equivalence_on_sparse_data": _BASIS_WEIGHTS},
    "sgd-pairwise": {"check_fit2d_1sample":
                     "one row has no preference pair; the learner says 'no query group has two different "
                     "scores; there is no preference pair to sample' instead of the literal phrases matched",
                     "check_sample_weight_equivalence_on_dense_data": _SAMPLED_PAIR_WEIGHTS,
                     "check_sample_weight_equivalence_on_sparse_data": _SAMPLED_PAIR_WEIGHTS},
    "cg": {"check_fit_score_takes_y":
           "the check calls partial_fit after fit; partial_fit continues the primal statistics, which a "
           "cg fit does not keep, so it raises NotImplementedError saying to refit with solver='primal'"},
}


def _learners():
    out = [
        ("rankrls", sr.RankRLS(alpha=1.0, solver="primal")),
        ("cg", sr.RankRLS(alpha=1.0, solver="cg", tol=1e-10)),
        ("kernel", sr.KernelRankRLS(kernel="rbf", gamma=0.5, alpha=1.0)),
        ("sparse-kernel", sr.KernelRankRLS(kernel="rbf", gamma=0.5, alpha=1.0, n_basis=5, random_state=0)),
    ]
    try:
        out.append(("sgd-pairwise", sr.PairwiseSGDRanker(eta0=0.1, l1=1e-4)))
    except (AttributeError, ImportError):  # pragma: no cover - learner not built
        pass
    return out


LEARNERS = _learners()


@pytest.mark.slow
@pytest.mark.parametrize("name,est", LEARNERS, ids=[n for n, _ in LEARNERS])
def test_check_estimator(name, est):
    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = {**NOT_APPLICABLE, **EXTRA.get(name, {})}
        results = check_estimator(est, expected_failed_checks=expected, on_fail=None, on_skip=None)
    failed = [(r["check_name"], str(r["exception"])[:300]) for r in results if r["status"] == "failed"]
    passed = [r["check_name"] for r in results if r["status"] == "passed"]
    assert not failed, failed
    assert len(passed) >= 30, passed
    # expected failures are run too: one that passes means the list above is stale (it must shrink)
    ran = {r["check_name"]: r["status"] for r in results}
    stale = [c for c in expected if ran.get(c, "xfail") not in ("xfail", "skipped")]
    assert not stale, f"now passing, remove from NOT_APPLICABLE/EXTRA: {stale}"


def _data(seed=0, rows=60, n=4, groups=6):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, n))
    y = X @ rng.normal(size=n) + 0.1 * rng.normal(size=rows)
    qid = np.repeat(np.arange(groups), rows // groups)
    return X, y, qid


@pytest.mark.parametrize("name,est", LEARNERS, ids=[n for n, _ in LEARNERS])
def test_unfitted_predict_raises(name, est):
    with pytest.raises(sr.NotFittedError, match="not fitted"):
        clone(est).predict(np.ones((2, 4)))


@pytest.mark.parametrize("name,est", LEARNERS, ids=[n for n, _ in LEARNERS])
def test_wrong_feature_count_raises(name, est):
    X, y, qid = _data()
    m = clone(est).fit(X, y, qid)
    with pytest.raises(ValueError, match="3 features"):
        m.predict(X[:, :3])


def _all_estimators():
    ests = [e for _, e in LEARNERS]
    ests.append(sr.TransductiveRankRLS(gamma_t=2.0))
    ests.append(sr.SparseSGDRanker(eta0=5.0, l1=1e-4, auto_refit=False))
    try:
        ests.append(sr.PairwiseSGDRanker())
    except (AttributeError, ImportError):  # pragma: no cover - learner not built yet
        pass
    return ests


@pytest.mark.parametrize("est", _all_estimators(), ids=lambda e: type(e).__name__)
def test_params_and_clone(est):
    params = est.get_params()
    c = clone(est)
    assert type(c) is type(est) and c is not est
    assert c.get_params() == params
    # set_params round trip and unknown names refused
    key = "alpha" if "alpha" in params else ("eta0" if "eta0" in params else sorted(params)[0])
    value = 0.123 if key in ("alpha", "eta0") else params[key]
    assert c.set_params(**{key: value}) is c
    assert c.get_params()[key] == value
    assert est.get_params()[key] == params[key]       # the original is untouched
    with pytest.raises(ValueError, match="Invalid parameter"):
        c.set_params(no_such_parameter=1)
    assert repr(c).startswith(type(est).__name__)


def test_clone_of_fitted_is_unfitted():
    X, y, qid = _data()
    m = sr.RankRLS(alpha=0.5).fit(X, y, qid)
    c = clone(m)
    assert c.alpha == 0.5 and not hasattr(c, "coef_")


def _ndcg(y_true, y_pred, qid):
    return sr.metrics.ndcg(y_true, y_pred, qid, k=5)


@pytest.mark.parametrize("est", [sr.RankRLS(), sr.KernelRankRLS(kernel="linear")],
                         ids=["RankRLS", "KernelRankRLS"])
def test_gridsearchcv_routes_qid(est):
    import sklearn
    from sklearn.metrics import make_scorer
    from sklearn.model_selection import GridSearchCV, GroupKFold

    X, y, qid = _data(seed=3, rows=90, n=5, groups=9)
    grid = [1e-3, 1.0, 1e3]
    with sklearn.config_context(enable_metadata_routing=True):
        scorer = make_scorer(_ndcg).set_score_request(qid=True)
        gs = GridSearchCV(est, {"alpha": grid}, cv=GroupKFold(n_splits=3), scoring=scorer, refit=True)
        gs.fit(X, y, qid=qid, groups=qid)
    assert gs.best_params_["alpha"] in grid
    # the search is exactly the manual loop: fit on the training queries with their qid,
    # NDCG on the held-out queries with theirs
    expect = []
    for a in grid:
        s = []
        for tr, te in GroupKFold(n_splits=3).split(X, y, groups=qid):
            m = clone(est).set_params(alpha=a).fit(X[tr], y[tr], qid[tr])
            s.append(_ndcg(y[te], m.predict(X[te]), qid[te]))
        expect.append(np.mean(s))
    np.testing.assert_allclose(gs.cv_results_["mean_test_score"], expect, rtol=1e-12)
    # qid really reached fit: with qid the model differs from the one-global-group fit
    full_q = clone(est).set_params(alpha=gs.best_params_["alpha"]).fit(X, y, qid)
    np.testing.assert_allclose(gs.best_estimator_.predict(X), full_q.predict(X), rtol=1e-10, atol=1e-12)
    one_group = clone(est).set_params(alpha=gs.best_params_["alpha"]).fit(X, y)
    assert not np.allclose(one_group.predict(X), full_q.predict(X))


def test_gridsearchcv_legacy_fit_params():
    """Without metadata routing, scikit-learn passes qid to fit as a fit parameter, cut to the fold."""
    import sklearn
    from sklearn.model_selection import GridSearchCV, GroupKFold

    X, y, qid = _data()
    with sklearn.config_context(enable_metadata_routing=False):
        gs = GridSearchCV(sr.RankRLS(), {"alpha": [1.0, 2.0]}, cv=GroupKFold(n_splits=2),
                          scoring="neg_mean_squared_error")
        # legacy behaviour: fit params are passed through to fit, cut to the fold
        gs.fit(X, y, qid=qid, groups=qid)
    assert gs.best_params_["alpha"] in (1.0, 2.0)

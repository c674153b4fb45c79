"""One estimator API (issue 17): keyword-only constructors, selection leaves ``alpha`` alone,
``SparseSGDRanker.predict``, ``refit`` a method only, unknown options raise."""
from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from streamrank import distributed as srd

LEARNERS = [sr.RankRLS, sr.KernelRankRLS, sr.TransductiveRankRLS, sr.SparseSGDRanker, sr.PairwiseSGDRanker]


def _data(seed=0, n_groups=8):
    rng = np.random.default_rng(seed)
    qid = np.repeat(np.arange(n_groups), 6)
    X = rng.normal(size=(qid.size, 4))
    y = X @ np.array([1.0, -0.5, 0.25, 0.0]) + 0.1 * rng.normal(size=qid.size)
    return X, y, qid


@pytest.mark.parametrize("cls", LEARNERS, ids=lambda c: c.__name__)
def test_constructors_are_keyword_only(cls):
    params = [p for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"]
    assert params and all(p.kind is p.KEYWORD_ONLY for p in params)
    with pytest.raises(TypeError):
        cls(1.0)


@pytest.mark.parametrize("make", [
    lambda: sr.RankRLS(alpha=3.0, solver="primal"),
    lambda: sr.RankRLS(alpha=3.0, solver="cg", tol=1e-12),
    lambda: sr.KernelRankRLS(alpha=3.0, gamma=0.5),
    lambda: sr.KernelRankRLS(alpha=3.0, gamma=0.5, n_basis=20, random_state=0),
], ids=["primal", "cg", "kernel", "sparse-kernel"])
def test_cross_validate_leaves_alpha_and_records_the_choice(make):
    X, y, qid = _data()
    alphas = [1e-3, 1.0, 1e3]
    m = make()
    folds = "query" if getattr(m, "n_basis", None) is not None else 3
    if isinstance(m, sr.KernelRankRLS):
        res = m.fit(X, y, qid).cross_validate(None, alphas=alphas, folds=folds)
    else:
        res = m.cross_validate(sr.as_source(X, y, qid), alphas=alphas, folds=folds)
    assert m.alpha == 3.0 and m.get_params()["alpha"] == 3.0          # the user's parameter, unchanged
    assert m.best_alpha_ == res.best_alpha and m.cv_results_ is res
    assert res.best_alpha != 3.0
    # the fitted model is the refit at the chosen alpha
    ref = make().set_params(alpha=res.best_alpha).fit(X, y, qid)
    np.testing.assert_allclose(m.predict(X), ref.predict(X), rtol=1e-8, atol=1e-10)
    # a later fit uses the parameter again and forgets the selection
    m.fit(X, y, qid)
    assert not hasattr(m, "best_alpha_") and not hasattr(m, "cv_results_")


def test_best_alpha_is_saved(tmp_path):
    X, y, qid = _data()
    m = sr.RankRLS(alpha=3.0, solver="primal")
    m.cross_validate(sr.as_source(X, y, qid), alphas=[1e-3, 1.0], folds=2)
    sr.save(m, tmp_path / "m")
    back = sr.load(tmp_path / "m")
    assert back.alpha == 3.0 and back.best_alpha_ == m.best_alpha_
    np.testing.assert_array_equal(back.coef_, m.coef_)


def _tuples(seed=0):
    rng = np.random.default_rng(seed)
    Q = sp.random(60, 6, density=0.4, random_state=rng, format="csr")
    Dp = sp.random(60, 6, density=0.4, random_state=rng, format="csr")
    Dn = sp.random(60, 6, density=0.4, random_state=rng, format="csr")
    return Q, Dp, Dn


def test_sparse_sgd_predict_and_deprecated_score():
    Q, Dp, Dn = _tuples()
    m = sr.SparseSGDRanker(eta0=1.0, l1=1e-3, auto_refit=False).partial_fit(Q, Dp, Dn)
    s = m.predict(Q, Dp)
    np.testing.assert_allclose(s, np.einsum("ri,ij,rj->r", Q.toarray(), m.W_.toarray(), Dp.toarray()),
                               atol=1e-12)
    with pytest.warns(FutureWarning, match="predict"):
        old = m.score(Q, Dp)
    np.testing.assert_array_equal(old, s)
    with pytest.raises(sr.NotFittedError):
        sr.SparseSGDRanker().predict(Q, Dp)


def test_refit_is_a_method_and_the_flag_is_auto_refit(tmp_path):
    Q, Dp, Dn = _tuples(1)
    src = sr.as_tuple_source(Q, sp.vstack([Dp, Dn]).tocsr(), np.c_[np.arange(60), np.arange(60), 60 + np.arange(60)])
    auto = sr.SparseSGDRanker(eta0=1.0, l1=1e-3, random_state=0).fit(src, n_steps=60)
    manual = sr.SparseSGDRanker(eta0=1.0, l1=1e-3, random_state=0, auto_refit=False).fit(src, n_steps=60)
    assert manual.refit_t_ == 0
    manual.refit(src)
    assert manual.refit_t_ == auto.refit_t_ == 60
    np.testing.assert_array_equal(manual.W_.toarray(), auto.W_.toarray())
    assert "refit" not in sr.SparseSGDRanker().get_params()
    with pytest.raises(TypeError):
        sr.SparseSGDRanker(refit=False)
    # a model saved when the flag was called ``refit`` still loads
    sr.save(manual, tmp_path / "m")
    import json

    meta_path = tmp_path / "m" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    params = meta["attributes"]["params"]
    params["refit"] = params.pop("auto_refit")
    meta_path.write_text(json.dumps(meta))
    back = sr.load(tmp_path / "m")
    assert back.auto_refit is False
    np.testing.assert_array_equal(back.W_.toarray(), manual.W_.toarray())


def test_distributed_fit_rejects_unknown_options():
    """Checked before any cluster is started: a misspelt option is an error, not ignored."""
    X, y, qid = _data()
    with pytest.raises(TypeError, match="blocks_per_tsak"):
        srd.fit(sr.RankRLS(solver="primal"), (X, y, qid), blocks_per_tsak=2)
    with pytest.raises(TypeError, match="n_rounds"):
        srd.fit(sr.RankRLS(solver="cg"), (X, y, qid), n_rounds=2)
    with pytest.raises(TypeError, match="rounds"):
        srd.fit(sr.KernelRankRLS(n_basis=5), (X, y, qid), rounds=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError):
            srd.fit_sgd_rounds(sr.SparseSGDRanker(), sr.as_tuple_source(*_tuples()[:2], [[0, 1, 2]]),
                               n_round=3)


def test_every_learner_is_registered_and_listed_for_load():
    """sr.load finds learners by name through streamrank.LEARNER_MODULES: none may be missing."""
    import importlib
    import pkgutil

    from streamrank.base import BaseRanker
    from streamrank.persistence import _REGISTRY

    for info in pkgutil.walk_packages(sr.__path__, "streamrank."):
        if info.name.startswith(("streamrank.cli", "streamrank.demo")):
            continue
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as exc:          # an optional dependency (an extra) is not installed
            assert not str(exc.name).startswith("streamrank"), exc
    seen = set()
    stack = list(BaseRanker.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.__module__.startswith("streamrank.") and "_get_state" in vars(cls):
            seen.add(cls)
    assert {c.__name__ for c in seen} >= {"RankRLS", "KernelRankRLS", "SparseSGDRanker", "PairwiseSGDRanker"}
    for cls in seen:
        assert _REGISTRY.get(cls.__name__) is cls, f"{cls.__name__} is not @register_model"
        assert cls.__module__ in sr.LEARNER_MODULES, f"{cls.__module__} is missing from LEARNER_MODULES"


def test_load_raises_when_a_learner_module_does_not_import(tmp_path, monkeypatch):
    X, y, qid = _data()
    sr.save(sr.RankRLS(solver="primal").fit(X, y, qid), tmp_path / "m")
    from streamrank import persistence

    monkeypatch.setattr(persistence, "_REGISTRY", {})
    from streamrank import _learners

    monkeypatch.setattr(_learners, "LEARNER_MODULES", _learners.LEARNER_MODULES + ("streamrank.rankrls._no_such_module",))
    monkeypatch.setitem(_learners.LEARNERS, "RankRLS", "streamrank.rankrls._no_such_module")
    with pytest.raises(ModuleNotFoundError, match="_no_such_module"):
        sr.load(tmp_path / "m")


def test_two_learners_of_one_name_cannot_both_register():
    from streamrank.persistence import register_model

    with pytest.raises(TypeError, match="two learners named 'RankRLS'"):
        register_model(type("RankRLS", (sr.RankRLS,), {"__module__": "elsewhere"}))


def _public_callables():
    """Every public function and method of the package's public modules (module, qualified name, callable)."""
    import importlib
    import pkgutil

    for info in pkgutil.walk_packages(sr.__path__, "streamrank."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]) or info.name.startswith(
                ("streamrank.cli", "streamrank.pipelines", "streamrank.recipes")):
            continue
        try:
            mod = importlib.import_module(info.name)
        except ModuleNotFoundError as exc:          # an optional dependency (an extra) is not installed
            assert not str(exc.name).startswith("streamrank"), exc
            continue
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if inspect.isclass(obj):
                for meth, fn in vars(obj).items():
                    if (not meth.startswith("_") or meth == "__init__") and inspect.isfunction(fn):
                        yield f"{obj.__module__}.{obj.__qualname__}.{meth}", fn
            elif inspect.isfunction(obj):
                yield f"{obj.__module__}.{name}", obj


def test_one_block_budget_default_everywhere():
    """Every public ``max_rows`` with a fixed default uses sr.DEFAULT_BLOCK_ROWS (65,536): the library and
    the CLI cut a source into the same blocks (sampled pairs, block-wise sums and memory depend on it)."""
    seen, bad = set(), []
    for qual, fn in _public_callables():
        p = inspect.signature(fn).parameters.get("max_rows")
        if p is None or p.default is None or p.default is inspect.Parameter.empty:
            continue
        seen.add(qual)
        if p.default != sr.DEFAULT_BLOCK_ROWS:
            bad.append(f"{qual}: max_rows={p.default}")
    assert bad == []
    assert {"streamrank.io.blocks.BlockSource.blocks", "streamrank.io.blocks.BlockSource.plan",
            "streamrank.sgd.pairwise.PairwiseSGDRanker.fit", "streamrank.io.pairs.pairs_from_groups"} <= seen


@pytest.mark.parametrize("cls", LEARNERS, ids=lambda c: c.__name__)
def test_random_state_defaults_to_0(cls):
    """Learners that draw at random default to seed 0, as the CLI's --seed: the same data gives the same model."""
    p = inspect.signature(cls.__init__).parameters.get("random_state")
    assert p is None or p.default == 0


def test_sparse_kernel_default_basis_is_reproducible():
    X, y, qid = _data()
    a = sr.KernelRankRLS(n_basis=7, gamma=0.3).fit(X, y, qid)
    b = sr.KernelRankRLS(n_basis=7, gamma=0.3).fit(X, y, qid)
    np.testing.assert_array_equal(a.basis_, b.basis_)
    np.testing.assert_array_equal(a.dual_coef_, b.dual_coef_)
    c = sr.KernelRankRLS(n_basis=7, gamma=0.3, random_state=None).fit(X, y, qid)   # opt out: a fresh draw
    assert c.basis_.shape == a.basis_.shape

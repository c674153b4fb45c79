"""streamrank.distributed and the pipelines use learners only through their declared, package-public API.

The private names of the learners are collected from their own modules (every
``_name`` a learner class defines or assigns on ``self`` / the estimator), and
the distributed package and the pipelines are parsed for any use of one: an
attribute access ``obj._name`` (other than on their own ``self``) or the name
as a string (``getattr(est, "_name")``, ``est.__dict__.pop("_name")``).  What
they need instead is declared in :mod:`streamrank.base` (the protocols,
``for_workers``, ``forget_fit``, ``set_feature_names``) and on the learners
(``has_state``, ``fit_scales``).
"""
from __future__ import annotations

import ast
import pickle
from pathlib import Path

import numpy as np
import pytest

import streamrank as sr

ROOT = Path(sr.__file__).parent
LEARNER_MODULES = [ROOT / "base.py", *sorted((ROOT / "rankrls").glob("*.py")), *sorted((ROOT / "sgd").glob("*.py"))]
USERS = [*sorted((ROOT / "distributed").rglob("*.py")), *sorted((ROOT / "pipelines").rglob("*.py"))]
ESTIMATOR_NAMES = {"self", "est", "out", "model"}     # how the learner modules name a learner they set up


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def learner_private_names() -> set[str]:
    """Private names the learner classes define, less those the sources (streamrank.io) define too
    (``_group_qid`` is a source's method and a KernelRankRLS attribute: a use names a source)."""
    return _private_names(LEARNER_MODULES) - _private_names(sorted((ROOT / "io").glob("*.py")))


def _private_names(modules) -> set[str]:
    names = set()
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _private(item.name):
                        names.add(item.name)
                    targets = item.targets if isinstance(item, ast.Assign) else (
                        [item.target] if isinstance(item, ast.AnnAssign) else [])
                    for t in targets:
                        for n in ast.walk(t):
                            if isinstance(n, ast.Name) and _private(n.id):
                                names.add(n.id)
            elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                  and isinstance(node.value, ast.Name) and node.value.id in ESTIMATOR_NAMES and _private(node.attr)):
                names.add(node.attr)
    return names


def uses_of(names: set[str], path: Path, root: Path = ROOT) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Attribute) and node.attr in names
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value!r}")
    return found


@pytest.mark.slow   # parses the learner and io modules to check the scan itself: 4.4 s wall under load 11
def test_the_scan_finds_the_learners_private_names(tmp_path):
    """The collected names include those distributed used to drop by name, and a use is found (the scan can fail)."""
    names = learner_private_names()
    assert {"_train_source", "_eigen", "_decomp", "_lpo_cache", "_sparse", "_Y", "_W", "_v", "_params",
            "_start", "_work"} <= names
    probe = tmp_path / "probe.py"
    probe.write_text('def f(est):\n    est.__dict__.pop("_decomp", None)\n    return est._train_source, self._W\n')
    assert uses_of(names, probe, tmp_path) == ["probe.py:2: '_decomp'", "probe.py:3: est._train_source"]


def test_distributed_and_pipelines_use_no_private_learner_name():
    names = learner_private_names()
    found = [u for path in USERS for u in uses_of(names, path)]
    assert found == []


def _data(m=40, n=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, n))
    return X, X @ rng.normal(size=n) + 0.1 * rng.normal(size=m), np.repeat(np.arange(m // 8), 8)


def test_for_workers_leaves_the_training_data_and_caches_on_the_client():
    X, y, q = _data()
    for model, local in ((sr.RankRLS(alpha=0.5), ("_train_source", "_eigen")),
                         (sr.KernelRankRLS(alpha=0.5, kernel="linear"), ("_train_source", "_decomp", "_Y"))):
        model.fit(X, y, q)
        if isinstance(model, sr.RankRLS):
            model.path([0.1, 1.0])                       # builds the eigenpath cache
        held = [a for a in local if getattr(model, a, None) is not None]
        assert held, type(model).__name__            # the model holds some client-only state
        shipped = model.for_workers()
        for a in local:
            assert a not in shipped.__dict__
        for a in held:                               # the client's model keeps it
            assert getattr(model, a) is not None
        np.testing.assert_array_equal(pickle.loads(pickle.dumps(shipped)).predict(X), model.predict(X))
        assert len(pickle.dumps(shipped)) < len(pickle.dumps(model))


def test_forget_fit_drops_an_earlier_fit_and_its_caches():
    X, y, q = _data()
    m = sr.RankRLS(alpha=0.5).fit(X, y, q)
    m.path([0.1, 1.0])
    m.cross_validate(alphas=[0.1, 1.0], folds=2)
    assert m.forget_fit() is m
    for a in ("coef_", "stats_", "_eigen", "best_alpha_", "cv_results_"):
        assert getattr(m, a, None) is None, a


def test_has_state_before_and_after_the_first_round():
    import scipy.sparse as sp

    pw = sr.PairwiseSGDRanker(random_state=0)
    assert pw.has_state() is False
    assert pw.init_state(3).has_state() is True
    bl = sr.SparseSGDRanker(random_state=0)
    assert bl.has_state() is False
    assert bl.init_state(4, 4).has_state() is True
    assert isinstance(pw, sr.base.SGDLearner) and isinstance(bl, sr.base.SGDLearner)
    assert isinstance(sr.RankRLS(), sr.base.StatisticsLearner)
    assert sp.issparse(bl.W_)

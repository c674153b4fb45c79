"""Estimator base: scikit-learn's parameter contract and persistence hooks.

``__init__`` only stores its keyword arguments; validation happens at the first
``fit``/``partial_fit``.  Learned state ends in ``_``.  ``get_params`` /
``set_params`` follow scikit-learn exactly, so ``sklearn.base.clone`` and
``GridSearchCV`` work without scikit-learn being a dependency.

Persistence (see :mod:`streamrank.persistence`) asks each learner for
``_get_state() -> (attrs, arrays)`` — JSON-able attributes and named arrays —
and gives them back to ``_set_state(attrs, arrays)``.  No pickle anywhere.

The two learner protocols the rest of the package relies on — model
selection, :mod:`streamrank.distributed` and the pipelines use nothing else
of a learner — are declared here: :class:`StatisticsLearner` (new
statistics, accumulate a block, fit from statistics, predict) and
:class:`SGDLearner` (state, one round, merge).
"""
from __future__ import annotations

import contextlib
import inspect
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["BaseRanker", "NotFittedError", "StatisticsLearner", "SGDLearner"]


class NotFittedError(ValueError, AttributeError):
    """The estimator is used before ``fit``."""


class BaseRanker:
    """Common base of every streamrank learner."""

    @classmethod
    def _get_param_names(cls):
        sig = inspect.signature(cls.__init__)
        names = [p.name for p in sig.parameters.values()
                 if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        return sorted(names)

    def get_params(self, deep: bool = True) -> dict:
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params):
        valid = self._get_param_names()
        for key, value in params.items():
            if key not in valid:
                raise ValueError(
                    f"Invalid parameter {key!r} for {type(self).__name__}; valid parameters: {valid}"
                )
            setattr(self, key, value)
        return self

    def __repr__(self):
        defaults = {p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()}
        changed = []
        for k, v in self.get_params().items():
            d = defaults.get(k, inspect.Parameter.empty)
            try:
                same = d is not inspect.Parameter.empty and (d is v or d == v)
            except Exception:  # arrays etc.
                same = False
            if not same:
                changed.append(f"{k}={v!r}")
        return f"{type(self).__name__}({', '.join(changed)})"

    # ------------------------------------------------------ scikit-learn glue
    # Both hooks import scikit-learn lazily (it is not a dependency); they let
    # ``check_estimator``, ``clone`` and ``GridSearchCV`` treat a learner as an
    # estimator.  A ranker is neither a classifier nor a regressor
    # (``estimator_type=None``): scores are defined up to a per-query shift.
    def __sklearn_tags__(self):
        from sklearn.utils import InputTags, Tags, TargetTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=True, multi_output=True),
                    input_tags=InputTags(sparse=True))

    def get_metadata_routing(self):
        """Metadata routing: ``fit`` asks for ``qid`` (``GridSearchCV(...).fit(X, y, qid=qid)``).

        Used by scikit-learn when ``sklearn.set_config(enable_metadata_routing=True)``;
        see ``tests/test_estimator_checks.py`` for a GridSearchCV example.
        """
        from sklearn.utils.metadata_routing import MetadataRequest

        req = MetadataRequest(owner=type(self).__name__)
        if hasattr(self, "fit"):
            req.fit.add_request(param="qid", alias=True)
        return req

    def check_params(self):
        """Validate the parameters now (``fit`` does it too); raises on a bad value, returns self."""
        check = getattr(self, "_check_params", None) or getattr(self, "_params", None)
        if check is not None:
            check()
        return self

    def adopt(self, model):
        """Take over the fitted state of ``model`` (same class) in place, e.g. the merge of shard models."""
        if type(model) is not type(self):
            raise TypeError(f"{type(self).__name__}.adopt needs a {type(self).__name__}, got {type(model).__name__}")
        self.__dict__.update(model.__dict__)
        return self

    # ------------------------------------------------------------ selection
    # (for the package's model selection, rankrls.selection / cg_selection / kernel: not user API)
    @contextlib.contextmanager
    def solving_with(self, alpha):
        """Solve (refit) with ``alpha`` inside the block; the user's ``alpha`` parameter is restored after.

        Model selection refits at the chosen λ without changing the estimator's
        parameters (scikit-learn's contract: ``fit`` never rewrites them).
        """
        user = self.alpha
        self.alpha = float(alpha)
        try:
            yield
        finally:
            self.alpha = user

    def record_selection(self, result):
        """``best_alpha_`` and ``cv_results_`` of a model-selection run; returns ``result``."""
        self.best_alpha_ = float(result.best_alpha)
        self.cv_results_ = result
        return result

    # ------------------------------------------------ distributed (package API)
    #: attributes that stay on the client when the model is sent to workers: the training data and the
    #: solver caches derived from it (a learner class names its own; see :meth:`for_workers`)
    _LOCAL_ONLY: tuple[str, ...] = ()
    #: caches derived from a fit that a new fit must not inherit (dropped by :meth:`forget_fit`)
    _FIT_CACHES: tuple[str, ...] = ()

    def for_workers(self):
        """A shallow copy of this (fitted) model to send to workers, e.g. for a distributed ``predict``.

        It shares the fitted arrays but leaves out what stays on the client: the
        training source and the solver caches built from it (``KernelRankRLS``
        keeps an m x m decomposition), which workers never need to score rows.
        Package-public: :mod:`streamrank.distributed` ships models only through
        this method.
        """
        import copy

        est = copy.copy(self)
        for attr in self._LOCAL_ONLY:
            est.__dict__.pop(attr, None)
        return est

    def forget_fit(self):
        """Drop the state of an earlier fit that a new fit replaces; returns self.

        The fitted coefficients, statistics (and fold statistics), iteration
        count and model-selection results, plus the caches derived from them.
        Called at the start of ``fit`` and by :mod:`streamrank.distributed`
        before it sets the result of a fit on the workers, so that nothing of
        an earlier fit survives the new one.
        """
        for attr in ("coef_", "stats_", "fold_stats_", "n_iter_", *self._FIT_CACHES, "best_alpha_", "cv_results_"):
            self.__dict__.pop(attr, None)
        return self

    # ---------------------------------------------------------------- state
    def _check_fitted(self, attr: str = "coef_"):
        if not hasattr(self, attr):
            raise NotFittedError(
                f"This {type(self).__name__} is not fitted yet; call fit (or partial_fit) first"
            )

    # ------------------------------- feature names and normalization (exports)
    def set_feature_names(self, n_features: int, feature_names=None, source=None) -> None:
        """``feature_names_in_`` from ``feature_names=`` or the source's (a store's) names; else none.

        The names travel with the model (``sr.save``) so that exports can name
        features (:func:`streamrank.export`).  Package-public: ``fit`` calls it,
        and so does the nightly pipeline for a model it trained from a store.
        """
        names = feature_names if feature_names is not None else getattr(source, "feature_names", None)
        if names is None:
            self.__dict__.pop("feature_names_in_", None)
            return
        names = [str(s) for s in names]
        if len(names) != int(n_features):
            raise ValueError(f"feature_names has {len(names)} names; X has {n_features} features")
        if len(set(names)) != len(names):
            raise ValueError("feature_names must be unique; repeated: "
                             f"{sorted({s for s in names if names.count(s) > 1})[:3]}")
        self.feature_names_in_ = np.asarray(names, dtype=object)

    def _fit_source(self, X, y, qid, *, reset: bool):
        """The block source of ``fit``/``partial_fit`` input (arrays, tables, sources).

        A table (DataFrame / Arrow) continuing a fitted model (``reset=False``)
        has its columns matched to ``feature_names_in_`` by name.
        """
        from ._tables import is_table
        from .io.sources import as_source, table_source

        if is_table(X):
            order = None if reset else getattr(self, "feature_names_in_", None)
            return table_source(X, y, qid, feature_order=None if order is None else list(order))
        return as_source(X, y, qid)

    def _predict_input(self, X):
        """``predict``'s X: a table's columns taken by name in ``feature_names_in_`` order."""
        from ._tables import is_table, table_for_predict

        if not is_table(X):
            return X
        return table_for_predict(X, getattr(self, "feature_names_in_", None),
                                 getattr(self, "n_features_in_", None), type(self).__name__)

    def _extra_state(self):
        """Feature names and the fitted normalizer, saved beside every learner's own state."""
        attrs, arrays = {}, {}
        names = getattr(self, "feature_names_in_", None)
        if names is not None:
            attrs["feature_names_in_"] = [str(s) for s in names]
        norm = getattr(self, "normalizer_", None)
        if getattr(self, "best_alpha_", None) is not None:
            attrs["best_alpha_"] = float(self.best_alpha_)
        if norm is not None:
            attrs["normalizer_kind"] = norm.kind
            arrays.update(norm.to_arrays("normalizer_"))
        return attrs, arrays

    def _set_extra_state(self, attrs, arrays) -> None:
        n = getattr(self, "n_features_in_", None)     # set by _set_state, which runs first
        names = attrs.get("feature_names_in_")
        if names is not None:
            if not isinstance(names, list) or not all(isinstance(s, str) for s in names):
                raise ValueError("feature_names_in_ must be a list of strings")
            if n is not None and len(names) != n:
                raise ValueError(f"feature_names_in_ holds {len(names)} names but the model has {n} features")
            self.feature_names_in_ = np.asarray(names, dtype=object)
        if "best_alpha_" in attrs:
            from ._validation import check_alpha

            self.best_alpha_ = check_alpha(attrs["best_alpha_"], "best_alpha_")
        if "normalizer_kind" in attrs:
            from .normalize import Normalizer

            norm = Normalizer.from_arrays(attrs["normalizer_kind"], arrays, "normalizer_")
            if n is not None and norm.offset.shape != (n,):
                raise ValueError(f"the normalizer has {norm.offset.shape[0]} features but the model has {n}")
            self.normalizer_ = norm

    def _get_state(self):
        """Return ``(attrs: dict, arrays: dict[str, ndarray | csr_matrix])``."""
        raise NotImplementedError(f"{type(self).__name__} does not support saving yet")

    def _set_state(self, attrs: dict, arrays: dict) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not support loading yet")


# ------------------------------------------------------------------ protocols
@runtime_checkable
class StatisticsLearner(Protocol):
    """What a *statistics learner* offers the rest of the package.

    Its fit is a sum of per-block statistics followed by a solve, so the sum
    can be taken anywhere — one pass (``fit``), per fold (model selection),
    per worker and a tree reduction (:mod:`streamrank.distributed`), per day
    (the nightly pipeline) — and the solve done once.  Implemented by
    :class:`~streamrank.RankRLS` (primal solver).  Selection, ``distributed``
    and the pipelines use only these methods:

    ``new_statistics(n_features, n_outputs)``
        An empty mergeable statistics object (``add_block``, ``merge``,
        ``check_complete``, ``release_workspace``) for this learner's parameters.
    ``accumulate(stats, block)``
        Add one :class:`~streamrank.io.blocks.Block` (whole groups or a piece
        of a split group) into ``stats``; returns ``stats``.
    ``fit_statistics(stats, *, y_1d=None, source=None)``
        Finish a fit from summed statistics (the solve and the fitted
        attributes); ``source`` is recorded as the training data.
    ``forget_fit()``
        Drop an earlier fit's state before a new one is set (see
        :meth:`BaseRanker.forget_fit`).
    ``predict(X)``
        Scores of the rows of X.

    Every learner (a :class:`BaseRanker`) is sent to workers through
    :meth:`BaseRanker.for_workers`.
    """

    def new_statistics(self, n_features: int, n_outputs: int): ...

    def accumulate(self, stats, block): ...

    def fit_statistics(self, stats, *, y_1d=None, source=None): ...

    def forget_fit(self): ...

    def predict(self, X): ...


@runtime_checkable
class SGDLearner(Protocol):
    """What an *SGD learner* offers the rest of the package: state, one round, merge.

    Implemented by :class:`~streamrank.SparseSGDRanker` (tuple sources) and
    :class:`~streamrank.PairwiseSGDRanker` (group sources).
    :func:`streamrank.distributed.fit_sgd_rounds` and the pipelines use only
    these methods:

    ``has_state()``
        True when the model has a state (W / v) that further rounds continue;
        False before the first ``init_state`` / fit.
    ``init_state(*n_features)``
        Check the parameters and start the model's state (W₀ / v₀) when it
        has none (a fitted model keeps its state: rounds continue it).
    ``partial_fit(...)``
        One round: SGD steps on the given data, continuing the clock.
    ``average(models)`` (classmethod)
        The merge of models trained from the same state on different shards
        (sparse-aware parameter mixing); a new model.
    ``adopt(model)``
        Take over ``model``'s fitted state in place (the result of a merge).
    """

    def has_state(self) -> bool: ...

    def init_state(self, *n_features: int): ...

    @classmethod
    def average(cls, models): ...

    def adopt(self, model): ...

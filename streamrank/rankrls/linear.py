"""Linear RankRLS, exact and streaming (Pahikkala et al. 2009).

    w = argmin_w  Σ_g (y_g - X_g w)ᵀ L_g (y_g - X_g w) + λ ||w||²
      = (Xᵀ L X + λ I)⁻¹ Xᵀ L y                                  (primal form of eq. (17))

with L the block-diagonal group Laplacian of cost (21) (eq. (24), (25);
see :mod:`streamrank.laplacian` for the group weights and tie handling).

Fitting is two steps, so that a dask pipeline can run the first on workers
(the learner is a :class:`streamrank.base.StatisticsLearner`):

1. :meth:`RankRLS.new_statistics` + :meth:`RankRLS.accumulate` — mergeable
   :class:`~streamrank.rankrls._statistics.RankStatistics` (G = XᵀLX, B = XᵀLY);
   they are summed over blocks (in any order, any tree);
2. :meth:`RankRLS.fit_statistics` — the solve from the summed statistics.

The conjugate-gradient solver (:mod:`streamrank.rankrls.cg`) never forms G:
each matrix-vector product is one streaming pass.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._defaults import DEFAULT_ALPHAS, DEFAULT_BLOCK_ROWS, check_alphas
from .._state_checks import state_array, state_int
from .._validation import check_alpha, check_X, is_dask
from ..base import BaseRanker
from ..io.blocks import BlockSource
from ..laplacian import check_group_weight, check_ties
from ..normalize import check_normalize
from ..persistence import register_model
from ._statistics import EigenPath, RankStatistics, block_statistics

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from .._typing import ArrayLike, MatrixLike
    from ..io.blocks import BlockSource
    from .selection import CVResult

__all__ = ["RankRLS", "RankStatistics", "PRIMAL_MAX_FEATURES", "DEFAULT_ALPHAS"]

PRIMAL_MAX_FEATURES = 4096
SOLVERS = ("auto", "primal", "cg")


def _source_of(X, y, qid, model=None, reset=True):
    if model is not None:
        from .._tables import is_table

        if is_table(X):
            return model._fit_source(X, y, qid, reset=reset)
    if isinstance(X, BlockSource):
        if y is not None or qid is not None:
            raise TypeError("fit(source) takes no y or qid: the source carries them")
        return X
    if y is None:
        raise TypeError("fit(X, y, qid) needs y (one target per row, or one row of targets)")
    from ..io.sources import as_source

    return as_source(X, y, qid)


@register_model
class RankRLS(BaseRanker):
    """Linear RankRLS: least-squares ranking over all within-group pairs, streamed.

    Minimises ``Σ_g s_g Σ_{i<j in g} ((y_i - y_j) - (f_i - f_j))² + alpha ||w||²``
    (cost (21) of Pahikkala et al. 2009) with ``f = X w``.  No intercept:
    the cost depends only on score differences inside a group, so a constant
    shift of the scores changes nothing (ranking is shift-invariant).

    Parameters
    ----------
    alpha : float > 0
        The papers' λ.
    solver : {"auto", "primal", "cg"}
        ``"primal"``: one pass accumulating G = XᵀLX and B = XᵀLy (float64), then a Cholesky solve; the statistics
        are kept, so :meth:`path`, :meth:`partial_fit`, :meth:`cross_validate` and :meth:`leave_query_out` need no
        refit.  ``"cg"``: preconditioned conjugate gradient, one streaming pass per iteration, memory O(n).
        ``"auto"``: primal when n ≤ 4096 and X is dense, else cg.
    group_weight : {"pair", "query", "size"}
        ``"pair"``: L_g = n_g I - 11ᵀ; ``"query"``: divided by the group's pair count; ``"size"``: divided by n_g
        (RLScore's QueryRankRLS).
    ties : {"include", "exclude"}
        ``"exclude"`` drops pairs with equal targets (exact).
    tol : float
        cg: stop when ||r|| ≤ tol ||b|| (per output).
    max_iter : int or None
        cg: iteration limit (default 10 n, capped at 10,000).
    normalize : {None, "standard", "minmax"}
        Scale every feature by statistics of all training rows, gathered in the same pass
        (:mod:`streamrank.normalize`): the model scores ``Σ_j coef_j (x_j − o_j) / s_j``, with (o, s) the mean and
        standard deviation ("standard") or the minimum and range ("minmax"), kept in ``normalizer_``, applied by
        :meth:`predict`, saved and exported.  No extra pass: the statistics of the scaled features are the
        congruence D G D, D B (D = diag(1/s)) of the accumulated ones, and the per-group centring removes the shift
        o.  So "standard" means: the model of RankRLS on globally standardized features — the mean moves every score
        by one constant (no ranking changes); the scale changes what ``alpha ||coef_||²`` penalises.  ``coef_`` is
        on the normalized scale. (cg: the moments come with the preconditioner's pass.)

    Attributes
    ----------
    coef_ : (n_features,) or (n_features, n_outputs)
        The weights (one column per output).
    n_features_in_ : int
        The number of features seen in fit.
    stats_ : RankStatistics (primal only)
        The summed statistics (primal solver only).
    solver_ : "primal" or "cg"
        The solver used.
    n_iter_ : int (cg)
        Conjugate-gradient iterations (cg solver only).

    Examples
    --------
    >>> import numpy as np, streamrank as sr
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(60, 3)); y = X @ [1.0, -2.0, 0.5]; qid = np.repeat(np.arange(6), 10)
    >>> m = sr.RankRLS(alpha=1e-6).fit(X, y, qid)
    >>> np.round(m.coef_, 3)
    array([ 1. , -2. ,  0.5])
    """

    _LOCAL_ONLY, _FIT_CACHES = ("_train_source", "_eigen"), ("_eigen",)   # see for_workers / forget_fit
    def __init__(self, *, alpha: float = 1.0, solver: str = "auto", group_weight: str = "pair",
                 ties: str = "include", tol: float = 1e-6, max_iter: int | None = None,
                 normalize: str | None = None) -> None:
        self.normalize = normalize
        self.alpha = alpha
        self.solver = solver
        self.group_weight = group_weight
        self.ties = ties
        self.tol = tol
        self.max_iter = max_iter

    # ------------------------------------------------------------ checking
    def _check_params(self):
        check_alpha(self.alpha, "alpha")
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {self.solver!r}")
        check_group_weight(self.group_weight)
        check_ties(self.ties)
        check_normalize(self.normalize)
        if not (isinstance(self.tol, (int, float)) and np.isfinite(self.tol) and self.tol > 0):
            raise ValueError(f"tol must be a finite number > 0, got {self.tol!r}")
        if self.max_iter is not None and (not isinstance(self.max_iter, (int, np.integer)) or self.max_iter < 1):
            raise ValueError(f"max_iter must be None or an integer >= 1, got {self.max_iter!r}")

    def solver_for(self, source) -> str:
        """``"primal"`` or ``"cg"``: the solver a fit on ``source`` uses (``solver="auto"`` decides by its width)."""
        if self.solver != "auto":
            return self.solver
        return "primal" if (source.n_features <= PRIMAL_MAX_FEATURES and not source.sparse) else "cg"

    @staticmethod
    def check_source(source):
        """Refuse a training source with no rows (what fit, selection and the pipelines call first)."""
        if source.n_rows == 0:
            raise ValueError("empty input: the source has no rows; at least one group with 2 rows is needed")

    # ------------------------------------------------- statistics (pass 1)
    def new_statistics(self, n_features, n_outputs) -> RankStatistics:
        """Empty mergeable statistics (G = XᵀLX, B = XᵀLY, ...) for this learner's parameters."""
        return RankStatistics(n_features, n_outputs, group_weight=self.group_weight, ties=self.ties,
                              per_output=True, moments=self.normalize is not None)

    def statistics_of_block(self, block) -> RankStatistics:
        """One block's partial statistics (a dask worker's job); merge with ``+=``."""
        return block_statistics(block, group_weight=self.group_weight, ties=self.ties, per_output=True,
                                moments=self.normalize is not None)

    def _solve_statistics(self, stats: RankStatistics) -> RankStatistics:
        """The statistics the solve uses: ``stats`` itself, or their congruence D G D, D B (normalize=)."""
        if self.normalize is None:
            return stats
        if stats.moments is None:
            raise ValueError("normalize= needs statistics gathered with it; this model's statistics were "
                             "accumulated without normalize: refit")
        return stats.scaled(1.0 / self.normalizer_.scale)

    @staticmethod
    def accumulate(stats: RankStatistics, block) -> RankStatistics:
        """Add one block (whole groups, or a piece of a group cut across blocks) into ``stats``."""
        gid = block.group_start + np.arange(block.n_groups, dtype=np.int64)
        stats.add_block(block.X, block.y, block.group_ptr, group_size=block.group_size,
                        group_offset=block.group_offset, group_id=gid, weight=block.weight)
        return stats

    def accumulate_source(self, source, max_rows, stats=None) -> RankStatistics:
        """The statistics of every block of ``source`` (one pass), added into ``stats`` (default: new ones).

        Groups larger than ``max_rows`` are read in pieces (``split_groups=True``);
        the result is complete (:meth:`RankStatistics.check_complete`).
        """
        if stats is None:
            stats = self.new_statistics(source.n_features, source.n_outputs)
        part = self.new_statistics(source.n_features, source.n_outputs)   # reuses its SYRK workspace
        for block in source.blocks(max_rows=max_rows, split_groups=True):
            self.accumulate(part, block)
        stats.merge(part)
        stats.check_complete()
        return stats

    def as_target_shape(self, A):
        """``A`` (..., v) in the shape of the training targets: the output axis dropped when y was a vector."""
        return A[..., 0] if self._y_1d else A

    # --------------------------------------------------------- solve (step 2)
    def _solve(self, stats, alpha):
        """(G + alpha I)⁻¹ B by Cholesky (n, v); per output with per-output Grams (ties="exclude", v > 1)."""
        B = stats.B
        if stats.per_output:
            return np.column_stack([self._solve_one(stats.gram(k), B[:, k:k + 1], alpha)[:, 0]
                                    for k in range(stats.n_outputs)])
        return self._solve_one(stats.G, B, alpha)

    @staticmethod
    def _solve_one(G, B, alpha):
        import scipy.linalg   # here, not at import: loading a model to predict or evaluate needs no LAPACK wrapper

        A = G + alpha * np.eye(G.shape[0])
        try:
            return scipy.linalg.solve(A, B, assume_a="pos", check_finite=False)
        except (np.linalg.LinAlgError, scipy.linalg.LinAlgError):  # pragma: no cover - tiny alpha
            return EigenPath(G, B).coef(alpha)

    def fit_statistics(self, stats: RankStatistics, *, y_1d=None, source=None):
        """Finish a fit from summed statistics: the solve and the fitted attributes; returns self.

        ``y_1d``: the targets were a vector (``coef_`` is then 1-D).  ``source``:
        the training data, kept for :meth:`path`, :meth:`leave_query_out` and
        :meth:`cross_validate` without a source (None keeps the current one).
        """
        self._check_params()
        stats.check_complete()
        alpha = check_alpha(self.alpha)
        if self.normalize is not None:
            if stats.moments is None:
                raise ValueError("normalize= needs statistics gathered with it; these were accumulated "
                                 "without normalize: refit")
            self.normalizer_ = stats.moments.normalizer(self.normalize)
        else:
            self.__dict__.pop("normalizer_", None)
        W = self._solve(self._solve_statistics(stats), alpha)
        if y_1d is None:
            y_1d = getattr(self, "_y_1d", stats.n_outputs == 1)
        self._y_1d = bool(y_1d and stats.n_outputs == 1)
        self.coef_ = W[:, 0] if self._y_1d else W
        self.stats_ = stats
        self.solver_ = "primal"
        self.n_features_in_ = stats.n_features
        self.n_outputs_ = stats.n_outputs
        self._eigen = None
        if source is not None:
            self._train_source = source
        return self

    # ----------------------------------------------------------------- fit
    def fit(self, X: MatrixLike | BlockSource, y: ArrayLike | None = None, qid: ArrayLike | None = None,
            sample_weight: ArrayLike | None = None, *, max_rows: int = DEFAULT_BLOCK_ROWS,
            callback: Callable[..., object] | None = None, validation: BlockSource | tuple | None = None,
            patience: int = 5, feature_names: Sequence[str] | None = None) -> RankRLS:
        """Fit on arrays (numpy, scipy.sparse, dask) or any block source.

        ``sample_weight``: (rows,) w_i >= 0 (primal and cg, either ``ties``); pair
        (i, j) of a group counts w_i w_j (exact, one pass: :mod:`streamrank.laplacian`).
        Per-query weights: :func:`streamrank.clicks.query_weights`; click logs:
        :func:`streamrank.clicks.ips_weights`.

        ``qid=None``: one global group.  ``callback``, ``validation`` and
        ``patience`` are for ``solver="cg"`` (see
        :func:`streamrank.rankrls.cg.solve_cg`).  ``max_rows`` is the block budget.
        ``feature_names``: names of X's columns, kept as ``feature_names_in_``
        (default: the store's feature names, if any) for :func:`streamrank.export`.
        """
        self._check_params()
        source = _source_of(X, y, qid, self)
        self.check_source(source)
        source = _weighted(source, sample_weight)
        self.set_feature_names(source.n_features, feature_names, source)
        self.forget_fit()
        y_1d = _source_y_1d(source, y)
        solver = self.solver_for(source)
        if solver == "primal":
            stats = self.accumulate_source(source, max_rows)
            self.fit_statistics(stats, y_1d=y_1d)
        else:
            from .cg import solve_cg

            W, info = solve_cg(source, alpha=check_alpha(self.alpha), group_weight=self.group_weight,
                               ties=self.ties, tol=self.tol, max_iter=self.max_iter, max_rows=max_rows,
                               callback=callback, validation=validation, patience=patience,
                               normalize=self.normalize)
            self.fit_cg_solution(W, info, source, y_1d)
        self._train_source = source
        return self

    def fit_cg_solution(self, W, info, source, y_1d):
        """The learned state of a :func:`~streamrank.rankrls.cg.solve_cg` solution ``W`` (n, v).

        Shared by :meth:`fit` and the cluster fit (``streamrank.distributed._cg.fit_cg``);
        ``source`` is kept as the training data.
        """
        self._y_1d = bool(y_1d and W.shape[1] == 1)
        self.coef_ = W[:, 0] if self._y_1d else W
        self.solver_ = "cg"
        self.n_iter_ = info["n_iter"]
        self.cg_info_ = info
        self.n_features_in_ = source.n_features
        self.n_outputs_ = W.shape[1]
        if not info.get("converged", True) and not info.get("stopped_early") and info.get("residuals"):
            import warnings

            from .cg import ConvergenceWarning

            warnings.warn(f"cg did not converge in {info['n_iter']} iterations (relative residual "
                          f"{info['residuals'][-1]:.3g} > tol={self.tol}); the model is the last iterate: "
                          "raise max_iter or tol", ConvergenceWarning, stacklevel=3)
        if "normalizer" in info:
            self.normalizer_ = info.pop("normalizer")
        else:
            self.__dict__.pop("normalizer_", None)
        self._train_source = source

    def partial_fit(self, X: MatrixLike | BlockSource, y: ArrayLike | None = None, qid: ArrayLike | None = None,
                    sample_weight: ArrayLike | None = None, *, max_rows: int = DEFAULT_BLOCK_ROWS,
                    feature_names: Sequence[str] | None = None) -> RankRLS:
        """Add new groups; the model equals ``fit`` on all data seen so far (primal only).

        ``sample_weight`` as in :meth:`fit` (calls without it weigh their rows 1).

        Every call brings whole new groups (a query id seen in an earlier call
        starts a new group).  Fold statistics of :meth:`cross_validate` are
        updated too (folds are a hash of the query id).
        """
        self._check_params()
        source = _source_of(X, y, qid, self, reset=not hasattr(self, "stats_"))
        self.check_source(source)
        source = _weighted(source, sample_weight)
        if not hasattr(self, "stats_"):
            if hasattr(self, "coef_"):
                from .cg_selection import PARTIAL_FIT_MESSAGE

                raise NotImplementedError(PARTIAL_FIT_MESSAGE)
            if self.solver_for(source) != "primal":
                raise NotImplementedError(
                    f"partial_fit needs the primal solver (dense X, n_features <= {PRIMAL_MAX_FEATURES}); "
                    f"got {'sparse' if source.sparse else 'dense'} X with {source.n_features} features and "
                    f"solver={self.solver!r}"
                )
            stats = self.new_statistics(source.n_features, source.n_outputs)
            self._y_1d = _source_y_1d(source, y)
            self.set_feature_names(source.n_features, feature_names, source)
        else:
            stats = self.stats_
            if source.n_features != stats.n_features:
                raise ValueError(
                    f"X has {source.n_features} features, but RankRLS was fitted with {stats.n_features} features"
                )
            if source.n_outputs != stats.n_outputs:
                raise ValueError(
                    f"y has {source.n_outputs} output column(s), but RankRLS was fitted with {stats.n_outputs}"
                )
        folds = getattr(self, "fold_stats_", None)
        if folds is not None:  # one pass: the new statistics are the sum of the new fold statistics
            from .selection import accumulate_folds

            add = accumulate_folds(self, source, len(folds), max_rows)
            new = self.new_statistics(source.n_features, source.n_outputs)
            for f in range(len(folds)):
                folds[f].merge(add[f])
                new.merge(add[f])
        else:
            new = self.accumulate_source(source, max_rows)
        stats.merge(new)
        self.fit_statistics(stats)
        self._train_source = source
        return self

    # ------------------------------------------------------------- predict
    def predict(self, X: MatrixLike) -> np.ndarray:
        """Scores ``X @ coef_``: (rows,) or (rows, n_outputs); dask in -> dask out.

        A DataFrame / Arrow table has its columns matched to ``feature_names_in_`` by name.
        """
        self._check_fitted()
        X = self._predict_input(X)
        W = self.coef_
        if is_dask(X) and getattr(self, "normalizer_", None) is not None:
            Ws, c = self.normalizer_.fold(W)
            return _dask_predict(X, Ws, self.n_features_in_) + c
        if is_dask(X):
            if X.ndim != 2 or X.shape[1] != self.n_features_in_:
                raise ValueError(f"X has shape {X.shape}; expected (rows, {self.n_features_in_})")
            X = X.rechunk({1: -1})
            if W.ndim == 1:
                return X.map_blocks(lambda b: np.asarray(b @ W, dtype=np.float64), drop_axis=1,
                                    dtype=np.float64)
            return X.map_blocks(lambda b: np.asarray(b @ W, dtype=np.float64),
                                chunks=(X.chunks[0], (W.shape[1],)), dtype=np.float64)
        if isinstance(X, BlockSource):
            raise TypeError("predict takes arrays; for a source, predict block by block "
                            "(for b in source.blocks(): model.predict(b.X))")
        X = check_X(X, "X", n_features=self.n_features_in_, min_rows=0, finite=True)
        norm = getattr(self, "normalizer_", None)
        if norm is not None:   # Σ w (x − o)/s = x·(w/s) − o·(w/s): sparse rows stay sparse
            Ws, c = norm.fold(W)
            return np.asarray(X @ Ws, dtype=np.float64) + c
        out = X @ W
        return np.asarray(out, dtype=np.float64)

    # ---------------------------------------------------- statistics users
    def _check_stats(self, what):
        self._check_fitted()
        if not hasattr(self, "stats_"):
            raise NotImplementedError(
                f"{what} needs the primal statistics (G = XᵀLX); this model was fitted with "
                f"solver={self.solver_!r}. Refit with solver='primal'."
            )

    def eigenpath(self) -> EigenPath:
        """The eigendecomposition of the (scaled) Gram matrix: coefficients for any λ in O(n²) each."""
        ep = getattr(self, "_eigen", None)
        if ep is None:
            st = self._solve_statistics(self.stats_)
            ep = EigenPath(st.G, st.B)
            self._eigen = ep
        return ep

    def path(self, alphas: ArrayLike | None = None, *, source: BlockSource | None = None,
             max_rows: int = DEFAULT_BLOCK_ROWS) -> np.ndarray:
        """Coefficients for every alpha: (len(alphas), n_features[, n_outputs]).

        Primal: without another pass — one eigendecomposition of G, then
        O(n² v) per alpha.  cg: warm-started CG per alpha over
        the training data (or ``source``; required after loading), i.e.
        passes over the data per alpha — see
        :func:`streamrank.rankrls.cg_selection.path_of_model`.
        Default grid 2⁻¹⁵ … 2¹⁵.
        """
        self._check_fitted()
        if getattr(self, "solver_", None) == "cg":
            from .cg_selection import path_of_model

            return path_of_model(self, alphas, source, max_rows)
        self._check_stats("path")
        alphas = check_alphas(alphas, allow_empty=True)
        W = np.stack([self.eigenpath().coef(a) for a in alphas]) if len(alphas) else \
            np.zeros((0,) + self.stats_.B.shape)
        return W[:, :, 0] if self._y_1d else W

    def leave_query_out(self, source: BlockSource | None = None, *, alpha: float | None = None,
                        max_rows: int = DEFAULT_BLOCK_ROWS) -> np.ndarray:
        """Exact held-out predictions, each query left out in turn (Woodbury; one pass).

        Returns an array of the source rows' shape (rows,) or (rows, v), in
        source order.  ``source`` must hold groups the model was trained on
        (all of its training data, or part of it: each group is removed from
        the full statistics); ``source=None`` uses the data of the last
        ``fit``/``partial_fit`` call.  See :func:`streamrank.rankrls.selection.leave_query_out`.
        """
        from .selection import leave_query_out

        self._check_fitted()
        if getattr(self, "solver_", None) == "cg":
            from .cg_selection import LEAVE_QUERY_OUT_MESSAGE

            raise NotImplementedError(LEAVE_QUERY_OUT_MESSAGE)
        self._check_stats("leave_query_out")
        return leave_query_out(self, self.training_source(source), alpha=alpha, max_rows=max_rows)

    def cross_validate(self, source: BlockSource | None = None, alphas: ArrayLike | None = None,
                       folds: int | str = 5, scoring: str = "squared", *,
                       max_rows: int = DEFAULT_BLOCK_ROWS) -> CVResult:
        """Choose alpha by group cross-validation and refit the model at the chosen value.

        The choice is recorded in ``best_alpha_`` and the whole result in
        ``cv_results_``; the ``alpha`` parameter stays as the user set it
        (``model.set_params(alpha=model.best_alpha_)`` adopts the choice, e.g.
        before a later ``fit``).

        Primal: from per-fold statistics, no extra pass for the refit
        (:func:`streamrank.rankrls.selection.cross_validate`).  A source that
        resolves to ``solver="cg"``: k folds only, warm-started CG per fold
        and alpha plus one refit — passes over the data per fold and alpha
        (:func:`streamrank.rankrls.cg_selection.cross_validate_cg`).  Returns a
        :class:`~streamrank.rankrls.selection.CVResult`.  With ``normalize=``
        (primal and cg) every fold's model uses the scales of all rows, the ones the
        final model keeps (held-out rows take part in the scales, not in the fit).
        """
        from .selection import cross_validate

        self._check_params()
        src = self.training_source(source)
        if self.solver_for(src) == "cg":  # k-fold by warm-started CG solves (cg_selection)
            from .cg_selection import cross_validate_cg

            return cross_validate_cg(self, src, alphas=alphas, folds=folds, scoring=scoring, max_rows=max_rows)
        return cross_validate(self, source, alphas=alphas, folds=folds, scoring=scoring, max_rows=max_rows)

    def fit_edges(self, X, edges, magnitudes=None, cost="magnitude", weights=None):
        """Fit on a general preference graph (Pahikkala et al. 2009, §2.4).

        See :func:`streamrank.rankrls.edges.edge_statistics`; cost in
        {"unit", "magnitude", "normalized"} = eqs. (20), (21), (22);
        ``weights``: one factor >= 0 per edge (e.g. inverse propensities).
        """
        from .edges import edge_statistics

        self._check_params()
        if self.ties != "include" or self.group_weight != "pair":
            raise ValueError("fit_edges: the edges define the pairs and their weights; "
                             "group_weight and ties must keep their defaults ('pair', 'include')")
        stats = edge_statistics(X, edges, magnitudes, cost=cost, weights=weights)
        self.__dict__.pop("fold_stats_", None)
        self._train_source = None
        return self.fit_statistics(stats, y_1d=True)

    def training_source(self, source=None):
        """``source`` if given (checked), else the data of the last fit (an error when none is kept)."""
        if source is not None:
            if not isinstance(source, BlockSource):
                raise TypeError(f"source must be a block source (sr.as_source(X, y, qid), a GroupStore); "
                                f"got {type(source).__name__}")
            return source
        src = getattr(self, "_train_source", None)
        if src is None:
            raise ValueError("no training source is kept (model loaded or fitted on edges); pass source=")
        return src

    # --------------------------------------------------------- persistence
    def _get_state(self):
        self._check_fitted()
        attrs = {"solver_": self.solver_, "n_features_in_": int(self.n_features_in_),
                 "n_outputs_": int(self.n_outputs_), "y_1d": bool(self._y_1d)}
        arrays = {"coef_": np.asarray(self.coef_)}
        if hasattr(self, "stats_"):
            arrays.update(self.stats_.to_arrays("stats_"))
        folds = getattr(self, "fold_stats_", None)
        if folds is not None:
            attrs["n_folds"] = len(folds)
            for f, st in enumerate(folds):
                arrays.update(st.to_arrays(f"fold{f}_"))
        if hasattr(self, "n_iter_"):
            attrs["n_iter_"] = int(self.n_iter_)
        return attrs, arrays

    def _set_state(self, attrs, arrays):
        n = state_int(attrs, "n_features_in_", lo=1)
        k = state_int(attrs, "n_outputs_", lo=1)
        y_1d = bool(attrs["y_1d"])
        if y_1d and k != 1:
            raise ValueError(f"attribute y_1d is true but n_outputs_ is {k}")
        if attrs["solver_"] not in ("primal", "cg"):
            raise ValueError(f"attribute solver_={attrs['solver_']!r} is not 'primal' or 'cg'")
        self.coef_ = state_array(arrays, "coef_", (n,) if y_1d else (n, k))
        for prefix in ["stats_"] * ("stats_G" in arrays) + [f"fold{f}_" for f in range(
                state_int(attrs, "n_folds", lo=1, hi=1 << 16) if "n_folds" in attrs else 0)]:
            G = np.asarray(arrays.get(f"{prefix}G", np.zeros(0)))
            state_array(arrays, f"{prefix}G", (n, n) if G.ndim == 2 else (k, n, n))
            state_array(arrays, f"{prefix}B", (n, k))
            state_array(arrays, f"{prefix}counts", (3,), kind="i", lo=0)
        self.solver_ = attrs["solver_"]
        self.n_features_in_, self.n_outputs_, self._y_1d = n, k, y_1d
        if "stats_G" in arrays:
            self.stats_ = RankStatistics.from_arrays(arrays, group_weight=self.group_weight, ties=self.ties,
                                                     prefix="stats_")
        if "n_folds" in attrs:
            self.fold_stats_ = [
                RankStatistics.from_arrays(arrays, group_weight=self.group_weight, ties=self.ties,
                                           prefix=f"fold{f}_")
                for f in range(int(attrs["n_folds"]))
            ]
        if "n_iter_" in attrs:
            self.n_iter_ = int(attrs["n_iter_"])
        self._eigen = None


def _weighted(source, sample_weight):
    from ..io.weighted import with_weights

    return with_weights(source, sample_weight)


def _source_y_1d(source, y) -> bool:
    if y is not None and not isinstance(y, str):  # a str is a table's label column: 1-D
        return (y.ndim if hasattr(y, "ndim") else np.asarray(y).ndim) == 1
    return source.n_outputs == 1 and getattr(source, "y_ndim", 1) == 1


def _dask_predict(X, W, n_features):
    if X.ndim != 2 or X.shape[1] != n_features:
        raise ValueError(f"X has shape {X.shape}; expected (rows, {n_features})")
    X = X.rechunk({1: -1})
    if W.ndim == 1:
        return X.map_blocks(lambda b: np.asarray(b @ W, dtype=np.float64), drop_axis=1, dtype=np.float64)
    return X.map_blocks(lambda b: np.asarray(b @ W, dtype=np.float64), chunks=(X.chunks[0], (W.shape[1],)),
                        dtype=np.float64)

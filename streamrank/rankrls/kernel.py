"""Kernel RankRLS: exact dual (in memory) and sparse/basis RankRLS (streaming).

Dual mode (``n_basis=None``; Pahikkala et al. 2009 eq. (17))::

    A = (L K + λ I)⁻¹ L y,        f(x) = k(x, X) A

solved through one symmetric eigendecomposition of ``L^{1/2} K L^{1/2}``
(see :mod:`streamrank.rankrls._dual`): every λ of :meth:`KernelRankRLS.path`
costs O(m² v), leave-query-out (eq. (33)) O(m |U| + |U|³) per query, and
leave-pair-out for object ranking (§3.4, eqs. (35)–(39)) O(1) per pair after
one O(m³) Cholesky (ties excluded: one O(m³) solve per pair of tie classes).  A semidefinite
kernel needs no diagonal shift (no K⁻¹ is ever formed); a kernel that is not PSD on the data raises ``ValueError``.

Sparse mode (``n_basis=r``; §3.5 of the 2009 paper, eq. (41))::

    A = (K_RM L K_MR + λ K_RR)⁻¹ K_RM L y,        f(x) = k(x, X_R) A

streams the data in two passes (a reservoir sample of the basis rows, then
the r × r statistics) and serves every λ from one O(r³) eigendecomposition:
see :mod:`streamrank.rankrls._sparse_kernel`.

The estimator delegates everything that differs between the two to its mode
(``_DualMode`` below, :class:`~streamrank.rankrls._sparse_kernel.SparseMode`):
fitting, the solver behind path and hold-outs, leave-query-out, leave-pair-out,
cross-validation and the saved state.

Saved models (``sr.save``) keep what the λ path and the hold-out formulas
need, and ``sr.load`` recomputes the decomposition lazily, once, on the first
call that needs it: the dual saves the training targets and the group
structure beside the basis rows (= the training rows) and redoes the O(m³)
eigendecomposition; the sparse model saves its r × r statistics
``K_RM L K_MR`` and ``K_RM L y`` and redoes the O(r³) step (its
leave-query-out streams the training data again, so it takes ``source=``).
These are extra arrays of the same model format version: files written
before them still load (predict works; path and hold-outs ask for a refit).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numbers

import numpy as np
import scipy.sparse as sp

from .._phases import phase
from .._defaults import check_alphas
from .._qid import qid_keys
from .._state_checks import state_array, state_int, state_matrix
from .._validation import (
    check_alpha,
    check_n_features,
    check_qid,
    check_X,
    check_y,
    group_ptr_from_qid,
)
from ..base import BaseRanker
from ..io.blocks import BlockSource, vstack_X
from ..kernels import check_kernel, kernel_rows
from ..laplacian import check_group_weight, check_ties
from ..normalize import FeatureMoments, check_normalize
from ..persistence import register_model
from ._dual import DualDecomposition, LaplacianRoot, LeavePairOut, LeavePairOutExcludeTies, PerOutput, check_psd
from ._kernel_cv import check_folds, choose, heldout_scores
from ._sparse_kernel import SPARSE

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._typing import ArrayLike, MatrixLike, Seed
    from ..io.blocks import BlockSource
    from .selection import CVResult

__all__ = ["KernelRankRLS"]


@register_model
class KernelRankRLS(BaseRanker):
    """Kernel RankRLS: exact dual solver or sparse (basis-vector) RankRLS.

    Parameters
    ----------
    kernel : {"rbf", "linear", "poly"} or callable
        The kernel function; a callable is ``kernel(X, Z) -> (len(X), len(Z))``.
    gamma, degree, coef0 : float
        Kernel parameters (rbf: exp(−γ‖x−z‖²); poly: (γ x·z + coef0)^degree).
    alpha : float > 0
        The regularization parameter λ.
    n_basis : None or int
        None: the exact dual, in memory; r: sparse RankRLS on r basis rows, streaming.
    basis : "random" or array
        A reservoir sample of r rows, or the basis rows given.
    group_weight, ties
        As in :class:`~streamrank.RankRLS` (:mod:`streamrank.laplacian`).
    random_state : int or None
        Seed of the reservoir sample (default 0: the same basis every run, as the other learners and the CLI's
        ``--seed``; None draws a fresh one).
    normalize : {None, "standard", "minmax"}
        Evaluate the kernel on features scaled by statistics of all training rows (:mod:`streamrank.normalize`):
        f(x) = k(x̃, R̃) A with x̃ = (x − o) / s, (o, s) in ``normalizer_``.  Dual: from the rows in memory.
        Sparse: the moments are gathered in the basis-sampling pass (no extra pass; an array ``basis`` has no such
        pass, so it costs one).  ``basis_`` holds the normalized basis rows.

    Attributes
    ----------
    dual_coef_ : (n_basis_rows,) or (n_basis_rows, n_outputs)
        A, the dual coefficients.
    basis_ : array
        The rows k(x, ·) is evaluated against (all training rows for the dual).
    n_features_in_, n_outputs_ : int
        The number of features and of outputs seen in fit.
    """

    #: training data and solver caches (m x m decomposition...) stay on the client (BaseRanker.for_workers)
    _LOCAL_ONLY = ("_train_source", "_decomp", "_lpo_cache", "_sparse", "_Y")
    def __init__(self, *, kernel: str | Callable[..., np.ndarray] = "rbf", gamma: float = 1.0, degree: int = 2,
                 coef0: float = 0.0, alpha: float = 1.0, n_basis: int | None = None,
                 basis: str | MatrixLike = "random", group_weight: str = "pair", ties: str = "include",
                 random_state: Seed = 0, normalize: str | None = None) -> None:
        self.normalize = normalize
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.alpha = alpha
        self.n_basis = n_basis
        self.basis = basis
        self.group_weight = group_weight
        self.ties = ties
        self.random_state = random_state

    # ------------------------------------------------------------ validation
    def kernel_function(self):
        """The kernel as a function ``k(X, Z) -> (rows of X, rows of Z)`` (the parameters checked)."""
        return check_kernel(self.kernel, self.gamma, self.degree, self.coef0)

    def _check_params(self):
        spec = self.kernel_function()
        check_alpha(self.alpha, "alpha")
        check_group_weight(self.group_weight)
        check_ties(self.ties)
        check_normalize(self.normalize)
        if self.n_basis is not None:
            if isinstance(self.n_basis, bool) or not isinstance(self.n_basis, numbers.Integral) \
                    or self.n_basis < 1:
                raise ValueError(f"n_basis must be None or an integer >= 1, got {self.n_basis!r}")
        if isinstance(self.basis, str) and self.basis != "random":
            raise ValueError(f"basis must be 'random' or an array of basis rows, got {self.basis!r}")
        return spec

    def _y_out(self, A):
        return A[:, 0] if self._one_d else A

    # -------------------------------------------------------------------- fit
    def fit(self, X: MatrixLike | BlockSource, y: ArrayLike | None = None, qid: ArrayLike | None = None,
            sample_weight: ArrayLike | None = None, *, max_rows: int | None = None,
            feature_names: Sequence[str] | None = None) -> KernelRankRLS:
        """Fit from arrays ``(X, y, qid)`` or from a :class:`~streamrank.BlockSource`.

        ``sample_weight``: (rows,) w_i >= 0, pair weight w_i w_j (= fitting ``with_weights(source, w)``; per-query
        and click weights: :mod:`streamrank.clicks`). Sparse (``n_basis=r``): K_RM L_w K_MR, one pass; the basis is
        drawn uniformly, not by weight.  Exact dual: ``A = (L_w K + λI)⁻¹ L_w y``
        (:class:`~streamrank.rankrls._dual.LaplacianRoot`); path, leave-query-out and CV keep working;
        ``leave_pair_out`` refuses weights.

        ``n_basis=None``: the exact dual in memory (a source is read whole). ``n_basis=r``: sparse RankRLS, two
        streaming passes (basis, statistics) in blocks of ``max_rows`` rows (default: about 4M/r rows).
        ``feature_names``: names of X's columns, kept as ``feature_names_in_`` (default: the store's feature names,
        if any).
        """
        spec = self._check_params()
        self.__dict__.pop("best_alpha_", None)
        self.__dict__.pop("cv_results_", None)
        if isinstance(X, BlockSource):
            if y is not None or qid is not None:
                raise ValueError("fit(source) takes the targets and query ids from the source; "
                                 "do not pass y or qid")
            source = X
        else:
            from .._tables import is_table

            if y is None:
                raise ValueError("fit(X, y, qid): y is required when X is an array")
            source = self._fit_source(X, y, qid, reset=True) if is_table(X) or sample_weight is not None else None
        from ..io.weighted import WeightedSource, with_weights

        if sample_weight is not None:
            source = with_weights(source, sample_weight)
        for attr in _FITTED_STATE:
            if hasattr(self, attr):
                delattr(self, attr)
        self.__dict__.pop("normalizer_", None)
        weight = None
        if self.n_basis is None and isinstance(self.basis, str):
            if source is not None:
                weight = (np.array(source.weight, dtype=np.float64) if isinstance(source, WeightedSource)
                          else source._read_weight(0, source.n_rows))   # rows in _read_all's order; a view keeps them
                X, y, qid = _read_all(source)
            if self.normalize is not None:   # the dual holds the rows: normalize them once, in memory
                X = check_X(X, "X")
                normalizer = FeatureMoments(X.shape[1]).update(X).normalizer(self.normalize)
                X = normalizer.transform(X)
            _DUAL.fit(self, spec, X, y, qid, weight=weight)
            if self.normalize is not None:
                self.normalizer_ = normalizer
        else:
            if source is None:
                from ..io.sources import as_source
                source = as_source(X, y, qid)
            SPARSE.fit(self, spec, source, max_rows)
        self.set_feature_names(self.n_features_in_, feature_names, source)
        return self

    def fit_basis_statistics(self, stats, basis, source, max_rows, *, one_d=None, normalizer=None):
        """Finish sparse RankRLS from summed basis statistics.

        ``stats`` holds K_RM L K_MR and K_RM L Y (any sum of per-block
        :class:`RankStatistics`, e.g. reduced on dask workers or added night
        by night); ``basis`` is X_R.  Solves A = (K_RM L K_MR + λ K_RR)⁻¹ K_RM L y
        through the eigendecomposition that serves every λ.
        """
        stats.check_complete()
        spec = self._check_params()
        if self.normalize is not None and normalizer is None:
            raise NotImplementedError(f"normalize={self.normalize!r}: this fit path (a cluster or nightly fit "
                                      "from statistics) does not gather the feature moments; fit locally "
                                      "or use normalize=None")
        for attr in _FITTED_STATE:
            self.__dict__.pop(attr, None)
        if normalizer is not None:
            self.normalizer_ = normalizer
        self.n_outputs_ = stats.n_outputs
        check_n_features(self, source.n_features, reset=True)
        SPARSE.finish(self, spec, stats, basis, source, max_rows, one_d)
        return self

    # ------------------------------------------------------------- predicting
    def predict(self, X: MatrixLike) -> np.ndarray:
        """Scores f(x) = k(x, basis_) A for every row of X (processed in row chunks)."""
        self._check_fitted("dual_coef_")
        X = check_X(self._predict_input(X), "X", n_features=self.n_features_in_)
        if getattr(self, "normalizer_", None) is not None:
            X = self.normalizer_.transform(X)
        A = self.dual_coef_
        return kernel_rows(self.kernel_function(), X, self.basis_, A)

    def _fitted_mode(self):
        """The mode (dual or sparse) that holds this model's solver; an error for files saved without it."""
        mode = _MODES.get(getattr(self, "_mode", None))
        if mode is None:
            self._check_fitted("dual_coef_")
            raise ValueError("this model was loaded from a file written without its training targets / "
                             "statistics (an older streamrank): path and hold-out formulas need them; refit "
                             "(and save again) to use them")
        return mode

    def _solver(self):
        """The decomposition behind path and hold-outs; recomputed once after ``sr.load``."""
        return self._fitted_mode().solver(self)

    def path(self, alphas: ArrayLike | None = None) -> np.ndarray:
        """Dual coefficients for every λ in ``alphas`` (default 2⁻¹⁵ … 2¹⁵) from the one decomposition.

        Returns (len(alphas), n_basis_rows) or (len(alphas), n_basis_rows, n_outputs).
        """
        arr = check_alphas(alphas)
        solver = self._solver()
        return np.stack([self._y_out(solver.coef(a)) for a in arr])

    # --------------------------------------------------------------- hold-out
    def leave_query_out(self, alpha: float | None = None, source: BlockSource | None = None) -> np.ndarray:
        """Held-out predictions for every training row, each query left out in turn.

        Dual: eq. (33) of the 2009 paper in block form (see ``_dual``).  Sparse:
        one streaming pass over the training source (or ``source``), Woodbury
        per group of the r-dimensional primal problem.  Returns (rows,) or
        (rows, n_outputs) in training row order.
        """
        alpha = self.alpha if alpha is None else check_alpha(alpha, "alpha")
        mode = self._fitted_mode()
        mode.solver(self)
        return self._y_out(mode.leave_query_out(self, alpha, source))

    def leave_pair_out(self, pairs, alpha=None):
        """Exact leave-pair-out predictions (f_i, f_j) for each pair (i, j) (2009 paper §3.4).

        Object ranking only: a dual model trained on one group (``qid=None``). Every ``group_weight`` is exact: the
        weight is one constant of the whole Laplacian, and the stored matrices use the weight of the m − 2 remaining
        rows that retraining would use.  Ties included: one O(m³) Cholesky per λ, then O(1) per pair (eqs.
        (35)–(39)).  Ties excluded: removing two rows also lowers the degree of every row tied with either of them —
        a change of the rank of their tie classes, not a low-rank update — so one O(m³) solve per distinct pair of
        tie classes met in ``pairs`` (one for the positive–negative pairs of binary labels), then O(T²) per pair
        with T tied classes (:class:`~streamrank.rankrls._dual.LeavePairOutExcludeTies`). Returns (pairs, 2) or
        (pairs, 2, n_outputs).
        """
        alpha = self.alpha if alpha is None else check_alpha(alpha, "alpha")
        mode = self._fitted_mode()
        mode.solver(self)
        out = mode.leave_pair_out(self, pairs, alpha)
        return out[:, :, 0] if self._one_d else out

    # ----------------------------------------------------------- model choice
    def cross_validate(self, source: BlockSource | tuple | None = None, alphas: ArrayLike | None = None,
                       folds: int | str = 5, scoring: str = "squared") -> CVResult:
        """Choose alpha by group cross-validation from one decomposition, then refit with it.

        The choice is recorded in ``best_alpha_`` (and the result in ``cv_results_``); the ``alpha`` parameter stays
        as the user set it.

        ``source``: a :class:`~streamrank.BlockSource` or a tuple ``(X, y, qid)``; ``None`` uses the training data
        (the model is fitted first when needed). ``folds``: ``"query"`` (exact leave-one-query-out, eq. (33)) or an
        int k >= 2 (queries split by :func:`~streamrank.rankrls.selection.fold_of`, the same hash folds as linear
        RankRLS; for sparse models from per-fold statistics in one pass, plus one prediction pass for ranking
        metrics).  ``scoring``: ``"squared"`` (held-out least-squares ranking loss per pair, lower is better),
        ``"disagreement"`` (lower) or ``"ndcg@k"`` (higher), as in
        :func:`streamrank.rankrls.selection.cross_validate`.  ``alphas`` defaults to 2⁻¹⁵ … 2¹⁵.  Every λ costs O(m²
        v) plus the hold-out formula; the decomposition is done once.  Returns a
        :class:`~streamrank.rankrls.selection.CVResult`.
        """
        from .selection import _parse_scoring

        kind, k = _parse_scoring(scoring)
        arr = check_alphas(alphas)
        self._check_params()
        if source is not None:
            if isinstance(source, tuple):
                self.fit(*source)
            else:
                self.fit(source)
        elif not hasattr(self, "dual_coef_"):
            raise ValueError("cross_validate(source=None) needs a fitted model; pass the training data")
        mode = self._fitted_mode()
        mode.solver(self)     # recomputed after sr.load; an error for files saved without the training data
        return self.record_selection(mode.cross_validate(self, arr, folds, kind, k, scoring))

    def fold_statistics(self, source, folds=5, *, max_rows=None):
        """Per-fold statistics of Φ = k(X, basis_) over ``source``, one pass (sparse models; folds by query id).

        The folds of :func:`~streamrank.rankrls.selection.fold_of`, as
        :meth:`cross_validate` uses them; statistics of several sources (e.g.
        one per night) add up (``merge``) fold by fold, so a source may hold
        fewer groups than folds.  A model fitted with ``normalize=`` evaluates
        k(x̃, basis_) on the rows scaled by its ``normalizer_``.
        """
        self._check_fitted("dual_coef_")
        if self._fitted_mode() is not SPARSE:
            raise ValueError("fold_statistics is for sparse models (n_basis=r or an array basis)")
        if max_rows is None:
            max_rows = getattr(self, "_max_rows", None) or max(256, (1 << 22) // max(self.basis_.shape[0], 1))
        if getattr(self, "normalizer_", None) is not None:      # the basis rows are normalized: so are x
            from ..normalize import NormalizedSource

            source = NormalizedSource(source, self.normalizer_)
        if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or folds < 2:
            raise ValueError(f"folds must be an integer >= 2; got {folds!r}")
        return SPARSE.fold_statistics(self, source, int(folds), max_rows)

    def select_from_fold_statistics(self, fold_stats, alphas=None):
        """k-fold choice of λ from per-fold statistics alone (squared loss per pair): ``(CVResult, total)``.

        What :meth:`cross_validate` (``folds=k``, ``scoring="squared"``) does
        after its pass.  The model is not changed: ``fit_basis_statistics(total,
        basis_, ...)`` with ``alpha = result.best_alpha`` fits it.
        """
        self._check_fitted("dual_coef_")
        if self._fitted_mode() is not SPARSE:
            raise ValueError("select_from_fold_statistics is for sparse models (n_basis=r or an array basis)")
        return SPARSE.select_from_fold_statistics(self, list(fold_stats), check_alphas(alphas))

    def fold_coefficients(self, fold_stats, alphas=None):
        """Per fold f, ``A_f(λ) = (G − G_f + λ K_RR)⁻¹ (B − B_f)`` for every λ: a list of (len(alphas), r, v).

        The models :meth:`select_from_fold_statistics` scores, for a caller that
        scores rows out of fold itself (``k(x̃, basis_) A_f``; x̃ scaled by
        ``normalizer_`` when the model has one).
        """
        self._check_fitted("dual_coef_")
        if self._fitted_mode() is not SPARSE:
            raise ValueError("fold_coefficients is for sparse models (n_basis=r or an array basis)")
        return SPARSE.fold_coefs(self, list(fold_stats), check_alphas(alphas))[1]

    # ------------------------------------------------------------ persistence
    def _get_state(self):
        self._check_fitted("dual_coef_")
        if callable(self.kernel):
            raise ValueError("a KernelRankRLS with a callable kernel cannot be saved (the callable is code, "
                             "and models are stored without pickle); use a named kernel")
        if sp.issparse(self.basis):
            raise ValueError("a model whose basis parameter is a sparse matrix cannot be saved (parameters are "
                             "JSON); the learned basis_ is stored, so set_params(basis='random') first")
        attrs = {"n_features_in_": int(self.n_features_in_), "n_outputs_": int(self.n_outputs_),
                 "one_d": bool(self._one_d), "mode": self._mode}
        basis = self.basis_
        arrays = {"basis_": basis if sp.issparse(basis) else np.asarray(basis),
                  "dual_coef_": np.asarray(self.dual_coef_)}
        mode = _MODES.get(self._mode)
        if mode is not None:      # what path / hold-outs need after loading (extra arrays; module docstring)
            mode.get_state(self, attrs, arrays)
        return attrs, arrays

    def _set_state(self, attrs, arrays):
        self.n_features_in_ = state_int(attrs, "n_features_in_", lo=1)
        self.n_outputs_ = state_int(attrs, "n_outputs_", lo=1)
        self._one_d = bool(attrs["one_d"])
        mode = attrs.get("mode", "dual")
        self.basis_ = state_matrix(arrays, "basis_", (None, self.n_features_in_))
        m = self.basis_.shape[0]
        self.dual_coef_ = state_array(arrays, "dual_coef_", (m,) if self._one_d else (m, self.n_outputs_))
        impl = _MODES.get(mode)
        if impl is not None and impl.has_state(arrays):
            impl.set_state(self, attrs, arrays)    # the decomposition is recomputed on first use (_solver)
        else:
            self._mode = mode + "-loaded"       # written before these arrays existed: predict only


_FITTED_STATE = ("dual_coef_", "_decomp", "_sparse", "_sparse_stats", "_lpo_cache", "_train_source",
                 "_weight")


class _DualMode:
    """The exact dual mode of :class:`KernelRankRLS` (no state of its own).

    Fitted state on the estimator: the decomposition ``_decomp``
    (:class:`~streamrank.rankrls._dual.DualDecomposition`), the training
    targets ``_Y``, the group structure ``_group_ptr`` / ``_group_qid`` and
    the leave-pair-out cache ``_lpo_cache``.
    """

    name = "dual"

    def fit(self, est, spec, X, y, qid, weight=None):
        X = check_X(X, "X")
        m = X.shape[0]
        if m < 1:
            raise ValueError("X has 0 rows; at least 1 needed")
        y = check_y(y, m, "y")
        q = check_qid(qid, m, "qid")
        gp, gq = group_ptr_from_qid(q, "qid")
        check_n_features(est, X.shape[1], reset=True)
        est._group_qid = gq
        est._one_d = y.ndim == 1
        Y = y.reshape(m, -1)
        est.n_outputs_ = Y.shape[1]
        est._weight = weight                       # row weights (a weighted source) or None
        est._decomp = _dual_decomposition(spec, X, Y, gp, est.group_weight, est.ties, check=True, weight=weight)
        est._group_ptr = gp
        est._Y = Y
        est._mode = self.name
        est.basis_ = X
        est.dual_coef_ = est._y_out(est._decomp.coef(est.alpha))
        return est

    def solver(self, est):
        if getattr(est, "_decomp", None) is None:     # loaded: O(m³) once
            est._decomp = _dual_decomposition(est.kernel_function(), est.basis_, est._Y, est._group_ptr,
                                              est.group_weight, est.ties, check=False,
                                              weight=getattr(est, "_weight", None))
        return est._decomp

    def leave_query_out(self, est, alpha, source):
        """Eq. (33) of the 2009 paper in block form (see ``_dual``); ``source`` is not needed."""
        gp = est._group_ptr
        if len(gp) - 1 < 2:
            raise ValueError("leave_query_out needs at least 2 query groups; the model was trained "
                             "on one group (qid=None: use leave_pair_out)")
        sets = [np.arange(gp[g], gp[g + 1]) for g in range(len(gp) - 1)]
        return self.solver(est).holdout(alpha, sets)

    def leave_pair_out(self, est, pairs, alpha):
            n_groups = len(est._group_ptr) - 1
            if n_groups != 1:
                raise ValueError(
                    f"leave_pair_out is for object ranking (one group, qid=None); this model was trained "
                    f"with {n_groups} query groups — use leave_query_out")
            if getattr(est, "_weight", None) is not None:
                raise NotImplementedError("leave_pair_out with row weights is not implemented (its closed "
                                          "form, eqs. (35)-(39), is for the unweighted Laplacian); use "
                                          "leave_query_out or cross_validate")
            m = est.basis_.shape[0]
            P = np.asarray(pairs)
            if P.ndim != 2 or P.shape[1] != 2 or P.dtype.kind not in "iu":
                raise ValueError(f"pairs must be an integer array of shape (n_pairs, 2), got "
                                 f"{P.dtype} array of shape {P.shape}")
            if P.size and (P.min() < 0 or P.max() >= m):
                bad = int(np.flatnonzero((P < 0).any(axis=1) | (P >= m).any(axis=1))[0])
                raise ValueError(f"pairs row {bad} = {P[bad].tolist()} holds a row index outside [0, {m})")
            if P.size and np.any(P[:, 0] == P[:, 1]):
                bad = int(np.flatnonzero(P[:, 0] == P[:, 1])[0])
                raise ValueError(f"pairs row {bad} = {P[bad].tolist()} holds the same row twice")
            lpo = getattr(self, "_lpo_cache", None)
            if lpo is None or lpo.alpha != alpha:      # one O(m³) step per λ, then O(1) per pair
                est._lpo_cache = None
                K = est.kernel_function()(est.basis_)
                Y = np.asarray(est._Y, dtype=np.float64).reshape(m, -1)
                if est.ties == "include":
                    lpo = LeavePairOut(K, Y, alpha, group_weight=est.group_weight)
                else:                                   # each output has its own tie classes
                    lpo = PerOutput([LeavePairOutExcludeTies(K, Y[:, k:k + 1], alpha, group_weight=est.group_weight)
                                     for k in range(Y.shape[1])])
                est._lpo_cache = lpo
            return lpo(P)

    def cross_validate(self, est, arr, folds, kind, k, scoring):
        """Held-out predictions of every λ from the one decomposition (query or k-fold sets of groups)."""
        from .selection import fold_of

        gp = est._group_ptr
        Y = est._Y
        fold_groups = check_folds(folds, len(gp) - 1)
        if fold_groups is None:
            fog = fold_of(est._group_qid, int(folds))
            fold_groups = [np.flatnonzero(fog == f) for f in range(int(folds))]
        sets = [np.concatenate([np.arange(gp[g], gp[g + 1]) for g in gs]) if len(gs) else
                np.zeros(0, np.int64) for gs in fold_groups]
        with phase("cross-validation", total=len(arr), unit="λ") as p:
            preds = []
            for a in arr:
                preds.append(est._decomp.holdout(a, sets))
                p.update(1)
            preds = np.stack(preds)                                          # (a, m, v)
        per_out = heldout_scores(preds, Y, gp, group_weight=est.group_weight, ties=est.ties, kind=kind, k=k,
                                 weight=getattr(est, "_weight", None))
        result = choose(arr, per_out, kind=kind, k=k, scoring=scoring, folds=folds)
        est.dual_coef_ = est._y_out(self.solver(est).coef(result.best_alpha))   # alpha stays the user's
        est.cv_predictions_ = preds[:, :, 0] if est._one_d else preds
        return result

    def get_state(self, est, attrs, arrays):
        """The training targets and group structure beside the basis rows (= the training rows)."""
        arrays["train_y"] = np.asarray(est._Y, dtype=np.float64)
        arrays["train_group_ptr"] = np.asarray(est._group_ptr, dtype=np.int64)
        arrays["train_group_qid"] = qid_keys(est._group_qid)  # folds need only the keys
        if getattr(est, "_weight", None) is not None:
            arrays["train_weight"] = np.asarray(est._weight, dtype=np.float64)

    def has_state(self, arrays):
        return "train_y" in arrays

    def set_state(self, est, attrs, arrays):
        m = est.basis_.shape[0]
        est._Y = state_array(arrays, "train_y", (m, est.n_outputs_))
        est._group_ptr = state_array(arrays, "train_group_ptr", (None,), kind="i", lo=0, hi=m)
        est._group_qid = state_array(arrays, "train_group_qid", (len(est._group_ptr) - 1,), kind="i")
        est._weight = state_array(arrays, "train_weight", (m,), lo=0) if "train_weight" in arrays else None
        gp = est._group_ptr
        if gp.size == 0 or gp[0] != 0 or gp[-1] != m or np.any(gp[1:] < gp[:-1]):
            raise ValueError(f"train_group_ptr does not run from 0 to the {m} basis rows without decreasing")
        est._mode = self.name


_DUAL = _DualMode()
_MODES = {_DUAL.name: _DUAL, SPARSE.name: SPARSE}


def _dual_decomposition(spec, X, Y, gp, group_weight, ties, *, check, weight=None):
    """The one O(m³) step of the dual: ``BKB = U Λ Uᵀ`` (see :mod:`streamrank.rankrls._dual`).

    ``check``: test that a kernel not PSD by construction is PSD on X (fit;
    a loaded model was checked when it was fitted).  ``weight``: row weights (weighted Laplacian).
    """
    Y = np.asarray(Y, dtype=np.float64).reshape(len(Y), -1)
    m = len(Y)
    with phase(f"kernel matrix ({m:,} x {m:,})"):
        K = spec(X)
        if check and not spec.psd_by_construction:
            check_psd(K, name="kernel")
    if ties == "exclude" and Y.shape[1] > 1:     # every output has its own tie classes: one per output
        parts = []
        for k in range(Y.shape[1]):
            root = LaplacianRoot(gp, Y[:, k:k + 1], group_weight=group_weight, ties=ties, weight=weight)
            held = [root.apply(K.copy() if k + 1 < Y.shape[1] else K, inplace=True)]
            with phase(f"decomposition of output {k} (O(m³) eigendecomposition, no count inside)"):
                parts.append(DualDecomposition(held, Y[:, k:k + 1], root))
        return PerOutput(parts)
    root = LaplacianRoot(gp, Y, group_weight=group_weight, ties=ties, weight=weight)
    held = [root.apply(K, inplace=True)]     # B K, in the buffer of K, handed over (freed early)
    del K
    with phase(f"decomposition ({m:,} x {m:,} eigendecomposition, O(m³), no count inside)"):
        return DualDecomposition(held, Y, root)


def _read_all(source):
    """Concatenate every block of a source (dual mode: the data must fit in memory)."""
    Xs, ys, qs = [], [], []
    for block in source.blocks(max_rows=1 << 16, prefetch=False):
        Xs.append(block.X)
        ys.append(np.asarray(block.y))
        qs.append(block.row_qid())
    if not Xs:
        raise ValueError("the source holds no rows")
    X = vstack_X(Xs)
    y = np.concatenate(ys, axis=0)
    qid = np.concatenate(qs)
    if getattr(source, "global_group", False):
        qid = None
    return X, y, qid



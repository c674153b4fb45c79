"""Transductive RankRLS (Pahikkala et al. 2007, "Transductive ranking via pairwise RLS", Theorem 2).

Given labelled queries (rows V̄, targets Y_V̄) and unlabelled queries (rows V),
the scores of the unlabelled rows are chosen to minimise the leave-query-out
least-squares ranking error over *all* queries plus a pull towards the
inductive prediction, objective (11):

    J(Ŷ) = Σ_U (Y^V_U − f^V_Ū(X_U))ᵀ L_UU (Y^V_U − f^V_Ū(X_U)) + γ_t ‖Ŷ − f_V̄(X_V)‖²,

U running over every query (labelled or not), Y^V the targets with the rows
V set to Ŷ, f^V_Ū RankRLS trained without query U on Y^V, and f_V̄ RankRLS
trained on the labelled queries only.  The hold-out predictions are linear in
the targets, ``f^V_Ū(X_U) = G_U Y^V`` with ``G_U`` the hold-out operator of
eq. (9) computed from one decomposition of the whole problem
(:meth:`~streamrank.rankrls._dual.DualDecomposition.holdout_operator`: the
block-inverse identity ``(N_ŪŪ)⁻¹ = P_ŪŪ − P_ŪU P_UU⁻¹ P_UŪ`` used in the
paper's proof).  With ``E_U = I_U − G_U`` and ``Y^V = y₀ + P_V Ŷ``, setting
the gradient to zero gives Theorem 2, eq. (12), in the compact form

    (Σ_U P_Vᵀ E_Uᵀ L_UU E_U P_V + γ_t I) Ŷ = −Σ_U P_Vᵀ E_Uᵀ L_UU E_U y₀ + γ_t f_V̄(X_V),

O(m³) in total.  The paper's weights W_ij = 1 / C(|v|, 2) are
``group_weight="query"`` (the default here); ties are included (the
Laplacian must not depend on the unknown Ŷ).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp

from .._qid import qid_repr
from .._state_checks import state_array, state_int, state_matrix
from .._validation import check_alpha, check_qid, check_X, check_y, group_ptr_from_qid
from ..base import BaseRanker
from ..io.blocks import vstack_X
from ..kernels import check_kernel, kernel_rows
from ..laplacian import check_group_weight
from ..persistence import register_model
from ._dual import DualDecomposition, LaplacianRoot, check_psd
from .kernel import KernelRankRLS

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._typing import MatrixLike

__all__ = ["TransductiveRankRLS"]


@register_model
class TransductiveRankRLS(BaseRanker):
    """Transductive RankRLS: scores for unlabelled queries (transductive paper, Theorem 2).

    Parameters
    ----------
    kernel, gamma, degree, coef0
        As :class:`~streamrank.KernelRankRLS`.
    alpha
        float > 0, the regularization parameter λ
    gamma_t
        float > 0, weight γ of ‖Ŷ − f_V̄(X_V)‖² in objective (11)
    group_weight : {"query", "pair", "size"}; the paper uses "query"
        How the pairs of a group are weighted, as in RankRLS.

    Notes
    -----
    After :meth:`fit_predict`, ``transductive_scores_`` holds Ŷ and
    ``dual_coef_``/``basis_`` the RankRLS model trained on all rows with the
    unlabelled targets set to Ŷ (so :meth:`predict` scores new rows).
    """

    def __init__(self, *, kernel: str | Callable[..., np.ndarray] = "rbf", gamma: float = 1.0, degree: int = 2,
                 coef0: float = 0.0, alpha: float = 1.0, gamma_t: float = 1.0, group_weight: str = "query") -> None:
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.alpha = alpha
        self.gamma_t = gamma_t
        self.group_weight = group_weight

    def fit_predict(self, X_lab, y_lab, qid_lab, X_unlab, qid_unlab):
        """Return Ŷ, the scores of the unlabelled rows: (rows_unlab,) or (rows_unlab, outputs)."""
        spec = check_kernel(self.kernel, self.gamma, self.degree, self.coef0)
        lam = check_alpha(self.alpha, "alpha")
        gt = check_alpha(self.gamma_t, "gamma_t")
        check_group_weight(self.group_weight)
        Xl = check_X(X_lab, "X_lab", min_rows=1)
        Xu = check_X(X_unlab, "X_unlab", n_features=Xl.shape[1], min_rows=1)
        ml, mu = Xl.shape[0], Xu.shape[0]
        yl = check_y(y_lab, ml, "y_lab")
        ql = check_qid(qid_lab, ml, "qid_lab")
        qu = check_qid(qid_unlab, mu, "qid_unlab")
        common = sorted(set(ql.tolist()) & set(qu.tolist()), key=repr)  # ids of any kind (issue 18)
        if common:
            raise ValueError(f"qid_unlab reuses query id {qid_repr(common[0])} of qid_lab; labelled and "
                             "unlabelled rows must belong to different queries")
        group_ptr_from_qid(ql, "qid_lab")
        group_ptr_from_qid(qu, "qid_unlab")
        one_d = yl.ndim == 1
        Yl = yl.reshape(ml, -1)
        v = Yl.shape[1]
        X = vstack_X([Xl, Xu]) if sp.issparse(Xl) or sp.issparse(Xu) else np.vstack([Xl, Xu])
        if sp.issparse(Xl) != sp.issparse(Xu):
            X = sp.csr_matrix(X)
        q = np.concatenate([ql, qu])
        gp, _ = group_ptr_from_qid(q, "qid")
        m = ml + mu
        # f_V̄(X_V): inductive RankRLS on the labelled queries only
        ind = KernelRankRLS(kernel=self.kernel, gamma=self.gamma, degree=self.degree, coef0=self.coef0,
                            alpha=lam, group_weight=self.group_weight).fit(Xl, Yl, ql)
        f0 = ind.predict(Xu).reshape(mu, v)
        # one decomposition of the whole problem (targets enter only through y)
        root = LaplacianRoot(gp, group_weight=self.group_weight, ties="include")
        K = spec(X)
        if not spec.psd_by_construction:
            check_psd(K, name="kernel")
        held = [root.apply(K, inplace=True)]
        del K
        dec = DualDecomposition(held, np.zeros((m, 1)), root)
        y0 = np.zeros((m, v))
        y0[:ml] = Yl
        V = np.arange(ml, m)
        AtA = gt * np.eye(mu)
        Atb = gt * f0
        for g in range(len(gp) - 1):
            H = np.arange(gp[g], gp[g + 1])
            if H.size < 2:
                continue                                 # L_UU = 0: no pair, no cost
            E = -dec.holdout_operator(lam, H)            # E_U = I_U − G_U   (|U|, m)
            E[:, H] += np.eye(H.size)
            SE = root.block(g) @ E                       # L_UU^{1/2} E_U
            SEv = SE[:, V]
            AtA += SEv.T @ SEv
            Atb -= SEv.T @ (SE @ y0)
        Yhat = la.solve(0.5 * (AtA + AtA.T), Atb, assume_a="pos", check_finite=False)
        # final model on all rows with Y^V
        Yall = y0.copy()
        Yall[V] = Yhat
        dec.z = dec.U.T @ root.apply(Yall)
        self._one_d = one_d
        self.n_features_in_ = Xl.shape[1]
        self.n_outputs_ = v
        self.basis_ = X
        A = dec.coef(lam)
        self.dual_coef_ = A[:, 0] if one_d else A
        self.transductive_scores_ = Yhat[:, 0] if one_d else Yhat
        return self.transductive_scores_

    def predict(self, X: MatrixLike) -> np.ndarray:
        """Scores of new rows under the model trained on all rows with Ŷ filled in."""
        self._check_fitted("dual_coef_")
        X = check_X(self._predict_input(X), "X", n_features=self.n_features_in_)
        spec = check_kernel(self.kernel, self.gamma, self.degree, self.coef0)
        return kernel_rows(spec, X, self.basis_, self.dual_coef_)

    def _get_state(self):
        self._check_fitted("dual_coef_")
        if callable(self.kernel):
            raise ValueError("a model with a callable kernel cannot be saved (no pickle); use a named kernel")
        return ({"n_features_in_": int(self.n_features_in_), "n_outputs_": int(self.n_outputs_),
                 "one_d": bool(self._one_d)},
                {"basis_": self.basis_, "dual_coef_": np.asarray(self.dual_coef_),
                 "transductive_scores_": np.asarray(self.transductive_scores_)})

    def _set_state(self, attrs, arrays):
        self.n_features_in_ = state_int(attrs, "n_features_in_", lo=1)
        self.n_outputs_ = state_int(attrs, "n_outputs_", lo=1)
        self._one_d = bool(attrs["one_d"])
        self.basis_ = state_matrix(arrays, "basis_", (None, self.n_features_in_))
        m = self.basis_.shape[0]
        self.dual_coef_ = state_array(arrays, "dual_coef_", (m,) if self._one_d else (m, self.n_outputs_))
        self.transductive_scores_ = state_array(arrays, "transductive_scores_",
                                                (None,) if self._one_d else (None, self.n_outputs_))


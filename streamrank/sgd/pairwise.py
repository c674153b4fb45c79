"""Linear pairwise SGD ranker ``f(x) = w . x`` on preference pairs sampled within groups.

The vector case of the sparse SGD machinery: each step takes
an ordered pair (x+, x-) of one query group with ``y+ > y-`` and, with
``delta = x+ - x-`` and margin ``m = w . delta``,

* ``loss="hinge"``:    ``max(0, 1 - m)``,      subgradient step when ``m < 1``;
* ``loss="logistic"``: ``log(1 + exp(-m))``,  step weight ``1 / (1 + exp(m))``;

``w <- (1 - eta_t l2) w + eta_t g delta`` with ``eta_t = eta0 / sqrt(t)``
(or constant), minimising ``E[loss] + l1 ||w||_1 + (l2 / 2) ||w||^2``.
The L1 term (``l1_rule``):

* ``"cumulative"`` (default): the cumulative penalty of Tsuruoka, Tsujii &
  Ananiadou (ACL 2009), the rule of scikit-learn's ``SGDClassifier``: with
  ``u_t = l1 * sum_{k<=t} eta_k`` and ``q_j`` the penalty weight j actually
  received, each weight touched by step t is clipped at zero against
  ``u_t -/+ q_j`` (see :mod:`streamrank.sgd._pairwise_kernels`).  Unlike
  scikit-learn, ``u`` and ``q`` continue across ``partial_fit`` calls, so a
  model streamed in chunks is the model of one call.
* ``"window"``: the sparse-SGD paper's rule -- every ``shrink_every`` = T
  steps a soft threshold of every weight by ``l1 * sum(eta_k, k =
  t-T+1..t)`` (eq. 7 and Algorithm 1 of Chen et al. 2010).  Each window
  starts afresh, so a weight whose gradient is pure noise stays nonzero
  whenever its walk over T steps (~ sqrt(T) eta) beats ``l1 T eta``: at the
  same ``l1`` this rule is far less sparse than the minimiser of the
  objective (``benchmarks/peers_sgd.py --lp-pairs 20000``: 200 features,
  l1 = 0.01, exact minimiser 30 nonzero, cumulative rule 19, window 193).

Pairs are sampled as in stochastic pairwise ranking: a query uniformly
among those with two different scores, then a uniform ordered pair of that
query (:func:`streamrank.pairs_from_groups`).

Weights (click logs, inverse propensity scoring): on a source with row
weights (:func:`streamrank.io.weighted.with_weights`, e.g.
:func:`streamrank.clicks.ips_weights`) the sampled pair (i, j) steps with its
gradient times ``w_i w_j`` — the pair weight of weighted RankRLS
(:mod:`streamrank.laplacian`) — so SGD minimises the weighted objective
``Σ_q (1/|P_q|) Σ_{(i,j) ∈ P_q} w_i w_j loss_ij`` (pairs are still drawn
uniformly; the weight multiplies the gradient, an unbiased estimate).  With
clicks as labels and ``w = ips_weights(clicks, position, propensity)`` the
pairs are (clicked i, unclicked j) of weight ``1 / p(position_i)`` (Joachims,
Swaminathan & Schnabel 2017).  ``partial_fit_pairs(..., pair_weight=)`` takes
explicit pair weights.  ``t``, the L1 state (``u``,
``q``, the pending eta of the window) and the sampling counter survive
``partial_fit`` calls and ``sr.save`` / ``sr.load``.

Example
-------
>>> import numpy as np, streamrank as sr
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(300, 5)); y = X @ [1.0, -1.0, 0, 0, 0.5]; qid = np.repeat(np.arange(30), 10)
>>> p = sr.PairwiseSGDRanker(eta0=0.1, l1=1e-3, shrink_every=10).partial_fit(X, y, qid, n_pairs=3000)
>>> round(float(sr.metrics.mean_average_precision(y > 1, p.predict(X), qid)), 2) > 0.9
True
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from .._defaults import DEFAULT_BLOCK_ROWS
from .._state_checks import state_array, state_int
from .._validation import check_X
from ..base import BaseRanker, NotFittedError
from ..persistence import register_model
from . import _pairwise_kernels as PK
from ..normalize import FeatureMoments, check_normalize
from ._base import (_canonical_csr, check_choice, check_eta0, check_int, check_nonneg, kernel_csr,
                    kernel_dense_pair)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._typing import ArrayLike, MatrixLike, Seed
    from ..io.blocks import BlockSource

__all__ = ["PairwiseSGDRanker"]

_LR = {"invsqrt": 0, "constant": 1}
_LOSS = {"hinge": PK.LOSS_HINGE, "logistic": PK.LOSS_LOGISTIC}
_L1 = {"cumulative": PK.L1_CUMULATIVE, "window": PK.L1_WINDOW}


def _scale_columns(X, scale):
    """X / scale column by column (dense: C-contiguous float64; CSR stays CSR)."""
    if sp.issparse(X):
        return sp.csr_matrix(X @ sp.diags(1.0 / scale))
    return np.ascontiguousarray(X / scale)


@register_model
class PairwiseSGDRanker(BaseRanker):
    """Linear ranker learned by SGD on preference pairs with cumulative L1 (and L2).

    Parameters
    ----------
    eta0 : float > 0
        The initial learning rate.
    l1 : float >= 0
        L1 strength λ of ``λ ||w||_1``: the penalty of step t is ``λ eta_t``.
    l2 : float >= 0
        Weight decay ``w <- (1 - eta l2) w`` at every step.
    shrink_every : int >= 1
        T of ``l1_rule="window"`` (unused by the cumulative rule).
    loss : {"hinge", "logistic"}
        The loss on a sampled pair.
    learning_rate : {"invsqrt", "constant"}
        The step size: ``eta0 / sqrt(t)`` or ``eta0``.
    l1_rule : {"cumulative", "window"}
        Cumulative penalty (Tsuruoka et al. 2009) or the paper's soft
        threshold every T steps (Chen et al. 2010, eq. 7); see the module doc.
    random_state : int
        Seed of the pair sampling (call c of ``partial_fit`` uses the seed
        sequence ``(random_state, c)``).
    normalize : {None, "standard", "minmax"}
        Learn on features scaled by :mod:`streamrank.normalize`: the model
        scores ``Σ_j coef_j (x_j − o_j) / s_j`` ((o, s) in ``normalizer_``,
        applied by :meth:`predict`, saved and exported).  A pair's difference
        does not see the shift o, so the steps use ``(x⁺ − x⁻) / s``.  ``fit``
        gathers (o, s) in one pass over the source before sampling pairs (SGD
        has no statistics pass to ride along); ``partial_fit`` takes them from
        its first batch and keeps them (later batches are scaled the same).

    Attributes
    ----------
    coef_ : ndarray (n_features,)
        The weights.
    t_ : int
        Pairs seen so far.
    n_features_in_ : int
        The number of features seen in fit.
    """

    def __init__(self, *, eta0: float = 0.1, l1: float = 1e-4, l2: float = 0.0, shrink_every: int = 100,
                 loss: str = "hinge", learning_rate: str = "invsqrt", l1_rule: str = "cumulative",
                 random_state: Seed = 0, normalize: str | None = None) -> None:
        self.normalize = normalize
        self.eta0 = eta0
        self.l1 = l1
        self.l2 = l2
        self.shrink_every = shrink_every
        self.loss = loss
        self.learning_rate = learning_rate
        self.l1_rule = l1_rule
        self.random_state = random_state

    def _params(self):
        check_normalize(self.normalize)
        return dict(
            eta0=check_eta0(self.eta0),
            l1=check_nonneg(self.l1, "l1"),
            l2=check_nonneg(self.l2, "l2"),
            T=check_int(self.shrink_every, "shrink_every", 1),
            loss=_LOSS[check_choice(self.loss, "loss", set(_LOSS))],
            lr=_LR[check_choice(self.learning_rate, "learning_rate", set(_LR))],
            l1_rule=_L1[check_choice(self.l1_rule, "l1_rule", set(_L1))],
        )

    def _fit_normalizer(self, src, max_rows):
        """normalize=: (o, s) from one pass over ``src`` (dropped when normalize is None)."""
        self.__dict__.pop("normalizer_", None)
        if self.normalize is not None:
            moments = FeatureMoments(src.n_features)
            for block in src.blocks(max_rows=max_rows, split_groups=True):  # rows only: a giant group in pieces
                moments.update(block.X)
            self.normalizer_ = moments.normalizer(self.normalize)

    def _start(self, n_features):
        self._v = np.zeros(int(n_features), dtype=np.float64)
        self._fstate = np.array([1.0, 0.0, 0.0])  # [scale a, window sum of eta, u = l1 sum eta]
        self._q = np.zeros(int(n_features), dtype=np.float64)  # L1 penalty received per weight
        self._istate = np.zeros(1, dtype=np.int64)
        self._calls = 0
        self.n_features_in_ = int(n_features)

    # ------------------------------------------------------- SGD protocol
    def has_state(self) -> bool:
        """True when the model has a v that further rounds (``partial_fit``, distributed rounds) continue."""
        return getattr(self, "_v", None) is not None

    def init_state(self, n_features):
        """Check the parameters; start v = 0 over ``n_features`` unless the model has a state (rounds continue it)."""
        self._params()
        if not self.has_state():
            self._start(n_features)
        return self

    @classmethod
    def average(cls, models):
        """Average of linear models that took the same number of steps from the same state.

        ``w = mean_k w_k`` (a dense n-vector); the clock is the shards' common
        ``t`` (their maximum: a shard without pairs did not move).  L1 state:
        with the cumulative rule (Tsuruoka et al. 2009) the global penalty
        ``u = l1 Σ η`` depends on the clock only, so it is taken from the shard
        with the largest ``t``, and the penalty each weight has received, ``q``
        (in units of w), is averaged like w itself; with the paper's window rule
        the pending window sum is likewise a function of the clock.
        """
        import copy

        lead = max(models, key=lambda m: m.t_)
        out = copy.deepcopy(lead)
        out._v = np.mean([m.coef_ for m in models], axis=0)
        out._fstate = lead._fstate.copy()
        out._fstate[0] = 1.0                     # coef_ = fstate[0] * v: the scale is folded into v
        out._q = np.mean([m._q for m in models], axis=0)
        out._istate = lead._istate.copy()
        return out

    # ------------------------------------------------------------ stepping
    def partial_fit_pairs(self, X_pos, X_neg, pair_weight=None):
        """One SGD step per row-aligned pair ``(X_pos[r], X_neg[r])`` (X_pos preferred).

        Dense float32/float64 pairs run the dense kernel directly; sparse input
        (or a dense/sparse mix) runs the CSR kernel -- the results are identical.
        The steps compute in float64 (each difference ``float64(x+) -
        float64(x-)``), so the kernels compile one variant for CSR input
        (int64 indices, float64 values: :func:`~streamrank.sgd._base.kernel_csr`)
        and two for dense (float32 or float64 pairs, a mixed pair as float64,
        read-only as a writeable copy: ``kernel_dense_pair``); all exact.
        ``pair_weight``: (pairs,) finite weights >= 0; pair r's gradient is
        multiplied by it (a weight 0 still advances the clock, the decay and
        the L1 penalty: it is a step of the weighted objective).
        """
        p = self._params()
        nf = getattr(self, "n_features_in_", None)
        Xp = check_X(X_pos, "X_pos", n_features=nf)
        Xn = check_X(X_neg, "X_neg", n_features=Xp.shape[1])
        if Xn.shape[0] != Xp.shape[0]:
            raise ValueError(f"X_neg has {Xn.shape[0]} rows but X_pos has {Xp.shape[0]}; pairs are row-aligned")
        pw = None
        if pair_weight is not None:
            from ..laplacian import check_weight

            pw = np.ascontiguousarray(check_weight(pair_weight, Xp.shape[0], "pair_weight"), dtype=np.float64)
        if getattr(self, "_v", None) is None:
            self._start(Xp.shape[1])
        if Xp.shape[0] == 0:
            return self
        if self.normalize is not None:
            if getattr(self, "normalizer_", None) is None:   # first pairs seen: their rows fix the scales
                self.normalizer_ = FeatureMoments(Xp.shape[1]).update(Xp).update(Xn).normalizer(self.normalize)
            Xp, Xn = _scale_columns(Xp, self.normalizer_.scale), _scale_columns(Xn, self.normalizer_.scale)
        args = (p["eta0"], p["lr"], p["l1"], p["l2"], p["T"], p["loss"], p["l1_rule"])
        if not sp.issparse(Xp) and not sp.issparse(Xn):
            # dense twin: same steps bit for bit, without building CSR (check_X: C-contiguous float32/64)
            Xp, Xn = kernel_dense_pair(Xp, Xn)
            dj = np.empty(max(Xp.shape[1], 1), dtype=np.int64)
            dx = np.empty(max(Xp.shape[1], 1), dtype=np.float64)
            if pw is None:
                PK.pairwise_steps_dense(self._v, self._fstate, self._istate, self._q, Xp, Xn, *args, dj, dx)
            else:
                PK.pairwise_steps_dense_weighted(self._v, self._fstate, self._istate, self._q, Xp, Xn, pw, *args,
                                                 dj, dx)
            return self
        Xp, Xn = _canonical_csr(Xp), _canonical_csr(Xn)
        nd = int((np.diff(Xp.indptr) + np.diff(Xn.indptr)).max())
        dj = np.empty(max(nd, 1), dtype=np.int64)
        dx = np.empty(max(nd, 1), dtype=np.float64)
        if pw is None:
            PK.pairwise_steps(self._v, self._fstate, self._istate, self._q, *kernel_csr(Xp), *kernel_csr(Xn),
                              *args, dj, dx)
        else:
            PK.pairwise_steps_weighted(self._v, self._fstate, self._istate, self._q, *kernel_csr(Xp),
                                       *kernel_csr(Xn), pw, *args, dj, dx)
        return self

    def _step_pairs(self, batches):
        """Step on every PairBatch; on a weighted source pair (i, j) weighs w_i w_j (module doc), the
        batch's ``pair_weight``: read with the rows of the batch, so a store's weight column is never
        held whole (memory O(block), as for X)."""
        for b in batches:
            self.partial_fit_pairs(b.X_pos, b.X_neg, pair_weight=b.pair_weight)

    def _seed(self):
        base = 0 if self.random_state is None else int(self.random_state)
        seed = np.random.SeedSequence([base, int(self._calls)])
        self._calls += 1
        return np.random.default_rng(seed)

    def partial_fit(self, X: MatrixLike, y: ArrayLike | None = None, qid: ArrayLike | None = None,
                    n_pairs: int | None = None, *, sample_weight: ArrayLike | None = None,
                    feature_names: Sequence[str] | None = None) -> PairwiseSGDRanker:
        """Sample ``n_pairs`` (default: one per row) pairs within the groups of this batch and step.

        ``qid=None``: the batch is one group.  Continues t and the shrinkage state.
        ``sample_weight``: (rows,) row weights of this batch, as in :meth:`fit`.
        """
        from ..io.pairs import pairs_from_groups
        from ..io.weighted import with_weights

        self._params()
        src = with_weights(self._fit_source(X, y, qid, reset=getattr(self, "_v", None) is None), sample_weight)
        if src.n_rows == 0:
            raise ValueError("empty batch: X has 0 rows; at least two rows of one group are needed")
        nf = getattr(self, "n_features_in_", None)
        if nf is not None and src.n_features != nf:
            raise ValueError(f"X has {src.n_features} features, but {type(self).__name__} was fitted "
                             f"with {nf} features")
        if getattr(self, "_v", None) is None:
            self._start(src.n_features)
            self.set_feature_names(src.n_features, feature_names, src)
            self._fit_normalizer(src, max(src.n_rows, 1))
        n_pairs = src.n_rows if n_pairs is None else check_int(n_pairs, "n_pairs", 0)
        if n_pairs == 0:
            return self
        self._step_pairs(pairs_from_groups(src, n_pairs, random_state=self._seed(), shuffle=True,
                                                max_rows=max(src.n_rows, 1)))
        return self

    def fit(self, source: MatrixLike | BlockSource, y: ArrayLike | None = None, qid: ArrayLike | None = None,
            sample_weight: ArrayLike | None = None, *, n_pairs: int | None = None, max_rows: int = DEFAULT_BLOCK_ROWS,
            batch_size: int = 8192, feature_names: Sequence[str] | None = None) -> PairwiseSGDRanker:
        """Learn from ``n_pairs`` pairs sampled within the groups of ``source`` (resets).

        ``source``: a GroupStore / BlockSource, or ``X`` with ``y`` and ``qid``.
        ``n_pairs=None``: as many pairs as the source has rows.  ``feature_names``:
        names of the columns, kept as ``feature_names_in_`` (default: the store's).
        Row weights: ``sample_weight`` (rows,) w_i >= 0, or a weighted source
        (:func:`streamrank.io.weighted.with_weights`; the same thing), e.g.
        ``fit(X, clicks, qid, sample_weight=ips_weights(clicks, position, p))``,
        weighs pair (i, j) by ``w_i w_j`` (module doc).  Pairs are still sampled
        uniformly and the weight scales the step, so a weight of 2 is the same
        objective as a repeated row, not the same random pairs.
        """
        from ..io.pairs import pairs_from_groups
        from ..io.weighted import with_weights

        self._params()
        # a BlockSource passes through (a dask array has .blocks too)
        src = with_weights(self._fit_source(source, y, qid, reset=True), sample_weight)
        if src.n_rows == 0:
            raise ValueError("empty input: X has 0 rows; at least two rows of one group are needed")
        self._v = None
        self._start(src.n_features)
        self.set_feature_names(src.n_features, feature_names, src)
        self._fit_normalizer(src, max_rows)
        n_pairs = src.n_rows if n_pairs is None else check_int(n_pairs, "n_pairs", 0)
        if n_pairs:
            self._step_pairs(pairs_from_groups(src, n_pairs, random_state=self._seed(), shuffle=True,
                                                    max_rows=max_rows, batch_size=batch_size))
        return self

    # ------------------------------------------------------------- results
    def _fitted(self):
        if getattr(self, "_v", None) is None:
            raise NotFittedError(
                f"This {type(self).__name__} is not fitted yet; call fit (or partial_fit) first")

    @property
    def coef_(self) -> np.ndarray:
        self._fitted()
        return self._fstate[0] * self._v

    @property
    def t_(self) -> int:
        self._fitted()
        return int(self._istate[0])

    def predict(self, X: MatrixLike) -> np.ndarray:
        """Scores ``X w`` (rank items of a query by decreasing score)."""
        from .._validation import check_X

        self._fitted()
        X = check_X(self._predict_input(X), "X", n_features=self.n_features_in_)
        norm = getattr(self, "normalizer_", None)
        if norm is not None:   # Σ w (x − o)/s = x·(w/s) − o·(w/s): sparse rows stay sparse
            w, c = norm.fold(self.coef_)
            return np.asarray(X @ w, dtype=np.float64).ravel() + c
        s = X @ self.coef_
        return np.asarray(s, dtype=np.float64).ravel()

    # --------------------------------------------------------- persistence
    def _get_state(self):
        self._fitted()
        attrs = {"n_features_in_": self.n_features_in_, "calls": int(self._calls)}
        arrays = {"v": self._v.copy(), "fstate": self._fstate.copy(), "istate": self._istate.copy(),
                  "q": self._q.copy()}
        return attrs, arrays

    def _set_state(self, attrs, arrays):
        n = state_int(attrs, "n_features_in_", lo=1)
        v = state_array(arrays, "v", (n,))
        fstate = state_array(arrays, "fstate", (None,))
        if not 1 <= len(fstate) <= 3:
            raise ValueError(f"array 'fstate' has {len(fstate)} entries, expected 1 to 3")
        istate = state_array(arrays, "istate", (1,), kind="i", lo=0)    # the step counter t
        q = state_array(arrays, "q", (n,)) if "q" in arrays else None
        calls = state_int(attrs, "calls", lo=0, hi=np.iinfo(np.int64).max)
        self._start(n)
        self._v = v.copy()
        self._fstate[:len(fstate)] = fstate
        self._istate = istate.copy()
        if q is not None:
            self._q = q.copy()
        else:  # saved before l1_rule existed: the model was trained with the window rule
            self.l1_rule = "window"
        self._calls = calls


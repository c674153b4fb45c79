"""Sparse SGD bilinear ranker ``f(q, d) = q^T W d`` (Chen et al. 2010, Algorithm 1).

Model and loss (paper eqs. 1-2): for a tuple (q, d+, d-) the margin rank loss
is ``max(0, 1 - q^T W (d+ - d-))``.  SGD with ``eta_t = eta0 / sqrt(t)``
(``learning_rate="invsqrt"``) or ``eta0`` (``"constant"``) from
``W_0 = I`` (``init="identity"``, square case) or ``0``; every
``shrink_every`` = T steps every entry is soft-thresholded by the cumulative
``l1 * sum(eta_k, k = t-T+1..t)`` (eq. 7 and Algorithm 1 step 4).  Then,
with ``auto_refit=True``, SGD without L1 restricted to the support Omega of W
(eq. 8) over the same tuples.

W is never dense: its rows live in one pool whose memory is proportional to
nnz(W) (see :mod:`streamrank.sgd._sparse_w_kernels`); an update touches
nnz(q) x nnz(d+ - d-) entries, reading each touched row in one sequential
pass, and the shrinkage is applied lazily, row by row -- exactly equivalent
to the sweep every T steps, because soft thresholds compose.
The step counter, the running threshold sums and the pending eta survive
``partial_fit`` calls and ``sr.save`` / ``sr.load``: training in chunks,
or resumed the next night, gives the same W as one long run.

Normalization (``normalize="standard"`` or ``"minmax"``): the model learns
``f(q, d) = Σ_jk W_jk (q_j / s_j)(d_k / t_k)`` with separate scales s for the
query and t for the item feature space (``query_normalizer_``,
``item_normalizer_``), applied by :meth:`predict`, saved by ``sr.save`` and
folded into W by the exporters.  The scales are SCALE ONLY, without an offset:

* training uses the difference Δd = d⁺ − d⁻, so an offset on the item side
  cancels exactly and would change nothing;
* an offset on the query side (centring) would make every query row dense,
  and with it every row of W that the update ``W += η q Δdᵀ`` touches — the
  outer product would fill W.

So ``"standard"`` divides by the standard deviation (ddof=0) without centring,
as scikit-learn's ``StandardScaler(with_mean=False)`` does for sparse input,
and ``"minmax"`` divides by (max − min) and drops the min offset for the
same reason; a constant feature keeps scale 1.  The scaled rows stay sparse
(CSR data scaled by column).  ``fit`` takes s from every stored query vector
and t from every stored item vector of the source (one bounded pass through
its row readers before the SGD), ``partial_fit`` from the first batch (its
Q rows; its D⁺ and D⁻ rows) and keeps them for later batches.

Example
-------
>>> import numpy as np, scipy.sparse as sp
>>> import streamrank as sr
>>> rng = np.random.default_rng(0)
>>> Q = sp.random(200, 20, density=0.2, random_state=1, format="csr")
>>> Dp, Dn = Q.copy(), sp.random(200, 20, density=0.2, random_state=2, format="csr")
>>> m = sr.SparseSGDRanker(eta0=1.0, l1=1e-3, shrink_every=10).partial_fit(Q, Dp, Dn)
>>> m.t_, m.W_.shape
(200, (20, 20))
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import os

import numpy as np
import scipy.sparse as sp

from ..base import BaseRanker, NotFittedError
from ..persistence import register_model
from . import _sparse_w_kernels as K_
from ._base import (
    _as_csr,
    check_choice,
    check_eta0,
    check_int,
    check_nonneg,
    check_tuples,
    iter_tuple_steps,
    kernel_csr,
)
from ..metrics import tuple_error
from ..normalize import FeatureMoments, Normalizer, check_normalize
from ._table import MemoryLimitError, SparseW  # noqa: F401 - MemoryLimitError: re-exported

if TYPE_CHECKING:
    from .._typing import ArrayLike, MatrixLike, Seed
    from ..io.tuples import TupleSource

__all__ = ["SparseSGDRanker"]

_LR = {"invsqrt": K_.LR_INVSQRT, "constant": K_.LR_CONSTANT}


def _half_physical_memory() -> int:
    """Default bound of W: half the physical memory (1 GiB where the OS does not tell)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES")) // 2
    except (AttributeError, ValueError, OSError):
        return 1 << 30


@register_model
class SparseSGDRanker(BaseRanker):
    """Bilinear ranker ``q^T W d`` learned by sparse SGD with cumulative L1 shrinkage.

    Parameters
    ----------
    eta0 : float > 0
        C in ``eta_t = C / sqrt(t)`` (the paper uses 200).
    l1 : float >= 0
        lambda of eq. (5); larger gives a sparser W.
    shrink_every : int >= 1
        T of Algorithm 1 (paper: 100).
    init : {"identity", "zeros"}
        W_0 = I (needs as many query as item features) or 0.
    learning_rate : {"invsqrt", "constant"}
        The step size: ``eta0 / sqrt(t)`` or ``eta0``.
    auto_refit : bool
        After ``fit``, refit on the support of W without L1 (eq. 8); the
        refit itself is the method :meth:`refit` (this flag used to be
        called ``refit``; a model saved under that name still loads).
    refit_steps : int or None
        Steps of the refit; None = as many as the L1 phase (the same tuples).
    random_state : int
        Seed of the tuple order (pass p of a source uses ``random_state + p``).
    max_memory_bytes : int or None
        Bound on the memory of W (its row pool, ``memory_bytes_``).  A weak
        ``l1`` lets W fill up without limit; when W would outgrow the bound,
        training stops with :class:`~streamrank.sgd.MemoryLimitError` (a
        ``MemoryError`` naming this parameter) — never an automatic stronger
        shrinkage, which would silently change the learned model.  The model
        keeps the steps taken before the one that did not fit (``t_``).  Below
        the bound the pool grows as usual (less than doubling near the bound),
        so W is the same as without one.  The bound covers the pool and the
        row records; the running threshold sums (8 bytes per ``shrink_every``
        steps, reset every 2**19 sweeps) come on top.  None (default): half
        the machine's physical memory.

    Input dtypes
    ------------
    Q, D_pos, D_neg (and predict's Q, D) may be CSR or dense, float32,
    float64 or integer, read-only or not.  The steps compute in float64 (every
    value is read as ``float64(x)``, exact for float32 and for integers up to
    2**53), so the kernels get float64 values and int64 indices, copied once
    per batch where needed (:func:`~streamrank.sgd._base.kernel_csr`): one
    compiled kernel serves every input, and the model is the same bit for bit
    whatever the input dtype.

    Attributes
    ----------
    W_ : scipy.sparse.csr_matrix (n_query_features, n_item_features)
        The bilinear weights.
    t_
        int, steps of Algorithm 1 taken so far (``refit_t_`` for the refit)
    nnz_, density_, memory_bytes_
        size of W (``memory_bytes_`` = the row pool holding W)
    history_
        list of dicts (step, phase, tuple_error, density, nnz, memory_bytes)
    query_normalizer_, item_normalizer_ : :class:`~streamrank.normalize.Normalizer` (offset 0) or None
        The scales s and t of ``normalize=``; W_ is W on the scaled features.
    """

    _lazy = True  # tests switch this to run the literal sweep of every entry
    _renamed_params = {"refit": "auto_refit"}   # old saved name -> parameter (streamrank.persistence)
    _undo_log_size = 4096  # entries of the undo log a partial_fit starts with (tests shrink it)

    def __init__(self, *, eta0: float = 200.0, l1: float = 1e-5, shrink_every: int = 100, init: str = "identity",
                 learning_rate: str = "invsqrt", auto_refit: bool = True, refit_steps: int | None = None,
                 random_state: Seed = 0, max_memory_bytes: int | None = None,
                 normalize: str | None = None) -> None:
        self.normalize = normalize
        self.eta0 = eta0
        self.l1 = l1
        self.shrink_every = shrink_every
        self.init = init
        self.learning_rate = learning_rate
        self.auto_refit = auto_refit
        self.refit_steps = refit_steps
        self.random_state = random_state
        self.max_memory_bytes = max_memory_bytes

    # ------------------------------------------------------------ checking
    def _params(self):
        check_normalize(self.normalize)
        return dict(
            eta0=check_eta0(self.eta0),
            l1=check_nonneg(self.l1, "l1"),
            T=check_int(self.shrink_every, "shrink_every", 1),
            init=check_choice(self.init, "init", {"identity", "zeros"}),
            lr=_LR[check_choice(self.learning_rate, "learning_rate", set(_LR))],
            refit_steps=check_int(self.refit_steps, "refit_steps", 0, allow_none=True),
            max_bytes=(_half_physical_memory() if self.max_memory_bytes is None
                       else check_int(self.max_memory_bytes, "max_memory_bytes", 1)),
        )

    # ------------------------------------------------------- SGD protocol
    def has_state(self) -> bool:
        """True when the model has a W that further rounds (``partial_fit``, distributed rounds) continue."""
        return getattr(self, "_W", None) is not None

    def init_state(self, n_query_features, n_item_features):
        """Check the parameters; start W₀ (identity or zeros) unless the model has one (rounds continue it)."""
        self._params()
        if not self.has_state():
            self._start(int(n_query_features), int(n_item_features))
        return self

    @classmethod
    def average(cls, models):
        """Sparse-aware average of bilinear models that started the round from the same state.

        ``W = (1/k) Σ_s W_s`` as a CSR sum (support = union of the shards'
        supports); the clocks ``t`` and ``t_refit`` are the shards' common ones
        (their maximum: a shard without tuples did not move).  In a refit round
        every shard updates only entries of the common support Ω, so the average
        keeps Ω (an entry can leave it only by averaging to exactly 0.0).
        """
        import copy

        base = models[0]
        k = len(models)
        W = models[0].W_.astype(np.float64)
        for m in models[1:]:
            W = W + m.W_
        W = (W / k).tocoo()
        out = copy.deepcopy(base)
        old = base._fitted()
        new = SparseW(old.n_rows, old.n_cols)
        new.istate[:] = old.istate
        new.istate[K_.I_T] = max(int(m._fitted().istate[K_.I_T]) for m in models)
        new.istate[K_.I_TREFIT] = max(int(m._fitted().istate[K_.I_TREFIT]) for m in models)
        new.istate[K_.I_UPDATES] = sum(int(m._fitted().istate[K_.I_UPDATES]) for m in models)
        new.istate[K_.I_K] = 0
        new.istate[K_.I_COUNT] = 0
        new.fstate[:] = old.fstate
        new.set_entries(W.row, W.col, W.data)
        out._W = new
        return out

    # -------------------------------------------------------- normalization
    def _set_scales(self, q_moments, d_moments) -> None:
        """Scale-only normalizers (offset 0) of ``normalize`` from query and item column moments."""
        def scale_only(m):
            s = m.normalizer(self.normalize).scale
            return Normalizer(self.normalize, np.zeros_like(s), s)

        self.query_normalizer_ = scale_only(q_moments)
        self.item_normalizer_ = scale_only(d_moments)

    def fit_scales(self, source, max_rows: int = 65_536) -> None:
        """normalize=: s over every stored query vector, t over every stored item vector of ``source``.

        One pass through the source's row readers (a store's byte-bounded row
        cache), ``max_rows`` rows at a time; dropped when normalize is None.
        Package-public: ``fit`` calls it, and so do the distributed rounds and
        the nightly pipeline (one pair of scales for every shard / night) before
        :meth:`init_state` of a model without a state.
        """
        self.query_normalizer_ = self.item_normalizer_ = None
        if self.normalize is None:
            return
        if not hasattr(source, "_row_readers"):
            raise TypeError(f"normalize={self.normalize!r} needs a TupleStore or an in-memory tuple source "
                            f"(its query and item vectors give the scales); got {type(source).__name__}")
        from ..io.tuples import _CACHE_BYTES

        Qr, Dr = source._row_readers(_CACHE_BYTES)
        moments = []
        for M, n_rows, n_cols in ((Qr, getattr(source, "n_queries", None), source.n_query_features),
                                  (Dr, getattr(source, "n_items", None), source.n_item_features)):
            n_rows = M.shape[0] if n_rows is None else int(n_rows)
            m = FeatureMoments(int(n_cols))
            for r0 in range(0, n_rows, max_rows):
                m.update(M[np.arange(r0, min(r0 + max_rows, n_rows))])
            moments.append(m)
        self._set_scales(*moments)

    def _scaled(self, Q, *Ds):
        """``(Q / s, D / t, ...)`` by column, CSR kept sparse (unchanged without normalize=)."""
        qn = getattr(self, "query_normalizer_", None)
        if qn is None:
            return (Q, *Ds)
        dn = self.item_normalizer_
        return (_scale_columns(Q, qn.scale), *(_scale_columns(D, dn.scale) for D in Ds))

    def _start(self, n_q: int, n_d: int) -> None:
        p = self._params()
        if p["init"] == "identity" and n_q != n_d:
            raise ValueError(
                f"init='identity' needs as many query as item features; got {n_q} query and "
                f"{n_d} item features (use init='zeros')")
        self._W = SparseW(n_q, n_d)
        if p["init"] == "identity":
            idx = np.arange(n_q)
            self._W.set_entries(idx, idx, np.ones(n_q))
        self.n_query_features_ = int(n_q)
        self.n_item_features_ = int(n_d)
        self.history_ = []
        self._fit_steps = 0

    def _fitted(self) -> SparseW:
        W = getattr(self, "_W", None)
        if W is None:
            raise NotFittedError(
                f"This {type(self).__name__} is not fitted yet; call fit (or partial_fit) first")
        return W

    # ------------------------------------------------------------- stepping
    def _steps(self, Q, Dp, Dn, refit: bool) -> None:
        p = self._params()
        W = self._W
        W.max_bytes = p["max_bytes"]
        n = Q.shape[0]
        nd = np.diff(Dp.indptr) + np.diff(Dn.indptr)  # >= nnz(d+ - d-)
        width = max(1, int(nd.max()))
        dj = np.empty(width, dtype=np.int64)
        dx = np.empty(width, dtype=np.float64)
        hit = np.zeros(width + 1, dtype=np.int64)
        kept = np.empty(max(1, int(np.diff(Q.indptr).max(initial=0))), dtype=np.int64)
        # undo log of the optimistic update (grown when the kernel asks)
        lpos = np.empty(self._undo_log_size, dtype=np.int64)
        lval = np.empty(self._undo_log_size, dtype=np.float64)
        dense, slot, mask = W.workspace()
        q, dp, dn = kernel_csr(Q), kernel_csr(Dp), kernel_csr(Dn)   # one compiled variant (see kernel_csr)
        lazy = bool(self._lazy) and not refit
        r = 0
        stalls = 0
        while r < n:
            W.reserve_sweeps(n - r, p["T"])
            r_next = K_.sgd_steps(
                W.meta, W.pc, W.pv, W.S, W.istate, W.fstate, *q, *dp, *dn,
                r, n, p["eta0"], p["lr"], 0.0 if refit else p["l1"], p["T"],
                lazy, refit, dj, dx, dense, slot, mask, hit, W.free, lpos, lval, kept)
            if r_next < n:  # the pool (or the undo log) is full: repack and grow it
                # a repack changes the segments, so the kernel may ask twice; never three times
                stalls = stalls + 1 if r_next == r else 0
                if stalls > 2:
                    raise RuntimeError(f"internal error: no room made in the pool of W for tuple {r_next}")
                need_log = int(W.istate[K_.I_NEED_LOG])
                if need_log > lpos.shape[0]:
                    lpos = np.empty(2 * need_log, dtype=np.int64)
                    lval = np.empty(2 * need_log, dtype=np.float64)
                W.make_room()
            r = r_next
        if not refit:
            W.maybe_rebase()
            W.fit_capacity()

    def partial_fit(self, Q: MatrixLike, D_pos: MatrixLike, D_neg: MatrixLike, *,
                    sample_weight: ArrayLike | None = None) -> SparseSGDRanker:
        """One SGD step of Algorithm 1 per tuple row; continues t and the shrinkage state.

        ``sample_weight`` is refused (:func:`_refuse_sample_weight`).
        """
        _refuse_sample_weight(sample_weight)
        W = getattr(self, "_W", None)
        if W is None:
            self._params()
            Q, D_pos, D_neg = check_tuples(Q, D_pos, D_neg)
            self._start(Q.shape[1], D_pos.shape[1])
            self.query_normalizer_ = self.item_normalizer_ = None
            if self.normalize is not None and Q.shape[0]:   # the first batch fixes the scales
                self._set_scales(FeatureMoments(Q.shape[1]).update(Q),
                                 FeatureMoments(D_pos.shape[1]).update(D_pos).update(D_neg))
        else:
            Q, D_pos, D_neg = check_tuples(Q, D_pos, D_neg, self.n_query_features_,
                                           self.n_item_features_)
        self._steps(*self._scaled(Q, D_pos, D_neg), refit=False)
        return self

    def fit(self, tuple_source: TupleSource, n_steps: int = 100_000, *, validation: TupleSource | None = None,
            checkpoint_every: int | None = None, batch_size: int = 1024,
            shuffle_buffer: int = 100_000, sample_weight: ArrayLike | None = None) -> SparseSGDRanker:
        """Algorithm 1 for ``n_steps`` tuples from ``tuple_source`` (then :meth:`refit` if ``auto_refit``).

        ``tuple_source``: anything with ``.batches(batch_size=, shuffle_buffer=,
        random_state=)`` yielding objects with row-aligned CSR ``.Q``,
        ``.D_pos``, ``.D_neg`` (a :class:`~streamrank.TupleStore`); more steps
        than tuples make further passes.  ``validation=(Q, D_pos, D_neg)`` and
        ``checkpoint_every=N`` (default with a validation set: ``n_steps // 20``)
        record the tuple error, density and nnz of W every N steps in
        ``history_`` (also through the refit phase).  ``sample_weight`` is
        refused (:func:`_refuse_sample_weight`: tuples, not rows).
        """
        _refuse_sample_weight(sample_weight)
        self._params()
        n_steps = check_int(n_steps, "n_steps", 1)
        checkpoint_every = check_int(checkpoint_every, "checkpoint_every", 1, allow_none=True)
        val = self._check_validation(validation)
        self.fit_scales(tuple_source)
        if val is not None and checkpoint_every is None:
            checkpoint_every = max(1, n_steps // 20)
        self._W = None
        for Q, Dp, Dn in self._stream(tuple_source, n_steps, batch_size, shuffle_buffer,
                                      checkpoint_every):
            if self._W is None:
                Q, Dp, Dn = check_tuples(Q, Dp, Dn)
                n_q = getattr(tuple_source, "n_query_features", Q.shape[1])
                n_d = getattr(tuple_source, "n_item_features", Dp.shape[1])
                self._start(int(n_q), int(n_d))
            Q, Dp, Dn = check_tuples(Q, Dp, Dn, self.n_query_features_, self.n_item_features_)
            self._steps(*self._scaled(Q, Dp, Dn), refit=False)
            self._checkpoint(val, checkpoint_every, "sparse", self.t_)
        self._fit_steps = n_steps
        self._W.flush()  # drop the entries shrunk to zero (exact), then a tight table
        self._W.fit_capacity(tight=True)
        if self.auto_refit:
            self._do_refit(tuple_source, None, val, checkpoint_every, batch_size, shuffle_buffer)
        return self

    def refit(self, tuple_source: TupleSource, n_steps: int | None = None, *, validation: TupleSource | None = None,
              checkpoint_every: int | None = None, batch_size: int = 1024,
              shuffle_buffer: int = 100_000) -> SparseSGDRanker:
        """Refit (eq. 8): SGD without L1 on the support of W, ``n_steps`` tuples.

        ``n_steps=None``: ``refit_steps``, else as many steps as the last ``fit``
        (the same tuples, replayed with the same seeds), else ``t_``.  The step
        size continues the schedule: ``eta = eta0 / sqrt(t_ + k)`` at refit step k.
        ``fit`` calls it by itself when ``auto_refit`` is true.
        """
        self._fitted()
        val = self._check_validation(validation)
        checkpoint_every = check_int(checkpoint_every, "checkpoint_every", 1, allow_none=True)
        return self._do_refit(tuple_source, n_steps, val, checkpoint_every, batch_size,
                              shuffle_buffer)

    def _do_refit(self, tuple_source, n_steps, val, checkpoint_every, batch_size, shuffle_buffer):
        W = self._fitted()
        p = self._params()
        if n_steps is None:
            n_steps = p["refit_steps"] if p["refit_steps"] is not None else (self._fit_steps or self.t_)
        n_steps = check_int(n_steps, "n_steps", 0)
        W.flush()  # Omega = support of W after all pending shrinkage (exact)
        W.fit_capacity(tight=True)
        if n_steps == 0:
            return self
        for Q, Dp, Dn in self._stream(tuple_source, n_steps, batch_size, shuffle_buffer,
                                      checkpoint_every, offset=int(W.istate[K_.I_TREFIT])):
            Q, Dp, Dn = check_tuples(Q, Dp, Dn, self.n_query_features_, self.n_item_features_)
            self._steps(*self._scaled(Q, Dp, Dn), refit=True)
            self._checkpoint(val, checkpoint_every, "refit", self.refit_t_)
        return self

    def _stream(self, source, n_steps, batch_size, shuffle_buffer, checkpoint_every, offset=None):
        """Batches cut so that every checkpoint falls on a batch boundary."""
        count = 0
        base = 0 if offset is None else offset
        for Q, Dp, Dn in iter_tuple_steps(source, n_steps, batch_size=batch_size,
                                          shuffle_buffer=shuffle_buffer,
                                          random_state=self.random_state):
            n = Q.shape[0]
            r = 0
            while r < n:
                take = n - r
                if checkpoint_every:
                    done = base + count
                    take = min(take, checkpoint_every - done % checkpoint_every)
                yield Q[r:r + take], Dp[r:r + take], Dn[r:r + take]
                r += take
                count += take

    def _check_validation(self, validation):
        if validation is None:
            return None
        if not isinstance(validation, (tuple, list)) or len(validation) != 3:
            raise TypeError("validation must be a tuple (Q, D_pos, D_neg) of row-aligned tuples")
        Q, Dp, Dn = check_tuples(*validation)
        return Q, Dp, Dn

    def _checkpoint(self, val, every, phase, step):
        if not every or step % every != 0:
            return
        W = self._W
        rec = {"step": int(self.t_ + (self.refit_t_ if phase == "refit" else 0)),
               "phase": phase, "nnz": self.nnz_, "density": self.density_,
               "memory_bytes": self.memory_bytes_}
        if val is not None:
            Q, Dp, Dn = val
            if Q.shape[1] != W.n_rows or Dp.shape[1] != W.n_cols:
                raise ValueError(
                    f"validation tuples have {Q.shape[1]} query / {Dp.shape[1]} item features; "
                    f"the model has {W.n_rows} / {W.n_cols}")
            Q, Dp, Dn = self._scaled(Q, Dp, Dn)
            rec["tuple_error"] = tuple_error(W.score(Q, Dp), W.score(Q, Dn))
        self.history_.append(rec)

    # ------------------------------------------------------------- results
    @property
    def W_(self) -> sp.csr_matrix:
        return self._fitted().to_csr()

    @property
    def t_(self) -> int:
        return int(self._fitted().istate[K_.I_T])

    @property
    def refit_t_(self) -> int:
        return int(self._fitted().istate[K_.I_TREFIT])

    @property
    def nnz_(self) -> int:
        return self._fitted().nnz()

    @property
    def density_(self) -> float:
        W = self._fitted()
        return self.nnz_ / float(W.n_rows * W.n_cols)

    @property
    def memory_bytes_(self) -> int:
        return self._fitted().nbytes

    @property
    def n_updates_(self) -> int:
        """Entries of W updated so far, one per q x (d+ - d-) product of an active step (throughput figures)."""
        return int(self._fitted().istate[K_.I_UPDATES])

    def predict(self, Q: MatrixLike, D: MatrixLike) -> np.ndarray:
        """Scores ``q_r^T W d_r`` (float64, one per row) of row-aligned query rows Q and item rows D.

        With ``normalize=`` the rows are scaled first: ``(q / s)ᵀ W (d / t)``.
        """
        W = self._fitted()
        Q = _as_csr(Q, "Q", self.n_query_features_)
        D = _as_csr(D, "D", self.n_item_features_)
        if D.shape[0] != Q.shape[0]:
            raise ValueError(f"D has {D.shape[0]} rows but Q has {Q.shape[0]}; score pairs row r of Q "
                             "with row r of D")
        if Q.shape[0] == 0:
            raise ValueError("empty batch: Q and D have 0 rows; at least one (q, d) row is needed")
        return W.score(*self._scaled(Q, D))

    def score(self, Q: MatrixLike, D: MatrixLike) -> np.ndarray:
        """Deprecated alias of :meth:`predict` (same per-row scores); removed in the next release.

        In scikit-learn ``score`` returns one number (a quality metric), so the
        per-row scores moved to ``predict``; for a tuple metric use
        ``streamrank.metrics.tuple_error(model.predict(Q, D_pos), model.predict(Q, D_neg))``.
        """
        import warnings

        warnings.warn("SparseSGDRanker.score(Q, D) is deprecated and will be removed in the next release; "
                      "use predict(Q, D) (same per-row scores)", FutureWarning, stacklevel=2)
        return self.predict(Q, D)

    # --------------------------------------------------------- persistence
    def _get_state(self):
        W = self._fitted()
        attrs, arrays = W.state("W_")
        attrs.update(n_query_features_=self.n_query_features_,
                     n_item_features_=self.n_item_features_,
                     fit_steps=int(self._fit_steps), history_=list(self.history_))
        qn = getattr(self, "query_normalizer_", None)
        if qn is not None:
            attrs["scales_kind"] = qn.kind
            arrays.update(query_scale=qn.scale.copy(), item_scale=self.item_normalizer_.scale.copy())
        return attrs, arrays

    def _set_state(self, attrs, arrays):
        self._W = SparseW.from_state(attrs, arrays, "W_")
        self.n_query_features_ = int(attrs["n_query_features_"])
        self.n_item_features_ = int(attrs["n_item_features_"])
        if (self.n_query_features_, self.n_item_features_) != (self._W.n_rows, self._W.n_cols):
            raise ValueError(f"W has shape ({self._W.n_rows}, {self._W.n_cols}) but the model has "
                             f"{self.n_query_features_} query and {self.n_item_features_} item features")
        self._fit_steps = int(attrs.get("fit_steps", 0))
        self.history_ = list(attrs.get("history_", []))
        self.query_normalizer_ = self.item_normalizer_ = None
        kind = attrs.get("scales_kind")
        if kind is not None:
            from .._state_checks import state_array

            if kind not in ("standard", "minmax"):
                raise ValueError(f"scales_kind must be 'standard' or 'minmax', got {kind!r}")
            s = state_array(arrays, "query_scale", (self.n_query_features_,))
            t = state_array(arrays, "item_scale", (self.n_item_features_,))
            for name, a in (("query_scale", s), ("item_scale", t)):
                if (a <= 0).any():
                    raise ValueError(f"array {name!r} holds a scale <= 0; scales are > 0")
            self.query_normalizer_ = Normalizer(kind, np.zeros_like(s), s)
            self.item_normalizer_ = Normalizer(kind, np.zeros_like(t), t)


def _refuse_sample_weight(sample_weight) -> None:
    """SparseSGDRanker cannot honour ``sample_weight``: a clear error instead of a silently unweighted fit.

    It learns from (query, item+, item−) tuples, one step each; there are no
    rows of a query group whose weights w_i w_j would weigh a pair.  To weigh
    preferences, write a tuple as often as its weight says into the
    :class:`~streamrank.TupleStore` (or keep it with probability ∝ weight);
    for row-weighted (e.g. IPS click) data use :class:`PairwiseSGDRanker` or
    RankRLS, which take ``sample_weight``.
    """
    if sample_weight is not None:
        raise NotImplementedError(
            "SparseSGDRanker does not take sample_weight: it steps on (query, item+, item-) tuples, not on rows "
            "of a query group; weigh a preference by how often its tuple is stored, or use PairwiseSGDRanker / "
            "RankRLS, which take sample_weight=")


def _scale_columns(X: sp.csr_matrix, scale: np.ndarray) -> sp.csr_matrix:
    """``X / scale`` by column, as CSR with X's structure (the data scaled in place of a copy)."""
    X = X.tocsr()
    return sp.csr_matrix((X.data / scale[X.indices], X.indices, X.indptr), shape=X.shape)


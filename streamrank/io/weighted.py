"""Row weights (``sample_weight``) attached to any block source: :func:`with_weights`.

A :class:`WeightedSource` yields the blocks of its inner source with
``Block.weight`` set to the slice of an in-memory (rows,) float64 array of
weights (validated once: finite, >= 0, one per row).  Statistics learners
pass ``block.weight`` into :meth:`RankStatistics.add_block`, where row i
and row j of a group form a pair of weight w_i w_j (see
:mod:`streamrank.laplacian`).  Planning, order and prefetch are the inner
source's; in a cluster the wrapper travels as one object (weights included).

From a store's row columns (:mod:`streamrank.io.row_columns`), weights are
read with each block instead of held in memory: ``with_weights(store,
"weight")`` (the ``weight`` column, :class:`ColumnWeightedSource`) and
``ips_weighted(store, propensity)`` (:class:`IPSWeightedSource`: targets = the
``click`` column, weights 1 / p(position) on clicked rows and 1 elsewhere —
:func:`streamrank.clicks.ips_weights` block by block).  Weights are opt-in,
as ``sample_weight`` is in scikit-learn: a store with a ``weight`` column
trains unweighted unless asked.  Weights are read with the rows that use
them, so memory stays O(block) whatever the row count: PairwiseSGDRanker's
pairs carry ``PairBatch.pair_weight`` from the block they were drawn from,
and cg's groups cut across blocks get their whole-group weight W_g from one
streamed pass (:mod:`streamrank.rankrls._group_weights`).  Only the exact
dual KernelRankRLS reads the whole column (``.weight``, 8 bytes a row): it
holds every row and the m × m kernel anyway (32·m² bytes), so the weights
add nothing to its order of memory.
"""
from __future__ import annotations

import dataclasses

import numpy as np


from ..clicks import propensity_at
from ..laplacian import check_weight
from .blocks import BlockSource, WrappedSource

__all__ = ["WeightedSource", "ColumnWeightedSource", "IPSWeightedSource", "with_weights", "ips_weighted",
           "propensity_from_spec"]


class WeightedSource(WrappedSource):
    """The blocks of ``source`` with per-row weights ``weight`` (rows,) attached as ``Block.weight``."""

    #: a source whose ``_read_weight`` gives its rows' weights in its own group numbering (what cg's
    #: split-group totals look for under views and proxies: :mod:`streamrank.rankrls._group_weights`)
    row_weighted = True

    def __init__(self, source: BlockSource, weight, name: str = "sample_weight"):
        super().__init__(source)
        self.weight = check_weight(weight, source.n_rows, name)
        if source.n_rows and not np.any(self.weight > 0):
            raise ValueError(f"{name} is zero on every row: no pair carries any weight")
        self.weight.setflags(write=False)

    def _read_weight(self, r0, r1):
        return self.weight[r0:r1]

    def _map_block(self, b):
        return dataclasses.replace(b, weight=self.weight[b.start:b.stop])

    def __repr__(self):
        return f"WeightedSource({self.inner!r})"


def _needs_columns(source, names, what):
    have = getattr(source, "row_columns", None)
    if have is None or not hasattr(source, "read_column"):
        raise TypeError(f"{what} reads the row columns {list(names)} of a GroupStore; got {type(source).__name__} "
                        "(for in-memory arrays pass the weights themselves)")
    missing = [n for n in names if n not in have]
    if missing:
        raise ValueError(f"{what}: the store at {source.path} keeps no {missing[0]!r} column (it keeps "
                         f"{list(have) or 'none'}; create it with row_columns=... / ingest with --{missing[0]}-column)")


class _LazyWeight:
    """``.weight``: every row's weight, read on first use (the exact kernel dual, which holds every row)."""

    _all = None

    def __getstate__(self):      # shipped (to dask workers) without the rows' weights: a worker reads its blocks'
        return {k: v for k, v in self.__dict__.items() if k != "_all"}

    @property
    def weight(self):
        if self._all is None:
            w = self._read_weight(0, self.n_rows)
            w.setflags(write=False)
            self._all = w
        return self._all


class ColumnWeightedSource(_LazyWeight, WeightedSource):
    """A store's blocks with ``Block.weight`` read from its row column ``column`` (``"weight"``) block by block.

    Checked as read (finite, >= 0: :func:`streamrank.io.row_columns.column_check`).
    ``.weight``: the whole column, read on first use.  Pickles as the store
    (its path and commit) plus the column name.
    """

    def __init__(self, store, column: str = "weight"):
        _needs_columns(store, (column,), f"with_weights(store, {column!r})")
        WrappedSource.__init__(self, store)
        self.column = column

    def _read_weight(self, r0, r1):
        return np.asarray(self.inner.read_column(self.column, r0, r1), dtype=np.float64)

    def _map_block(self, b):
        return dataclasses.replace(b, weight=self._read_weight(b.start, b.stop))

    def __repr__(self):
        return f"ColumnWeightedSource({self.inner!r}, {self.column!r})"


class IPSWeightedSource(_LazyWeight, WeightedSource):
    """Inverse propensity scoring from a store's ``click`` and ``position`` columns, block by block.

    Targets y_i = click_i (0/1; the store's ``y`` is not read), row weights
    w_i = 1 / p(pos_i) on clicked rows and 1 elsewhere (:func:`streamrank.clicks.ips_weights`),
    so with ``ties="exclude"`` the pair (clicked i, not clicked j) weighs
    1 / p(pos_i): the IPS objective of Joachims et al. (2017).
    ``propensity``: ``p[k - 1]`` of rank k (an array) or a callable of the positions;
    ``clip``: p := max(p, clip).
    """

    def __init__(self, store, propensity, *, clip=None):
        _needs_columns(store, ("click", "position"), "ips_weighted(store, ...)")
        if clip is not None and not 0 < float(clip) <= 1:
            raise ValueError(f"clip must be in (0, 1], got {clip}")
        if not callable(propensity):
            table = np.asarray(propensity, dtype=np.float64).reshape(-1)
            if table.size == 0:
                raise ValueError("propensity is empty: p[k - 1] is the propensity of rank k")
            propensity_at(np.arange(1, table.size + 1), table, clip=clip)      # every entry in (0, 1] (clipped)
            propensity = table
        WrappedSource.__init__(self, store)
        self.n_outputs, self.y_ndim = 1, 1
        self.propensity, self.clip = propensity, clip

    def _clicks(self, r0, r1):
        return self.inner.read_column("click", r0, r1).astype(np.float64)

    def _read_weight(self, r0, r1):
        c = self._clicks(r0, r1)
        pos = self.inner.read_column("position", r0, r1)
        if not callable(self.propensity) and pos.size and int(pos.max()) > self.propensity.size:
            i = int(np.flatnonzero(pos > self.propensity.size)[0])
            raise ValueError(f"{self.inner.path}: row {r0 + i} was shown at position {int(pos[i])}, but the "
                             f"propensity has {self.propensity.size} entries (p[k - 1] is the propensity of rank k)")
        p = propensity_at(pos, self.propensity, clip=self.clip)
        return np.where(c == 1, 1.0 / p, 1.0)

    def _read_y(self, r0, r1):
        return self._clicks(r0, r1)

    def _read_rows(self, r0, r1):
        return self.inner._read_rows(r0, r1)[0], self._clicks(r0, r1)

    def _map_block(self, b):
        return dataclasses.replace(b, y=self._clicks(b.start, b.stop), weight=self._read_weight(b.start, b.stop))

    def __repr__(self):
        return f"IPSWeightedSource({self.inner!r}, clip={self.clip})"


def with_weights(source: BlockSource, weight, name: str = "sample_weight") -> BlockSource:
    """``source`` itself when ``weight`` is None, else a :class:`WeightedSource`.

    ``weight`` is a (rows,) array, or the name of a store's row column
    (``with_weights(store, "weight")``: a :class:`ColumnWeightedSource`).
    """
    if weight is None:
        return source
    if isinstance(source, WeightedSource):
        raise ValueError(f"{name}: the source already carries row weights")
    if isinstance(weight, str):
        return ColumnWeightedSource(source, weight)
    return WeightedSource(source, weight, name)


def ips_weighted(store, propensity, *, clip=None) -> IPSWeightedSource:
    """The IPS view of a store with ``click`` and ``position`` columns (:class:`IPSWeightedSource`).

    Fit it with ``RankRLS(ties="exclude")`` (tied pairs — both clicked, both
    not — must drop out) or ``PairwiseSGDRanker``.
    """
    if isinstance(store, WeightedSource):
        raise ValueError("ips_weighted: the source already carries row weights")
    return IPSWeightedSource(store, propensity, clip=clip)


def propensity_from_spec(spec: str, *, storage_options=None):
    """The examination propensity named by a short spec (the CLI's and the nightly's ``--propensity``).

    ``eta=E``
        the position-based model p(k) = (1 / k)^E (:func:`streamrank.clicks.position_based_propensity`),
        as a callable of the positions (any rank).
    ``estimate:STORE``
        p̂(k) = CTR(k) / CTR(1) from the ``click`` and ``position`` columns of a
        store of *result-randomization* traffic (:func:`streamrank.clicks.estimate_propensity`):
        estimated on the training logs themselves it would be the logging ranker's bias, not p.
    ``estimate:em``, ``estimate:harvest``
        estimated from the training store itself (:func:`streamrank.position_bias.store_propensity`,
        which the CLI and the nightly call; here a ValueError says so).
    ``FILE``
        a text file (one p(k) a line, k = 1, 2, …) or an ``.npy`` array.

    Returns an array ``p[k - 1]`` or a callable, for :func:`ips_weighted` (values checked there).
    """
    import os

    from ..clicks import estimate_propensity

    spec = str(spec).strip()
    if spec.startswith("eta="):
        try:
            eta = float(spec[4:])
        except ValueError:
            raise ValueError(f"propensity {spec!r}: eta=E needs a number, e.g. eta=1") from None
        if not np.isfinite(eta) or eta < 0:
            raise ValueError(f"propensity {spec!r}: eta must be finite and >= 0")
        return _PowerLaw(eta)
    if spec in ("estimate:em", "estimate:harvest"):
        raise ValueError(f"propensity {spec!r} is estimated from the training store itself: "
                         "streamrank.position_bias.store_propensity(store, spec) (fit --ips does it); a store of "
                         f"randomized traffic at ./{spec[9:]} is estimate:./{spec[9:]}")
    if spec.startswith("estimate:"):
        from .group_store import GroupStore

        store = GroupStore.open(spec[len("estimate:"):], storage_options=storage_options)
        _needs_columns(store, ("click", "position"), f"propensity {spec!r}")
        return estimate_propensity(store.read_column("click"), store.read_column("position"))
    if not os.path.exists(spec):
        raise ValueError(f"propensity {spec!r}: expected eta=E, estimate:STORE (randomized traffic) or a file of "
                         "p(1), p(2), ... (text, one a line, or .npy)")
    p = np.load(spec, allow_pickle=False) if spec.endswith(".npy") else np.loadtxt(spec, ndmin=1)
    return np.asarray(p, dtype=np.float64).reshape(-1)


class _PowerLaw:
    """p(k) = (1 / k)^eta as a picklable callable of the positions."""

    def __init__(self, eta: float):
        self.eta = float(eta)

    def __call__(self, pos):
        return (1.0 / np.asarray(pos, dtype=np.float64)) ** self.eta

    def __repr__(self):
        return f"eta={self.eta:g}"

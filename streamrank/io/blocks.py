"""Group-aligned blocks and the contract every block source keeps.

A *block* is a run of whole query groups (rows + targets + group offsets).
Learners never open files: they iterate ``source.blocks(...)``.  Every source
(zarr :class:`~streamrank.GroupStore`, numpy, scipy.sparse, dask) derives from
:class:`BlockSource`, which owns the parts that must behave the same
everywhere:

* **planning** (:meth:`BlockSource.plan`): greedy packing of whole groups
  under a row budget (and optionally a nonzero budget for CSR); a group larger
  than the budget becomes a block of its own, with a warning — or, only when
  the consumer asks with ``split_groups=True``, is cut into pieces whose
  :attr:`Block.group_size` / :attr:`Block.group_offset` tell the consumer how
  to stitch it back (statistics learners use this for one global group, i.e.
  object ranking over millions of rows);
* **order**: in file order, or shuffled block order with a seed;
* **prefetch**: the next block is read in a background thread while the
  current one is processed, so I/O overlaps compute;
* **coverage**: every row appears exactly once per pass.

Subclasses implement only :meth:`BlockSource._group_ptr` (the global
group offsets) and :meth:`BlockSource._read_rows`.
"""
from __future__ import annotations

import queue
import threading
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

import numpy as np
import scipy.sparse as sp

from .._defaults import DEFAULT_BLOCK_ROWS

if TYPE_CHECKING:
    from .._typing import Seed


__all__ = ["Block", "BlockSource", "GroupRange", "OversizedGroupWarning", "WrappedSource"]


class OversizedGroupWarning(UserWarning):
    """A query group holds more rows than the block budget."""


@dataclass(frozen=True, eq=False)
class Block:
    """Whole query groups read as one unit.

    Attributes
    ----------
    X : ndarray (rows, n_features) or scipy.sparse.csr_matrix
        The features.
    y : ndarray (rows,) or (rows, n_outputs), float64
        The targets.
    group_ptr : int64 ndarray (groups + 1,)
        Local offsets: rows of group ``g`` are ``group_ptr[g]:group_ptr[g+1]``.
    qid : int64 ndarray (groups,)
        Original query id of each group.
    start : int
        Global index of the block's first row.
    group_start : int
        Global index of the block's first group.
    group_size : int64 ndarray (groups,)
        Full number of rows of each group.  Equal to ``diff(group_ptr)`` except
        for a group cut across blocks (only with ``split_groups=True``).
    group_offset : int64 ndarray (groups,)
        Row offset of this piece inside its group (0 unless continued).
    weight : float64 ndarray (rows,) or None
        Row weights (``sample_weight``; pair weight w_i w_j), None when the
        source has none (every row weighs 1).
    """

    X: object
    y: np.ndarray
    group_ptr: np.ndarray
    qid: np.ndarray
    start: int = 0
    group_start: int = 0
    group_size: np.ndarray | None = field(default=None)
    group_offset: np.ndarray | None = field(default=None)
    weight: np.ndarray | None = field(default=None)

    def __post_init__(self):
        if self.group_size is None:
            object.__setattr__(self, "group_size", np.diff(self.group_ptr).astype(np.int64))
        if self.group_offset is None:
            object.__setattr__(self, "group_offset", np.zeros(len(self.qid), dtype=np.int64))

    @property
    def n_rows(self) -> int:
        return int(self.group_ptr[-1])

    @property
    def n_groups(self) -> int:
        return len(self.group_ptr) - 1

    @property
    def stop(self) -> int:
        """Global index one past the block's last row."""
        return self.start + self.n_rows

    @property
    def is_split(self) -> bool:
        """True when some group of this block is only a piece of its group."""
        return bool(np.any(self.group_size != np.diff(self.group_ptr)))

    def row_qid(self) -> np.ndarray:
        """The query id of every row (rows,)."""
        return np.repeat(self.qid, np.diff(self.group_ptr))


def _greedy_cuts(ptr: np.ndarray, max_rows: int, nnz_ptr: np.ndarray | None, max_nnz: int | None):
    """Indices g (into ``ptr``) where blocks start, packing whole groups.

    ``ptr`` are group offsets (global rows); ``nnz_ptr`` the nonzero offsets
    at the same boundaries (CSR) or None.  Returns (cuts, oversized) where
    ``cuts`` includes 0 and len(ptr) - 1, ``oversized`` lists groups larger
    than the budget.  Linear in the number of groups, vectorised in chunks.
    """
    n_groups = len(ptr) - 1
    cuts = [0]
    oversized = []
    g = 0
    while g < n_groups:
        row0 = ptr[g]
        # last boundary h with ptr[h] - row0 <= max_rows
        h = int(np.searchsorted(ptr, row0 + max_rows, side="right")) - 1
        if nnz_ptr is not None and max_nnz is not None:
            h2 = int(np.searchsorted(nnz_ptr, nnz_ptr[g] + max_nnz, side="right")) - 1
            h = min(h, h2)
        if h <= g:
            oversized.append(g)
            h = g + 1
        h = min(h, n_groups)
        cuts.append(h)
        g = h
    return np.asarray(cuts, dtype=np.int64), oversized


class BlockSource:
    """Base class of everything that yields group-aligned :class:`Block` objects.

    Subclasses set ``n_rows``, ``n_groups``, ``n_features``, ``n_outputs``,
    ``sparse`` and implement :meth:`_group_ptr` and :meth:`_read_rows`.
    """

    n_rows: int
    n_groups: int
    n_features: int
    n_outputs: int
    sparse: bool

    # ------------------------------------------------------------------ hooks
    def _group_ptr(self) -> np.ndarray:
        """Global group offsets (n_groups + 1,) int64."""
        raise NotImplementedError

    def _group_qid(self, g0: int, g1: int) -> np.ndarray:
        """Query ids of groups g0:g1."""
        raise NotImplementedError

    def _read_rows(self, r0: int, r1: int):
        """Return ``(X, y)`` for global rows r0:r1 (X dense or CSR)."""
        raise NotImplementedError

    def _read_weight(self, r0: int, r1: int) -> np.ndarray | None:
        """Row weights of global rows r0:r1, or None (unweighted source)."""
        return None

    def _nnz_at(self, rows: np.ndarray) -> np.ndarray | None:
        """Nonzero offsets at the given global row offsets (CSR sources), else None."""
        return None

    def _read_y(self, r0: int, r1: int) -> np.ndarray:
        """Targets of global rows r0:r1; override when ``y`` can be read without ``X``."""
        return self._read_rows(r0, r1)[1]

    def read_y(self, r0: int, r1: int) -> np.ndarray:
        """Targets (float64) of global rows r0:r1 — a cheap pass over scores only."""
        return np.asarray(self._read_y(r0, r1), dtype=np.float64)

    # ---------------------------------------------------------------- public
    @property
    def group_ptr(self) -> np.ndarray:
        """Global group offsets (n_groups + 1,), int64."""
        gp = getattr(self, "_group_ptr_cache", None)
        if gp is None:
            gp = np.asarray(self._group_ptr(), dtype=np.int64)
            self._group_ptr_cache = gp
        return gp

    def plan(self, max_rows: int = DEFAULT_BLOCK_ROWS, *, max_nnz: int | None = None,
             split_groups: bool = False) -> list[tuple[int, int, int, int]]:
        """Cut the source into blocks: a list of ``(row0, row1, g0, g1)`` tuples.

        Whole groups are packed greedily up to ``max_rows`` rows (and
        ``max_nnz`` nonzeros for CSR sources).  A group larger than the budget
        becomes its own block with an :class:`OversizedGroupWarning`; with
        ``split_groups=True`` it is cut into pieces of at most ``max_rows``
        rows instead (see :attr:`Block.group_size`).  ``g1`` is exclusive; for
        a piece of a split group ``g0 == the group`` and ``g1 == g0 + 1``.
        """
        max_rows = int(max_rows)
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        if max_nnz is not None and int(max_nnz) < 1:
            raise ValueError(f"max_nnz must be >= 1, got {max_nnz}")
        ptr = self.group_ptr
        nnz_ptr = self._nnz_at(ptr) if (max_nnz is not None and self.sparse) else None
        cuts, oversized = _greedy_cuts(ptr, max_rows, nnz_ptr, max_nnz)
        over = set(oversized)
        plan = []
        for a, b in zip(cuts[:-1], cuts[1:]):
            a, b = int(a), int(b)
            r0, r1 = int(ptr[a]), int(ptr[b])
            if split_groups and b == a + 1 and a in over and r1 - r0 > max_rows:
                for s in range(r0, r1, max_rows):
                    plan.append((s, min(s + max_rows, r1), a, b))
            else:
                plan.append((r0, r1, a, b))
        if oversized and not split_groups:
            big = max(int(ptr[g + 1] - ptr[g]) for g in oversized)
            budget = f"{max_rows} rows"
            if nnz_ptr is not None:
                big_nnz = max(int(nnz_ptr[g + 1] - nnz_ptr[g]) for g in oversized)
                budget += f" / {max_nnz} nonzeros"
                big = f"{big} rows, {big_nnz} nonzeros"
            else:
                big = f"{big} rows"
            warnings.warn(
                f"{len(oversized)} group(s) exceed the block budget of {budget} "
                f"(largest: {big}); each is read as one block of its own, so peak "
                "memory follows the largest group",
                OversizedGroupWarning,
                stacklevel=3,
            )
        return plan

    def read_block(self, row0: int, row1: int, g0: int, g1: int) -> Block:
        """Read one planned block (used by :meth:`blocks` and by dask workers)."""
        ptr = self.group_ptr
        X, y = self._read_rows(row0, row1)
        qid = self._group_qid(g0, g1)
        gp = ptr[g0 : g1 + 1] - ptr[g0]
        gp = gp.astype(np.int64, copy=True)
        sizes = np.diff(gp)
        offs = np.zeros(g1 - g0, dtype=np.int64)
        if row0 != ptr[g0] or row1 != ptr[g1]:  # a piece of one split group
            sizes = np.diff(ptr[g0 : g1 + 1]).astype(np.int64)
            offs = np.asarray([row0 - ptr[g0]], dtype=np.int64)
            gp = np.asarray([0, row1 - row0], dtype=np.int64)
        return Block(X=X, y=y, group_ptr=gp, qid=qid, start=int(row0), group_start=int(g0),
                     group_size=sizes, group_offset=offs, weight=self._read_weight(row0, row1))

    def blocks(
        self,
        max_rows: int = DEFAULT_BLOCK_ROWS,
        shuffle: bool = False,
        random_state: Seed = None,
        *,
        max_nnz: int | None = None,
        split_groups: bool = False,
        prefetch: bool = True,
    ) -> Iterator[Block]:
        """Yield group-aligned blocks covering every row exactly once.

        Parameters
        ----------
        max_rows : int
            Row budget of a block.
        shuffle : bool
            Visit blocks in a random order (rows inside a block keep their order).
        random_state : None, int or numpy Generator
            Seed of the block order when ``shuffle``.
        max_nnz : int, optional
            Nonzero budget for CSR sources.
        split_groups : bool
            Allow cutting a group larger than ``max_rows`` (see :meth:`plan`).
        prefetch : bool
            Read the next block in a background thread.
        """
        plan = self.plan(max_rows, max_nnz=max_nnz, split_groups=split_groups)
        if shuffle:
            rng = np.random.default_rng(random_state)
            order = rng.permutation(len(plan))
            plan = [plan[i] for i in order]
        if not prefetch or len(plan) <= 1:
            for p in plan:
                yield self.read_block(*p)
            return
        yield from _prefetched(self.read_block, plan)

    def __iter__(self):
        return self.blocks()

    def groups(self, g0: int, g1: int) -> "GroupRange":
        """Groups ``g0:g1`` of this source as a source of their own (e.g. tonight's new groups of a store).

        A view: nothing is read until its blocks are; rows, targets, query
        ids and row weights are the source's.
        """
        return GroupRange(self, g0, g1)


class WrappedSource(BlockSource):
    """A source that yields the blocks of ``inner`` changed by :meth:`_map_block`.

    Groups, planning, order and prefetch stay the inner source's; subclasses
    (row weights, normalized features) override :meth:`_map_block` and the
    raw readers whose output they change.
    """

    def __init__(self, inner: BlockSource):
        self.inner = inner
        self.n_rows, self.n_groups = inner.n_rows, inner.n_groups
        self.n_features, self.n_outputs = inner.n_features, inner.n_outputs
        self.sparse = inner.sparse
        for attr in ("y_ndim", "global_group", "feature_names"):
            if hasattr(inner, attr):
                setattr(self, attr, getattr(inner, attr))

    def _map_block(self, block: Block) -> Block:
        return block

    def _group_ptr(self):
        return self.inner.group_ptr

    def _group_qid(self, g0, g1):
        return self.inner._group_qid(g0, g1)

    def _read_rows(self, r0, r1):
        return self.inner._read_rows(r0, r1)

    def _read_y(self, r0, r1):
        return self.inner.read_y(r0, r1)

    def _read_weight(self, r0, r1):
        return self.inner._read_weight(r0, r1)

    def _nnz_at(self, rows):
        return self.inner._nnz_at(rows)

    def plan(self, *args, **kwargs):
        return self.inner.plan(*args, **kwargs)

    def read_block(self, row0, row1, g0, g1):
        return self._map_block(self.inner.read_block(row0, row1, g0, g1))

    def blocks(self, *args, **kwargs):
        """The inner source's blocks (its own reader and prefetch), each through :meth:`_map_block`."""
        for b in self.inner.blocks(*args, **kwargs):
            yield self._map_block(b)


class GroupRange(BlockSource):
    """Groups ``g0:g1`` of a block source, as a source (:meth:`BlockSource.groups`).

    Its rows are the source's rows ``group_ptr[g0]:group_ptr[g1]``, numbered
    from 0; planning, splitting and prefetch are its own (a block never spans
    the range's edges).
    """

    def __init__(self, source: BlockSource, g0: int, g1: int):
        g0, g1 = int(g0), int(g1)
        if not 0 <= g0 <= g1 <= source.n_groups:
            raise ValueError(f"group range {g0}:{g1} outside the source's {source.n_groups} groups")
        self.base = source
        self.g0, self.g1 = g0, g1
        ptr = source.group_ptr[g0:g1 + 1]
        self._r0 = int(ptr[0])
        self._gp = (ptr - ptr[0]).astype(np.int64)
        self.n_rows = int(ptr[-1] - ptr[0])
        self.n_groups = g1 - g0
        self.n_features = source.n_features
        self.n_outputs = source.n_outputs
        self.sparse = source.sparse
        for attr in ("y_ndim", "feature_names"):
            if hasattr(source, attr):
                setattr(self, attr, getattr(source, attr))

    def _group_ptr(self):
        return self._gp

    def _group_qid(self, a, b):
        return self.base._group_qid(self.g0 + a, self.g0 + b)

    def _nnz_at(self, rows):
        z = self.base._nnz_at(np.concatenate(([self._r0], np.asarray(rows, np.int64) + self._r0)))
        return None if z is None else z[1:] - z[0]

    def _read_rows(self, r0, r1):
        return self.base._read_rows(self._r0 + r0, self._r0 + r1)

    def _read_y(self, r0, r1):
        return self.base.read_y(self._r0 + r0, self._r0 + r1)

    def _read_weight(self, r0, r1):
        return self.base._read_weight(self._r0 + r0, self._r0 + r1)


def _prefetched(read, plan, depth: int = 1):
    """Run ``read(*p)`` for each p of ``plan`` one step ahead in a thread."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    _END = object()

    def worker():
        try:
            for p in plan:
                if stop.is_set():
                    return
                item = read(*p)
                while not stop.is_set():
                    try:
                        q.put(("ok", item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
            q.put(("end", _END))
        except BaseException as exc:  # re-raised in the consumer
            q.put(("err", exc))

    t = threading.Thread(target=worker, name="streamrank-prefetch", daemon=True)
    t.start()
    try:
        while True:
            kind, item = q.get()
            if kind == "ok":
                yield item
            elif kind == "end":
                return
            else:
                raise item
    finally:
        stop.set()
        # drain so the worker can exit
        try:
            while True:
                q.get_nowait()
        except queue.Empty:
            pass
        t.join(timeout=5)


def vstack_X(parts):
    """Stack block feature matrices (dense or CSR) — for tests and small data."""
    if parts and sp.issparse(parts[0]):
        return sp.vstack(parts, format="csr")
    return np.concatenate(parts, axis=0)

"""Preference pairs within query groups, streamed for pairwise SGD learners.

``sr.pairs_from_groups(source, n_pairs=None)`` turns a group-aligned block
stream into batches of *ordered preference pairs* ``(i, j)`` with
``y_i > y_j`` inside the same group (ties give no pair; rows of different
groups are never paired).  Each :class:`PairBatch` carries the two feature
matrices row-aligned (``X_pos[k]`` is preferred over ``X_neg[k]``), dense or
CSR like the source, plus the global row indices.

Two modes:

* ``n_pairs=None`` — **all** ordered pairs of every group, in file order
  (group by group; inside a group by preferred row, then other row).  For a
  group of n rows this is up to n(n−1)/2 pairs, generated in strips so that
  memory stays O(``batch_size``) even for one huge global group.
* ``n_pairs=N`` — **N sampled pairs**, drawn with replacement as follows:
  every draw picks a query uniformly among the *eligible* queries (those
  with at least two different scores — ``max y > min y`` in the group), then
  an ordered pair uniformly among that query's pairs with ``y_i > y_j``.
  Equivalently the per-query counts are ``Multinomial(N, uniform over
  eligible queries)``, and inside a query the pairs are uniform over its
  ``#{(i, j): y_i > y_j}`` pairs (sampled exactly, without enumerating them,
  in O(n log n) per block, vectorised over its groups).  Counting the
  eligible queries costs one extra pass over ``y`` only
  (:meth:`BlockSource.read_y`); the multinomial is then drawn block by
  block (a binomial share for the block's eligible queries given what is
  left, then a multinomial among them — the same law), so the sampler keeps
  O(1) state, not O(groups).

Memory is bounded by ``max_rows`` (one block) plus ``batch_size`` pairs.
Reproducible: the same ``random_state`` gives the same pairs.

A group larger than ``max_rows`` (sampled mode) is never read whole: its
pieces are streamed (:func:`_sampled_split_group`).  A first pass over its
``y`` counts the rows of each distinct score; a pair is drawn as
``(score class a, rank in a)`` and ``(score class b < a, rank in b)``,
uniform over the group's ``#{(i, j): y_i > y_j}`` pairs exactly as above;
then, in rounds of ``max(max_rows, batch_size)`` pairs, one pass over ``y``
maps class ranks to rows and one pass over ``X`` gathers the rows.  Memory is
O(``max_rows`` + ``batch_size`` rows + the group's distinct scores) — a
handful for relevance grades — whatever the size of the group; the price is
two extra passes over the group per round of pairs drawn from it.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .._defaults import DEFAULT_BLOCK_ROWS
from .blocks import BlockSource, OversizedGroupWarning

__all__ = ["PairBatch", "pairs_from_groups"]


@dataclass(frozen=True, eq=False)
class PairBatch:
    """Ordered preference pairs: row ``k`` of ``X_pos`` is preferred over row ``k`` of ``X_neg``.

    Attributes
    ----------
    X_pos, X_neg : ndarray (k, n_features) or csr_matrix
        The features of the preferred and of the other row of each pair.
    rows : int64 ndarray (k, 2)
        Global row indices ``(preferred, other)`` in the source.
    qid : int64 ndarray (k,)
        Query id of each pair.
    y_diff : float64 ndarray (k,)
        ``y[preferred] - y[other]`` (> 0).
    pair_weight : float64 ndarray (k,) or None
        ``w[preferred] * w[other]`` on a row-weighted source
        (:mod:`streamrank.io.weighted`), from the weights of the rows read
        for the batch (never the whole weight column); None unweighted.
    """

    X_pos: object
    X_neg: object
    rows: np.ndarray
    qid: np.ndarray
    y_diff: np.ndarray
    pair_weight: np.ndarray | None = None

    def __len__(self):
        return len(self.rows)


def _as_block_source(source) -> BlockSource:
    if isinstance(source, BlockSource):
        return source
    from .sources import as_source

    if isinstance(source, tuple):
        return as_source(*source)
    raise TypeError("pairs_from_groups needs a BlockSource (e.g. a GroupStore or sr.as_source(X, y, qid)) "
                    f"or an (X, y, qid) tuple; got {type(source).__name__}")


def _column(y, output):
    if y.ndim == 1:
        if output != 0:
            raise ValueError(f"output={output} but the source has one output column")
        return y
    if not 0 <= output < y.shape[1]:
        raise ValueError(f"output={output} is out of range for {y.shape[1]} output columns")
    return y[:, output]


def _all_pairs_local(y, gp, limit):
    """Yield arrays (i, j, g) of local row pairs with y_i > y_j, at most ~limit candidates each."""
    sizes = np.diff(gp)
    # units: (group, first preferred row offset, last + 1)
    ug, ui0, ui1 = [], [], []
    small = sizes * sizes <= limit
    sg = np.flatnonzero(small & (sizes > 1))
    big = np.flatnonzero(~small)
    # keep group order: merge small groups and strips of big groups
    units = [(int(g), 0, int(sizes[g])) for g in sg]
    for g in big:
        n = int(sizes[g])
        s = max(1, limit // n)
        units.extend((int(g), a, min(a + s, n)) for a in range(0, n, s))
    units.sort()
    if not units:
        return
    ug = np.array([u[0] for u in units], dtype=np.int64)
    ui0 = np.array([u[1] for u in units], dtype=np.int64)
    ui1 = np.array([u[2] for u in units], dtype=np.int64)
    n_g = sizes[ug]
    ent = (ui1 - ui0) * n_g
    k = 0
    while k < len(units):
        # pack units while the candidate count stays under the limit (at least one unit)
        c = np.cumsum(ent[k:])
        stop = k + max(1, int(np.searchsorted(c, limit, side="right")))
        e = ent[k:stop]
        tot = int(e.sum())
        start = np.repeat(np.cumsum(e) - e, e)
        off = np.arange(tot, dtype=np.int64) - start
        nn = np.repeat(n_g[k:stop], e)
        base = np.repeat(gp[ug[k:stop]], e)
        i = base + np.repeat(ui0[k:stop], e) + off // nn
        j = base + off % nn
        keep = y[i] > y[j]
        yield i[keep], j[keep], np.repeat(ug[k:stop], e)[keep]
        k = stop


# pairs drawn per vectorised step of the sampler (bounds its temporaries to ~50 MB)
_SAMPLE_CHUNK = 1 << 20


def _sampled_local(y, gp, counts, rng, chunk=_SAMPLE_CHUNK):
    """Yield arrays (i, j, g): ``counts[g]`` ordered pairs per local group ``g``, in group order.

    Each pair of group ``g`` is uniform (with replacement) over the
    ``T_g = #{(i, j) in g: y_i > y_j}`` ordered pairs of the group, sampled
    exactly without enumerating them, for all groups of the block at once:

    * sort the rows by ``(group, y)``; ``below[k]`` = rows of the same group
      with strictly smaller ``y`` than sorted position ``k`` (start of its
      ``(group, y)`` run minus the group start), so ``T_g = sum below`` over g;
    * ``cum`` = inclusive cumulative sum of ``below`` over the whole block:
      group ``g`` owns the integer range ``[C_g, C_g + T_g)``, sorted
      position ``k`` owns ``below[k]`` consecutive integers of it;
    * draw ``u ~ U{0..T_g-1}``; the preferred row is the sorted position
      ``p = searchsorted(cum, C_g + u, "right")`` (probability
      ``below[p] / T_g``), the other one ``q ~ U{group start .. + below[p]-1}``,
      so every pair ``(p, q)`` has probability ``1 / T_g``.

    O(n log n) for the sort, O(1) numpy calls per ``chunk`` pairs.  Every
    group with ``counts[g] > 0`` must have ``T_g > 0`` (eligibility is
    decided by the caller).
    """
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return
    sizes = np.diff(gp).astype(np.int64)
    n = int(gp[-1] - gp[0])
    start = gp[:-1].astype(np.int64) - int(gp[0])
    gid = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    yb = y[int(gp[0]) : int(gp[-1])]
    order = np.lexsort((yb, gid))      # rows stay grouped: group g is sorted positions [start_g, end_g)
    ys = yb[order]
    new_run = np.ones(n, dtype=bool)
    new_run[1:] = (gid[1:] != gid[:-1]) | (ys[1:] != ys[:-1])
    run_start = np.maximum.accumulate(np.where(new_run, np.arange(n, dtype=np.int64), 0))
    below = run_start - start[gid]
    cum = np.cumsum(below)
    ends = np.concatenate(([0], cum))[start + sizes]
    c_g = np.concatenate(([0], cum))[start]            # first integer of group g's range
    t_g = ends - c_g
    bad = (counts > 0) & (t_g <= 0)
    if bad.any():
        g = int(np.flatnonzero(bad)[0])
        raise ValueError(f"group {g} of the block (rows {int(gp[g])}..{int(gp[g + 1]) - 1}) has "
                         f"counts={int(counts[g])} but no pair with y_i > y_j")
    cc = np.cumsum(counts)
    for k0 in range(0, total, chunk):
        k1 = min(k0 + chunk, total)
        # local group of each pair k0..k1-1 (pairs listed group by group)
        g = np.searchsorted(cc, np.arange(k0, k1, dtype=np.int64), side="right")
        u = rng.integers(0, t_g[g])
        p = np.searchsorted(cum, c_g[g] + u, side="right")  # sorted position of the preferred row
        q = start[g] + rng.integers(0, below[p])              # a strictly smaller one of the group
        off = int(gp[0])
        yield order[p] + off, order[q] + off, g


def _take(X, idx):
    return X[idx]


def pairs_from_groups(source, n_pairs: int | None = None, *, random_state=None,
                      max_rows: int = DEFAULT_BLOCK_ROWS, batch_size: int = 65_536, output: int = 0,
                      shuffle: bool = False) -> Iterator[PairBatch]:
    """Stream preference pairs within query groups (see the module docstring).

    Parameters
    ----------
    source
        BlockSource (GroupStore, ``sr.as_source(...)``) or (X, y, qid) tuple
    n_pairs : None or int
        None: every ordered pair with ``y_i > y_j`` in every group.  An int:
        that many pairs sampled with replacement — uniform query among those
        with two different scores, then a uniform ordered pair of that query.
    random_state : None, int or numpy Generator
        Seed of the sampling (and of the order when ``shuffle``).
    max_rows : int
        Row budget of the blocks read from ``source``.
    batch_size : int
        Maximum number of pairs per yielded :class:`PairBatch`.
    output : int
        Which score column to use when ``y`` has several.
    shuffle : bool
        Visit blocks in a random order and permute the pairs inside each batch.

    Yields
    ------
    PairBatch
        A batch of pairs of rows of one query each.
    """
    src = _as_block_source(source)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    rng = np.random.default_rng(random_state)
    left = None
    if n_pairs is not None:
        if isinstance(n_pairs, bool) or int(n_pairs) != n_pairs or n_pairs < 0:
            raise ValueError(f"n_pairs must be None or an integer >= 0, got {n_pairs!r}")
        n_eligible = _count_eligible(src, max_rows, output)
        if n_eligible == 0:
            if n_pairs:
                raise ValueError("no query group has two different scores; there is no preference pair to sample")
            return
        left = [int(n_pairs), n_eligible]            # draws and eligible queries not yet visited
    block_seed = rng.integers(2**63) if shuffle else None
    if left is not None and int(np.diff(src.group_ptr).max(initial=0)) > int(max_rows):
        # a group larger than the budget: stream its pieces instead of reading it whole
        yield from _sampled_with_split_groups(src, left, rng, block_seed, max_rows, batch_size, output, shuffle)
        return
    for block in src.blocks(max_rows=max_rows, shuffle=shuffle, random_state=block_seed):
        y = _column(block.y, output)
        gp = block.group_ptr
        if left is None:
            pieces = _all_pairs_local(y, gp, batch_size)
        else:
            pieces = _sampled_local(y, gp, _block_counts(y, gp, left, rng), rng)
        yield from _emit(block, y, pieces, batch_size, rng if shuffle else None)


def _sampled_with_split_groups(src, left, rng, block_seed, max_rows, batch_size, output, shuffle):
    """Sampled pairs when some group exceeds ``max_rows``: blocks of whole groups as usual, and each
    oversized group streamed piece by piece (:func:`_sampled_split_group`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OversizedGroupWarning)
        plan = src.plan(max_rows, split_groups=True)
    ptr = src.group_ptr
    units = []                                 # a block of whole groups, or all pieces of one group
    for r0, r1, g0, g1 in plan:
        piece = r0 != ptr[g0] or r1 != ptr[g1]
        if piece and units and units[-1][0] == "split" and units[-1][1] == g0:
            units[-1][2].append((r0, r1))
        elif piece:
            units.append(("split", g0, [(r0, r1)]))
        else:
            units.append(("block", (r0, r1, g0, g1)))
    if shuffle:
        order = np.random.default_rng(block_seed).permutation(len(units))
        units = [units[i] for i in order]
    for u in units:
        if u[0] == "block":
            block = src.read_block(*u[1])
            y = _column(block.y, output)
            pieces = _sampled_local(y, block.group_ptr, _block_counts(y, block.group_ptr, left, rng), rng)
            yield from _emit(block, y, pieces, batch_size, rng if shuffle else None)
        else:
            yield from _sampled_split_group(src, u[1], u[2], left, rng, max_rows, batch_size, output, shuffle)


def _sampled_split_group(src, g, pieces, left, rng, max_rows, batch_size, output, shuffle):
    """This group's share of the draws (as :func:`_block_counts` for a block of one group), sampled
    exactly as :func:`_sampled_local` without holding more than ``max_rows`` of its rows.

    Score classes ``v`` (sorted distinct scores) with ``c_v`` rows and
    ``below_v`` rows of smaller score own the integer ranges
    ``[C_v, C_v + c_v below_v)`` of ``[0, T)``; ``u ~ U{0..T-1}`` in class a
    picks rank ``(u - C_a) // below_a`` of class a as the preferred row and
    rank ``(u - C_a) % below_a`` among the rows below a as the other: every
    ordered pair with ``y_i > y_j`` has probability ``1 / T``.
    """
    vals = np.zeros(0)
    cnt = np.zeros(0, dtype=np.int64)
    for r0, r1 in pieces:                      # pass 1: rows per distinct score
        v, c = np.unique(_column(src.read_y(r0, r1), output), return_counts=True)
        allv = np.concatenate((vals, v))
        vals, inv = np.unique(allv, return_inverse=True)
        cnt = np.bincount(inv, weights=np.concatenate((cnt, c)), minlength=len(vals)).astype(np.int64)
    n, e = left
    if len(vals) < 2 or n == 0:                # not eligible (or nothing left to draw)
        left[1] = e - (len(vals) >= 2)
        return
    draws = n if e <= 1 else int(rng.binomial(n, 1.0 / e))
    left[0], left[1] = n - draws, e - 1
    below = np.cumsum(cnt) - cnt                         # rows with a smaller score, per class
    owned = np.cumsum(cnt * below)                       # class a owns [owned_a - c_a below_a, owned_a)
    T = int(owned[-1])
    first = np.cumsum(cnt) - cnt                         # rank of a class's first row among all
    qid = int(src._group_qid(g, g + 1)[0])
    round_size = max(1, int(max_rows), int(batch_size))
    done = 0
    while done < draws:
        k = min(round_size, draws - done)
        done += k
        u = rng.integers(0, T, size=k)
        a = np.searchsorted(owned, u, side="right")
        off = u - (owned[a] - cnt[a] * below[a])
        rank_i = off // below[a]
        r = off % below[a]                               # rank among the rows below class a
        b = np.searchsorted(np.cumsum(cnt), r, side="right")
        rank_j = r - first[b]
        cls = np.concatenate((a, b))
        rank = np.concatenate((rank_i, rank_j))
        rows = _rows_of_ranks(src, pieces, vals, cls, rank, output)
        X = _gather_rows(src, pieces, rows)
        w = _gather_weights(src, pieces, rows)
        i, j = rows[:k], rows[k:]
        yi, yj = vals[a], vals[b]
        for s0 in range(0, k, batch_size):
            s1 = min(s0 + batch_size, k)
            p = np.arange(s0, s1)
            if shuffle:
                p = p[rng.permutation(len(p))]
            yield PairBatch(X_pos=X[p], X_neg=X[k + p],
                            rows=np.stack((i[p], j[p]), axis=1).astype(np.int64),
                            qid=np.full(len(p), qid, dtype=np.int64), y_diff=(yi[p] - yj[p]).astype(np.float64),
                            pair_weight=None if w is None else w[p] * w[k + p])


def _rows_of_ranks(src, pieces, vals, cls, rank, output):
    """Source row of the ``rank``-th row (in row order) of score class ``cls``, one pass over ``y``."""
    rows = np.full(len(cls), -1, dtype=np.int64)
    seen = np.zeros(len(vals), dtype=np.int64)
    for r0, r1 in pieces:
        c = np.searchsorted(vals, _column(src.read_y(r0, r1), output))
        order = np.argsort(c, kind="stable")             # the piece's rows grouped by class, in row order
        pc = np.bincount(c, minlength=len(vals))
        pstart = np.cumsum(pc) - pc
        local = rank - seen[cls]
        hit = (local >= 0) & (local < pc[cls])
        rows[hit] = r0 + order[pstart[cls[hit]] + local[hit]]
        seen += pc
    if (rows < 0).any():  # pragma: no cover - the counts of pass 1 guarantee every rank exists
        raise RuntimeError("internal error: a sampled rank was not found in its score class")
    return rows


def _gather_rows(src, pieces, rows):
    """``X[rows]`` (in the order of ``rows``), one pass over the pieces holding them."""
    import scipy.sparse as sp

    out = parts = None
    pos_parts = []
    for r0, r1 in pieces:
        hit = np.flatnonzero((rows >= r0) & (rows < r1))
        if not len(hit):
            continue
        X, _ = src._read_rows(r0, r1)
        take = X[rows[hit] - r0]
        if sp.issparse(take):
            parts = [] if parts is None else parts
            parts.append(sp.csr_matrix(take))
            pos_parts.append(hit)
        else:
            if out is None:
                out = np.empty((len(rows), X.shape[1]), dtype=X.dtype)
            out[hit] = take
    if parts is not None:
        M = sp.vstack(parts, format="csr")
        inv = np.empty(len(rows), dtype=np.int64)
        inv[np.concatenate(pos_parts)] = np.arange(len(rows))
        return M[inv]
    return out


def _gather_weights(src, pieces, rows):
    """``w[rows]`` of a row-weighted source (None unweighted), one piece's weights at a time."""
    out = None
    for r0, r1 in pieces:
        hit = np.flatnonzero((rows >= r0) & (rows < r1))
        if not len(hit):
            continue
        w = src._read_weight(r0, r1)
        if w is None:
            return None
        if out is None:
            out = np.empty(len(rows), dtype=np.float64)
        out[hit] = np.asarray(w, dtype=np.float64)[rows[hit] - r0]
    return out


def _block_counts(y, gp, left, rng):
    """This block's share of Multinomial(N, uniform over the E eligible queries), drawn sequentially.

    With ``left = [n, e]`` (draws and eligible queries not visited yet) and
    ``k`` eligible queries here, the block gets ``Binomial(n, k / e)`` draws,
    spread as ``Multinomial(·, uniform over its k)``: the marginal/conditional
    split of the multinomial, so the counts over all blocks have exactly the
    law of one multinomial draw, in any block order.  Updates ``left``.
    """
    counts = np.zeros(len(gp) - 1, dtype=np.int64)
    eligible = _eligible(y, np.asarray(gp, dtype=np.int64) - int(gp[0]))
    k = len(eligible)
    n, e = left
    if k == 0 or n == 0:
        left[1] = e - k
        return counts
    draws = n if k >= e else int(rng.binomial(n, k / e))
    counts[eligible] = rng.multinomial(draws, np.full(k, 1.0 / k))
    left[0], left[1] = n - draws, e - k
    return counts


def _emit(block, y, pieces, batch_size, rng):
    buf_i, buf_j, buf_g, n = [], [], [], 0

    w = None if block.weight is None else np.asarray(block.weight, dtype=np.float64)

    def flush(i, j, g):
        if rng is not None:
            p = rng.permutation(len(i))
            i, j, g = i[p], j[p], g[p]
        return PairBatch(X_pos=_take(block.X, i), X_neg=_take(block.X, j),
                         rows=np.stack((i + block.start, j + block.start), axis=1).astype(np.int64),
                         qid=_ids(block.qid, g), y_diff=(y[i] - y[j]).astype(np.float64),
                         pair_weight=None if w is None else w[i] * w[j])

    for i, j, g in pieces:
        while len(i):
            take = min(batch_size - n, len(i))
            buf_i.append(i[:take]); buf_j.append(j[:take]); buf_g.append(g[:take])  # noqa: E702
            n += take
            i, j, g = i[take:], j[take:], g[take:]
            if n == batch_size:
                yield flush(np.concatenate(buf_i), np.concatenate(buf_j), np.concatenate(buf_g))
                buf_i, buf_j, buf_g, n = [], [], [], 0
    if n:
        yield flush(np.concatenate(buf_i), np.concatenate(buf_j), np.concatenate(buf_g))


def _count_eligible(src: BlockSource, max_rows: int, output: int) -> int:
    """Groups whose scores are not all equal (one pass over ``y`` only, O(1) state).

    Read with split groups so that a group larger than a block is seen piece
    by piece; the pieces of one group come one after the other, so only the
    open group's max and min are carried.
    """
    ptr = src.group_ptr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OversizedGroupWarning)
        plan = src.plan(max_rows, split_groups=True)
    count = 0
    open_g, hi, lo = -1, -np.inf, np.inf
    for r0, r1, g0, g1 in plan:
        y = _column(src.read_y(r0, r1), output)
        if r1 == r0:
            continue
        if r0 != ptr[g0] or r1 != ptr[g1]:          # a piece of one split group
            if g0 != open_g:
                open_g, hi, lo = g0, -np.inf, np.inf
            hi, lo = max(hi, float(y.max())), min(lo, float(y.min()))
            if r1 == ptr[g0 + 1]:                  # its last piece
                count += hi > lo
                open_g = -1
            continue
        count += len(_eligible(y, ptr[g0 : g1 + 1] - r0))
    return count


def _eligible(y, local):
    """Indices of the non-empty groups (``local`` offsets into ``y``) whose scores are not all equal."""
    nonempty = np.flatnonzero(local[1:] > local[:-1])
    if len(nonempty) == 0:
        return nonempty
    starts = local[:-1][nonempty]
    return nonempty[np.maximum.reduceat(y, starts) > np.minimum.reduceat(y, starts)]


def _ids(qid, g):
    """Query ids of the pairs: int64, or the original (string) ids as objects."""
    q = np.asarray(qid)[g]
    return q.astype(np.int64) if q.dtype.kind in "iuf" else q

"""Numba kernels of the ranking metrics, one query group at a time.

Only jitted functions of arrays and scalars live here (see
:mod:`streamrank._numba`), and for :func:`ndcg_groups`,
:func:`average_precision_groups`, :func:`cindex_groups` (and
:func:`cindex_group`, :func:`_stable_order`) a thin Python function of the
same signature that allocates the kernel's scratch and calls it (see
"Compile cost" below).  The boundary (:mod:`streamrank.metrics._checks`)
hands every kernel C-contiguous, writeable float64 labels ``y`` and scores
``s`` and int64 group offsets ``gp`` (rows of group g are ``gp[g]:gp[g+1]``),
so each kernel compiles once.  Cut-offs come as an int64 array ``ks``
(``0``: no cut-off); a kernel writes ``out[g, j]`` for group g and cut-off
``ks[j]``.  The plain-numpy references the tests compare against are in
``tests/reference/metrics_reference.py``.

Compile cost: every separately jitted helper and every numba library
implementation a kernel calls (``np.zeros``, ``min``/``max``, slice
assignment) is a compile unit of its own, ~0.1-0.4 s each on a cold cache.
So the kernels write their small steps (the cut-off, the gain, the end of a
run of ties, the Fenwick tree's walks) inline, allocate only with
``np.empty`` and zero by loops; only :func:`_stable_order_into` is shared.

Ties in the scores: every kernel returns the *expected* value under a
uniformly random order of the items tied in ``s`` (McSherry & Najork, ECIR
2008), computed in closed form per run of tied items.  A run occupying the
0-based positions ``a .. b-1`` puts each of its items at each of those
positions with probability ``1 / (b - a)``.  The trec_eval order (score
descending, then document id descending) is a strict order: the boundary
turns it into distinct scores, and the same kernels apply.

Relevance of the binary metrics is ``y > 0``.  A group without a relevant
item (``n_rel[g] == 0``, or an ideal DCG <= 0) gets NaN; the caller applies
the ``empty`` convention.
"""
from __future__ import annotations

import numpy as np

from .._numba import jit

__all__ = ["trec_rank_groups", "ndcg_groups", "err_groups", "average_precision_groups", "hits_groups",
           "reciprocal_rank_groups", "cindex_group", "cindex_groups", "auc_counts"]


def _stable_order(a, lo, hi, direction):
    """:func:`_stable_order_into` with its own scratch (for Python callers and the tests)."""
    return _stable_order_into(a, lo, hi, direction, np.empty(2 * (hi - lo), dtype=np.int64)).copy()


@jit
def _stable_order_into(a, lo, hi, direction, work):
    """Positions of ``a[lo:hi]`` sorted stably: ``np.argsort(direction * a[lo:hi], kind="stable")``.

    A bottom-up merge sort of indices (O(n log n), merges of runs of width 1,
    2, 4, ...).  ``direction`` 1.0: increasing; -1.0: decreasing (the order of
    ``np.argsort(-a[lo:hi], kind="stable")``); equal values keep their input
    order, NaN goes last either way, as in numpy.  ``direction`` is a float
    and only chooses the comparison (the values are never multiplied, so
    uint64 keys stay exact): a literal bool flag would compile one variant
    per value.  It stands in for numba's ``np.argsort``/``np.sort``: their
    generic implementations took ~5 CPU-s to compile cold for an
    ``evaluate``, this takes under one, and the permutation is the same (a
    stable sort's result is unique).  No ``np.arange`` either: one library
    function less to compile.  ``work`` (int64, at least ``2 (hi - lo)``
    entries) is the caller's scratch, so that a kernel that allocates nothing
    else (:func:`_ndcg_groups`) compiles no ``np.empty``; the result is a view
    of it.
    """
    n = hi - lo
    src = work[:n]
    for t in range(n):
        src[t] = t
    dst = work[n:2 * n]
    width = 1
    while width < n:
        start = 0
        while start < n:
            mid = start + width
            mid = mid if mid < n else n
            end = start + 2 * width
            end = end if end < n else n
            i = start
            j = mid
            for o in range(start, end):
                take_right = j < end and i >= mid
                if j < end and i < mid:
                    left = a[lo + src[i]]
                    right = a[lo + src[j]]
                    before = left < right if direction < 0.0 else right < left
                    take_right = before or (left != left and right == right)   # NaN last
                if take_right:
                    dst[o] = src[j]
                    j += 1
                else:
                    dst[o] = src[i]
                    i += 1
            start += 2 * width
        src, dst = dst, src
        width *= 2
    return src


def ndcg_groups(y, s, gp, iy, igp, ks, exp2, out, w=None, iw=None):
    """Expected NDCG@k of every group, optionally with row weights.

    ``DCG@k = sum_{p<k} w_p gain(rel_p) / log2(p + 2)`` (0-based p) in the
    predicted order; a run of tied items shares the mean discount of its
    positions (0 beyond k).  The ideal DCG@k sorts the weighted gains
    ``iw * gain(iy)`` of ``iy[igp[g]:igp[g+1]]`` (the group's own rows, or the
    judged documents of its query when qrels are given) decreasing.  ``w`` /
    ``iw`` (float64, one per row of ``y`` / ``iy``, finite and >= 0) default
    to ones: a weight of 1.0 multiplies exactly and, the gain being
    increasing, the weighted gains sort as the labels do, so the unweighted
    values are bit for bit those of weights all one.  NaN when the ideal
    DCG@k is <= 0.
    """
    max_n = max(1, int(np.max(np.diff(gp), initial=0)), int(np.max(np.diff(igp), initial=0)))
    w = np.ones(y.shape[0]) if w is None else w
    iw = (w if iy is y else np.ones(iy.shape[0])) if iw is None else iw
    _ndcg_groups(y, w, s, gp, iy, iw, igp, ks, exp2, out, np.empty(max_n), np.empty(ks.shape[0]),
                 np.empty(2 * max_n, dtype=np.int64), np.empty(max_n))


@jit
def _ndcg_groups(y, w, s, gp, iy, iw, igp, ks, exp2, out, disc, dcg, work, gains):
    """:func:`ndcg_groups` with the caller's scratch: ``disc`` and ``gains`` (float64, the largest group or
    judged list, at least 1), ``dcg`` (float64, ``len(ks)``) and ``work`` (int64, twice ``len(disc)``).  It
    allocates nothing, so it compiles no ``np.empty``.
    """
    n_groups = gp.shape[0] - 1
    nk = ks.shape[0]
    for p in range(disc.shape[0]):
        disc[p] = 1.0 / np.log2(p + 2.0)
    for g in range(n_groups):
        lo = gp[g]
        n = gp[g + 1] - lo
        ilo = igp[g]
        ni = igp[g + 1] - ilo
        for p in range(ni):
            v = iy[ilo + p]
            gains[p] = iw[ilo + p] * (2.0 ** v - 1.0 if exp2 else v)
        ideal = _stable_order_into(gains, 0, ni, -1.0, work)   # weighted gains decreasing: gains[ideal[p]]
        for j in range(nk):
            kk = ks[j]
            kk = ni if (kk <= 0 or kk > ni) else kk
            idcg = 0.0
            for p in range(kk):
                idcg += gains[ideal[p]] * disc[p]
            out[g, j] = idcg               # keep the ideal until the DCG is known
            dcg[j] = 0.0
        if n > 0:
            order = _stable_order_into(s, lo, lo + n, -1.0, work)   # decreasing score, ties in row order
            a = np.int64(0)
            while a < n:
                sa = s[lo + order[a]]
                b = a + 1
                while b < n and s[lo + order[b]] == sa:
                    b += 1
                gain = 0.0
                for t in range(a, b):
                    v = y[lo + order[t]]
                    gain += w[lo + order[t]] * (2.0 ** v - 1.0 if exp2 else v)
                for j in range(nk):
                    kk = ks[j]
                    kk = n if (kk <= 0 or kk > n) else kk
                    dsum = 0.0
                    for p in range(a, b if b < kk else kk):
                        dsum += disc[p]
                    dcg[j] += gain * dsum / (b - a)
                a = b
        for j in range(nk):
            out[g, j] = dcg[j] / out[g, j] if out[g, j] > 0.0 else np.nan


@jit
def err_groups(y, s, gp, ks, exp2, max_grade, out):
    """Expected reciprocal rank ERR@k of every group (Chapelle et al., CIKM 2009).

    ``ERR@k = sum_{p<k} R_p / (p + 1) * prod_{q<p} (1 - R_q)`` with the
    stopping probability ``R = (2^y - 1) / 2^max_grade`` (``exp2``) or
    ``y / max_grade``.  Ties: the expectation over random orders of a run,
    exactly: an item at offset t of its run is preceded by a uniformly random
    t-subset of the other items of the run, whose mean product of
    ``1 - R`` is built by a convex-combination recurrence (O(m^2 t) a run of
    m).  NaN for a group without an item with ``y > 0``.
    """
    n_groups = gp.shape[0] - 1
    nk = ks.shape[0]
    for g in range(n_groups):
        lo = gp[g]
        n = gp[g + 1] - lo
        has_rel = False
        for i in range(lo, lo + n):
            if y[i] > 0:
                has_rel = True
        if not has_rel:
            for j in range(nk):
                out[g, j] = np.nan
            continue
        kmax = 0
        for j in range(nk):
            kk = ks[j]
            kk = n if (kk <= 0 or kk > n) else kk
            kmax = kk if kk > kmax else kmax
        at = np.empty(kmax)               # expected contribution of each position
        for p in range(kmax):
            at[p] = 0.0
        order = _stable_order_into(s, lo, lo + n, -1.0, np.empty(2 * n, dtype=np.int64))   # decreasing score
        before = 1.0                      # probability the user reaches the run
        a = np.int64(0)
        while a < kmax:
            sa = s[lo + order[a]]
            b = a + 1
            while b < n and s[lo + order[b]] == sa:
                b += 1
            m = b - a
            R = np.empty(m)
            for t in range(m):
                v = y[lo + order[a + t]]
                R[t] = (2.0 ** v - 1.0) / 2.0 ** max_grade if exp2 else v / max_grade
            top = kmax - 1 - a
            top = m - 1 if m - 1 < top else top   # largest offset that still counts
            mean_prod = np.empty(top + 1)
            for i in range(m):
                if R[i] == 0.0:
                    continue
                # mean over t-subsets of the other items of prod(1 - R), t <= top
                for t in range(1, top + 1):
                    mean_prod[t] = 0.0
                mean_prod[0] = 1.0
                c = 0
                for o in range(m):
                    if o == i:
                        continue
                    x = 1.0 - R[o]
                    for t in range(c + 1 if c + 1 < top else top, 0, -1):
                        mean_prod[t] = ((c + 1 - t) * mean_prod[t] + t * x * mean_prod[t - 1]) / (c + 1)
                    c += 1
                for t in range(top + 1):
                    at[a + t] += before * R[i] * mean_prod[t] / m / (a + t + 1.0)
            for t in range(m):
                before *= 1.0 - R[t]
            a = b
        for j in range(nk):
            kk = ks[j]
            kk = n if (kk <= 0 or kk > n) else kk
            total = 0.0
            for p in range(kk):
                total += at[p]
            out[g, j] = total


def average_precision_groups(y, s, gp, n_rel, ks, out):
    """Expected average precision AP@k of every group (McSherry & Najork 2008).

    ``AP@k = (1 / n_rel) sum_{relevant i at position p < k} prec@(p+1)``
    with ``n_rel[g]`` relevant items in the query (trec_eval's ``map`` /
    ``map_cut``: the divisor is not cut at k).  A run of m tied items with r
    relevant, c relevant before it, starting at position a: a relevant item
    sits at offset t with probability 1/m and then has ``c + 1 + t (r - 1) /
    (m - 1)`` relevant items at or above it on average.  NaN if
    ``n_rel[g] == 0``.
    """
    max_n = max(1, int(np.max(np.diff(gp), initial=0)))
    _average_precision_groups(y, s, gp, n_rel, ks, out, np.empty(max_n), np.empty(2 * max_n, dtype=np.int64))


@jit
def _average_precision_groups(y, s, gp, n_rel, ks, out, at, work):
    """:func:`average_precision_groups` with the caller's scratch, ``at`` (float64) and ``work`` (int64) of
    at least the largest group and twice that: it allocates nothing, so it compiles no ``np.empty``."""
    n_groups = gp.shape[0] - 1
    nk = ks.shape[0]
    for g in range(n_groups):
        lo = gp[g]
        n = gp[g + 1] - lo
        if n_rel[g] <= 0:
            for j in range(nk):
                out[g, j] = np.nan
            continue
        kmax = 0
        for j in range(nk):
            kk = ks[j]
            kk = n if (kk <= 0 or kk > n) else kk
            kmax = kk if kk > kmax else kmax
        for p in range(kmax):
            at[p] = 0.0
        order = _stable_order_into(s, lo, lo + n, -1.0, work)   # decreasing score, ties in row order
        c = 0
        a = np.int64(0)
        while a < kmax:
            sa = s[lo + order[a]]
            b = a + 1
            while b < n and s[lo + order[b]] == sa:
                b += 1
            m = b - a
            r = 0
            for t in range(a, b):
                if y[lo + order[t]] > 0:
                    r += 1
            if r > 0:
                for t in range(m if m < kmax - a else kmax - a):
                    above = c + 1.0 + (t * (r - 1.0) / (m - 1.0) if m > 1 else 0.0)
                    at[a + t] += r / m * above / (a + t + 1.0)
            c += r
            a = b
        for j in range(nk):
            kk = ks[j]
            kk = n if (kk <= 0 or kk > n) else kk
            total = 0.0
            for p in range(kk):
                total += at[p]
            out[g, j] = total / n_rel[g]


@jit
def hits_groups(y, s, gp, ks, out):
    """Expected number of relevant items (``y > 0``) in the top k of every group.

    A run of m tied items with r relevant that has ``h`` of its positions
    within the top k contributes ``r h / m``.  Precision@k is this over k,
    recall@k this over the number of relevant items.
    """
    n_groups = gp.shape[0] - 1
    nk = ks.shape[0]
    for g in range(n_groups):
        lo = gp[g]
        n = gp[g + 1] - lo
        for j in range(nk):
            out[g, j] = 0.0
        if n == 0:
            continue
        order = _stable_order_into(s, lo, lo + n, -1.0, np.empty(2 * n, dtype=np.int64))   # decreasing score
        a = np.int64(0)
        while a < n:
            sa = s[lo + order[a]]
            b = a + 1
            while b < n and s[lo + order[b]] == sa:
                b += 1
            r = 0
            for t in range(a, b):
                if y[lo + order[t]] > 0:
                    r += 1
            if r > 0:
                for j in range(nk):
                    kk = ks[j]
                    kk = n if (kk <= 0 or kk > n) else kk
                    if a < kk:
                        out[g, j] += r * ((b if b < kk else kk) - a) / (b - a)
            a = b


@jit
def reciprocal_rank_groups(y, s, gp, ks, out):
    """Expected reciprocal rank of the first relevant item within the top k.

    0 when no relevant item is ranked within k, NaN when the group has none.
    In the first run holding r of its m items relevant, starting at position
    a, the first relevant item sits at offset t with probability
    ``prod_{j<t} (m - r - j) / (m - j) * r / (m - t)``.
    """
    n_groups = gp.shape[0] - 1
    nk = ks.shape[0]
    for g in range(n_groups):
        lo = gp[g]
        n = gp[g + 1] - lo
        for j in range(nk):
            out[g, j] = np.nan
        if n == 0:
            continue
        order = _stable_order_into(s, lo, lo + n, -1.0, np.empty(2 * n, dtype=np.int64))   # decreasing score
        a = np.int64(0)
        while a < n:
            sa = s[lo + order[a]]
            b = a + 1
            while b < n and s[lo + order[b]] == sa:
                b += 1
            m = b - a
            r = 0
            for t in range(a, b):
                if y[lo + order[t]] > 0:
                    r += 1
            if r > 0:
                for j in range(nk):
                    kk = ks[j]
                    kk = n if (kk <= 0 or kk > n) else kk
                    none_yet = 1.0
                    total = 0.0
                    for t in range(m - r + 1):
                        if a + t >= kk:
                            break
                        total += none_yet * r / (m - t) / (a + t + 1.0)
                        none_yet *= (m - r - t) / (m - t)
                    out[g, j] = total
                break
            a = b


@jit
def trec_rank_groups(s, words, gp, out):
    """trec_eval's order in every group as distinct float ranks (higher = earlier).

    Score descending, ties by document id descending, the ids given as rows
    of big-endian words of their bytes (``strcmp`` order).  Within a group
    the rows are sorted by id (one stable pass per word, least significant
    first), then stably by score.  Returns the first row whose id repeats
    within its group, or -1.
    """
    n_groups = gp.shape[0] - 1
    n_words = words.shape[1]
    for g in range(n_groups):
        lo = gp[g]
        n = gp[g + 1] - lo
        if n == 0:
            continue
        order = np.arange(n)
        key = np.empty(n, dtype=np.uint64)
        for j in range(n_words - 1, -1, -1):
            for t in range(n):
                key[t] = ~words[lo + order[t], j]          # descending id
            order = order[_stable_order_into(key, 0, n, 1.0, np.empty(2 * n, dtype=np.int64))]
        for t in range(1, n):
            same = True
            for j in range(n_words):
                if words[lo + order[t], j] != words[lo + order[t - 1], j]:
                    same = False
                    break
            if same:
                return lo + order[t]
        sk = np.empty(n)
        for t in range(n):
            sk[t] = -s[lo + order[t]]
        order = order[_stable_order_into(sk, 0, n, 1.0, np.empty(2 * n, dtype=np.int64))]
        for t in range(n):
            out[lo + order[t]] = float(n - t)
    return -1


def cindex_group(y, s, lo, hi):
    """(discordant, score_ties, ordered_pairs) of rows lo:hi: :func:`cindex_groups` of one group.

    A Python function, not a kernel of its own: an ``evaluate`` compiles
    only :func:`cindex_groups`.
    """
    out = np.zeros((3, 1), dtype=np.int64)
    cindex_groups(y, s, np.array([lo, hi], dtype=np.int64), out[0], out[1], out[2])
    return int(out[0, 0]), int(out[1, 0]), int(out[2, 0])


def cindex_groups(y, s, gp, disc, ties, pairs, w=None, count=None):
    """Per-group discordant, score-tied and ordered pairs, O(n log n) a group; with row weights, their weights.

    Ordered pairs are (i, j) with y_i < y_j; discordant when s_i > s_j; tied
    when s_i == s_j.  With weights ``w`` (float64, finite, >= 0) a pair
    counts ``w_i w_j`` (the pair weight of weighted RankRLS) and ``disc``,
    ``ties``, ``pairs`` receive sums of pair weights; ``count`` (optional)
    the number of ordered pairs.  Items are inserted into a Fenwick tree of
    weights over the dense ranks of the scores in increasing order of y, one
    label class at a time; every item takes the weight of the already
    inserted (strictly lower label) items with a smaller score (the tree's
    prefix), an equal score (a per-rank total) and a larger one (the rest).
    Without weights every weight is 1.0 and every sum an integer held
    exactly in float64 (below 2**53), so int64 outputs get exact counts.
    """
    g = gp.shape[0] - 1
    max_n = max(1, int(np.max(np.diff(gp), initial=0)))
    fd, ft, fp, fc = (np.empty(g) for _ in range(4))
    _cindex_groups(y, np.ones(y.shape[0]) if w is None else w, s, gp, fd, ft, fp, fc,
                   np.empty(3 * max_n, dtype=np.int64), np.empty(2 * max_n + 2))
    disc[:] = fd
    ties[:] = ft
    pairs[:] = fp
    if count is not None:
        count[:] = fc


@jit
def _cindex_groups(y, w, s, gp, disc, ties, pairs, count, work, fwork):
    """:func:`cindex_groups` with float64 outputs and the caller's scratch: ``work`` (int64, 3 x the largest
    group: the sort's buffers and the ranks) and ``fwork`` (float64, 2 x the largest group + 2: the Fenwick
    tree and the weight at each rank).  It allocates nothing, so it compiles no ``np.empty``."""
    n_groups = gp.shape[0] - 1
    for g in range(n_groups):
        lo = gp[g]
        hi = gp[g + 1]
        n = hi - lo
        disc[g] = 0.0
        ties[g] = 0.0
        pairs[g] = 0.0
        count[g] = 0.0
        if n < 2:
            continue
        ss = s[lo:hi]
        ys = y[lo:hi]
        ws = w[lo:hi]
        order_s = _stable_order_into(s, lo, hi, 1.0, work)
        rank = work[2 * n:3 * n]
        r = 0
        for t in range(n):
            if t > 0 and ss[order_s[t]] != ss[order_s[t - 1]]:
                r += 1
            rank[order_s[t]] = r
        m = r + 2
        tree = fwork[:m]                    # r + 2 <= n + 1
        at_rank = fwork[m:m + r + 1]        # inserted weight at each rank
        for v in range(m):
            tree[v] = 0.0
        for v in range(r + 1):
            at_rank[v] = 0.0
        order_y = _stable_order_into(y, lo, hi, 1.0, work)   # order_s is done
        inserted = 0.0                     # weight of the inserted items
        n_inserted = 0
        w_disc = 0.0
        w_ties = 0.0
        w_pairs = 0.0
        n_pairs = 0
        t = 0
        while t < n:
            u = t + 1
            yt = ys[order_y[t]]
            while u < n and ys[order_y[u]] == yt:
                u += 1
            for v in range(t, u):
                ri = rank[order_y[v]]
                wv = ws[order_y[v]]
                less = 0.0                     # Fenwick prefix sum: weight at ranks 0..ri-1
                i = ri
                while i > 0:
                    less += tree[i]
                    i -= i & (-i)
                w_ties += wv * at_rank[ri]
                above = inserted - less - at_rank[ri]
                w_disc += wv * (above if above > 0.0 else 0.0)   # no rounding below 0
                w_pairs += wv * inserted
            n_pairs += n_inserted * (u - t)
            for v in range(t, u):
                ri = rank[order_y[v]]
                wv = ws[order_y[v]]
                at_rank[ri] += wv
                i = ri + 1                     # Fenwick add the weight at its rank
                while i < m:
                    tree[i] += wv
                    i += i & (-i)
                inserted += wv
            n_inserted += u - t
            t = u
        disc[g] = w_disc
        ties[g] = w_ties
        pairs[g] = w_pairs
        count[g] = n_pairs


@jit
def auc_counts(y, s):
    """(wrong pairs + 0.5 tied pairs, n_pos * n_neg) with positives ``y > 0``: one sort.

    Walks the runs of equal scores in increasing order; a positive is beaten
    by every negative scored higher and tied with the negatives of its run
    (Mann-Whitney U with mid-ranks).  Returns float64 wrong, int64 pairs.
    """
    n = s.shape[0]
    order = _stable_order_into(s, 0, n, 1.0, np.empty(2 * n, dtype=np.int64))
    n_pos = 0
    for i in range(n):
        if y[i] > 0:
            n_pos += 1
    n_neg = n - n_pos
    good = 0.0
    neg_below = 0
    a = 0
    while a < n:
        sa = s[order[a]]
        b = a + 1
        while b < n and s[order[b]] == sa:
            b += 1
        p_run = 0
        for t in range(a, b):
            if y[order[t]] > 0:
                p_run += 1
        n_run = (b - a) - p_run
        good += p_run * neg_below + 0.5 * p_run * n_run
        neg_below += n_run
        a = b
    pairs = n_pos * n_neg
    return pairs - good, pairs

"""Numba kernels of the ranking metrics, one query group at a time.

Only jitted functions of arrays and scalars live here (see
:mod:`streamrank._numba`).  Every kernel takes the labels ``y`` (float64),
the predicted scores ``s`` (float32 or float64) and the group offsets
``group_ptr`` (int64, rows of group g are ``group_ptr[g]:group_ptr[g+1]``) and
writes one value per group.  The plain-numpy references the tests compare
against are in ``tests/reference/metrics_reference.py``.

Conventions (documented for the user in :mod:`streamrank.metrics`):

* NDCG@k: gain ``2**rel - 1``, discount ``1 / log2(rank + 1)`` (rank 1-based);
  ties in the predicted scores are averaged (McSherry & Najork, 2008): a run
  of tied items occupying ranks a..b shares the mean discount of those ranks
  (0 beyond k), which is the expected DCG under a uniformly random order of
  the tied items.  A group whose ideal DCG is <= 0 gets NaN (skipped): with
  labels < 0 the gain is negative, and a ratio of two negative DCGs is
  meaningless (it would exceed 1).  Otherwise NDCG <= 1 (the ideal order
  maximises DCG@k by the rearrangement inequality) and is negative only
  when negative labels lead the predicted order.
* C-index / disagreement: over the ordered pairs (y_i < y_j) of a group,
  count discordant pairs (s_i > s_j) and pairs tied in the score
  (s_i == s_j); O(n log n) with a Fenwick tree over the score ranks.
* Average precision: relevance ``y > 0``; the step-wise definition over
  distinct score thresholds, ``AP = sum_t (R_t - R_{t-1}) P_t`` (tied items
  enter together, as in scikit-learn's ``average_precision_score``).  A group
  without a relevant item gets NaN (skipped).
"""
from __future__ import annotations

import numpy as np

from ._numba import jit

__all__ = ["ndcg_groups", "cindex_groups", "average_precision_groups"]


@jit
def _discounts(n):
    """1 / log2(p + 2) for 0-based positions p < n."""
    d = np.empty(n, dtype=np.float64)
    for p in range(n):
        d[p] = 1.0 / np.log2(p + 2.0)
    return d


@jit
def ndcg_groups(y, s, group_ptr, k, out):
    """NDCG@k of every group into ``out`` (NaN where the ideal DCG is <= 0).

    ``k <= 0`` means no cut-off.  DCG@k = sum_{r<=k} (2^{rel_r} - 1) / log2(r + 1),
    ties in ``s`` averaged (expected DCG under random tie-breaking).
    """
    n_groups = group_ptr.shape[0] - 1
    max_n = 0
    for g in range(n_groups):
        size = group_ptr[g + 1] - group_ptr[g]
        if size > max_n:
            max_n = size
    disc = _discounts(max_n)
    for g in range(n_groups):
        lo = group_ptr[g]
        hi = group_ptr[g + 1]
        n = hi - lo
        kk = n if (k <= 0 or k > n) else k
        if n == 0:
            out[g] = np.nan
            continue
        ys = y[lo:hi]
        # ideal DCG: labels sorted descending
        yo = np.sort(ys)
        idcg = 0.0
        for p in range(kk):
            idcg += (2.0 ** yo[n - 1 - p] - 1.0) * disc[p]
        if idcg <= 0.0:   # no positive gain to rank (negative labels give negative gains)
            out[g] = np.nan
            continue
        # predicted order: scores descending (stable), walk runs of ties
        order = np.argsort(-s[lo:hi].astype(np.float64), kind="mergesort")
        dcg = 0.0
        a = 0
        while a < n and a < kk:
            sa = s[lo + order[a]]
            b = a + 1
            while b < n and s[lo + order[b]] == sa:
                b += 1
            gain = 0.0
            for t in range(a, b):
                gain += 2.0 ** ys[order[t]] - 1.0
            dsum = 0.0
            top = b if b < kk else kk
            for p in range(a, top):
                dsum += disc[p]
            dcg += gain * dsum / (b - a)
            a = b
        out[g] = dcg / idcg


@jit
def _fenwick_prefix(tree, i):
    """Sum of counts at ranks 0..i-1."""
    total = 0
    while i > 0:
        total += tree[i]
        i -= i & (-i)
    return total


@jit
def _fenwick_add(tree, i):
    i += 1
    m = tree.shape[0]
    while i < m:
        tree[i] += 1
        i += i & (-i)


@jit
def cindex_group(y, s, lo, hi):
    """(discordant, score_ties, ordered_pairs) of rows lo:hi, O(n log n).

    Ordered pairs are (i, j) with y_i < y_j; discordant when s_i > s_j; tied
    when s_i == s_j.  Items are inserted into a Fenwick tree over the dense
    ranks of the scores in increasing order of y, one label class at a time;
    every item counts the already inserted (strictly lower label) items with
    a smaller, equal and larger score.
    """
    n = hi - lo
    if n < 2:
        return 0, 0, 0
    ss = s[lo:hi]
    ys = y[lo:hi]
    order_s = np.argsort(ss, kind="mergesort")
    rank = np.empty(n, dtype=np.int64)
    r = 0
    for t in range(n):
        if t > 0 and ss[order_s[t]] != ss[order_s[t - 1]]:
            r += 1
        rank[order_s[t]] = r
    tree = np.zeros(r + 2, dtype=np.int64)
    order_y = np.argsort(ys, kind="mergesort")
    inserted = 0
    disc = 0
    ties = 0
    pairs = 0
    t = 0
    while t < n:
        u = t + 1
        yt = ys[order_y[t]]
        while u < n and ys[order_y[u]] == yt:
            u += 1
        for v in range(t, u):
            ri = rank[order_y[v]]
            less = _fenwick_prefix(tree, ri)
            leq = _fenwick_prefix(tree, ri + 1)
            ties += leq - less
            disc += inserted - leq
        pairs += inserted * (u - t)
        for v in range(t, u):
            _fenwick_add(tree, rank[order_y[v]])
        inserted += u - t
        t = u
    return disc, ties, pairs


@jit
def cindex_groups(y, s, group_ptr, disc, ties, pairs):
    """Per-group discordant pairs, score-tied pairs and ordered pairs (int64 outputs)."""
    n_groups = group_ptr.shape[0] - 1
    for g in range(n_groups):
        d, t, p = cindex_group(y, s, group_ptr[g], group_ptr[g + 1])
        disc[g] = d
        ties[g] = t
        pairs[g] = p


@jit
def average_precision_groups(y, s, group_ptr, out):
    """Average precision of every group into ``out`` (NaN without a relevant item).

    Relevance is ``y > 0``.  AP = sum over distinct score thresholds t (in
    decreasing order) of (R_t - R_{t-1}) * P_t, where R_t and P_t are recall
    and precision of the items scored >= t.
    """
    n_groups = group_ptr.shape[0] - 1
    for g in range(n_groups):
        lo = group_ptr[g]
        hi = group_ptr[g + 1]
        n = hi - lo
        n_pos = 0
        for i in range(lo, hi):
            if y[i] > 0:
                n_pos += 1
        if n_pos == 0:
            out[g] = np.nan
            continue
        order = np.argsort(-s[lo:hi].astype(np.float64), kind="mergesort")
        ap = 0.0
        tp = 0
        a = 0
        while a < n:
            sa = s[lo + order[a]]
            b = a + 1
            while b < n and s[lo + order[b]] == sa:
                b += 1
            tp_run = 0
            for t in range(a, b):
                if y[lo + order[t]] > 0:
                    tp_run += 1
            tp += tp_run
            if tp_run > 0:
                ap += (tp_run / n_pos) * (tp / b)
            a = b
        out[g] = ap


@jit
def auc_counts(pos, s):
    """(wrong pairs + 0.5 tied pairs, n_pos * n_neg) for boolean ``pos``: one sort.

    Walks the runs of equal scores in increasing order; a positive is beaten
    by every negative scored higher and tied with the negatives of its run
    (Mann-Whitney U with mid-ranks).  Returns float64 wrong, int64 pairs.
    """
    n = s.shape[0]
    order = np.argsort(s, kind="mergesort")
    n_pos = 0
    for i in range(n):
        if pos[i]:
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
            if pos[order[t]]:
                p_run += 1
        n_run = (b - a) - p_run
        good += p_run * neg_below + 0.5 * p_run * n_run
        neg_below += n_run
        a = b
    pairs = n_pos * n_neg
    return pairs - good, pairs

"""Plain-numpy / brute-force references of the ranking metrics (slow, obvious).

Each works on one group (1-D arrays) and follows the definitions in
:mod:`streamrank.metrics` literally: every pair enumerated, every order of
tied items enumerated.
"""
from __future__ import annotations

import itertools
import math

import numpy as np


def dcg_of_order(y, order, k):
    """DCG@k of the items of ``y`` listed in ``order`` (gain 2^rel - 1, log2 discount)."""
    kk = len(order) if k is None else min(k, len(order))
    return sum((2.0 ** y[order[r]] - 1.0) / math.log2(r + 2) for r in range(kk))


def ndcg_bruteforce(y, s, k=None):
    """NDCG@k averaged over every order of the items tied in ``s`` (exhaustive).

    Returns NaN when the ideal DCG is <= 0.  Only for tiny groups.
    """
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    n = len(y)
    if n == 0:
        return np.nan
    ideal = dcg_of_order(y, list(np.argsort(-y, kind="stable")), k)
    if ideal <= 0:
        return np.nan
    values = np.unique(s)[::-1]
    blocks = [list(np.flatnonzero(s == v)) for v in values]
    total, count = 0.0, 0
    for perms in itertools.product(*[itertools.permutations(b) for b in blocks]):
        order = [i for p in perms for i in p]
        total += dcg_of_order(y, order, k)
        count += 1
    return total / count / ideal


def ndcg_expected(y, s, k=None):
    """NDCG@k with expected discounts per item (closed form, any group size): every weight 1."""
    return weighted_ndcg_expected(y, s, np.ones(len(y)), k)


def disagreement_pairs(y, s, tie=0.5):
    """(disc + tie * ties) / ordered pairs by enumerating all pairs; NaN without pairs."""
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    wrong = 0.0
    pairs = 0
    for i in range(len(y)):
        for j in range(len(y)):
            if y[i] < y[j]:
                pairs += 1
                if s[i] > s[j]:
                    wrong += 1.0
                elif s[i] == s[j]:
                    wrong += tie
    return wrong / pairs if pairs else np.nan


def cindex_counts(y, s):
    """(discordant, ties, ordered pairs) by enumeration."""
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    lo = y[:, None] < y[None, :]
    d = int(np.sum(lo & (s[:, None] > s[None, :])))
    t = int(np.sum(lo & (s[:, None] == s[None, :])))
    return d, t, int(lo.sum())


def average_precision(y, s):
    """AP over distinct thresholds: sum_t (R_t - R_{t-1}) P_t; NaN without relevant items."""
    rel = np.asarray(y) > 0
    s = np.asarray(s, dtype=np.float64)
    n_pos = int(rel.sum())
    if n_pos == 0:
        return np.nan
    ap, prev_recall = 0.0, 0.0
    for t in np.unique(s)[::-1]:
        sel = s >= t
        tp = int(np.sum(rel & sel))
        recall = tp / n_pos
        precision = tp / int(sel.sum())
        ap += (recall - prev_recall) * precision
        prev_recall = recall
    return ap


def average_precision_no_ties(y, s):
    """Textbook AP: mean over relevant items of precision at their rank (distinct scores)."""
    rel = np.asarray(y) > 0
    order = np.argsort(-np.asarray(s, dtype=np.float64))
    hits, precs = 0, []
    for r, i in enumerate(order, start=1):
        if rel[i]:
            hits += 1
            precs.append(hits / r)
    return float(np.mean(precs)) if precs else np.nan


def auc_pairs(y, s):
    """AUC by enumerating (positive, negative) pairs, ties 1/2."""
    pos = np.asarray(y) > 0
    s = np.asarray(s, dtype=np.float64)
    sp_, sn = s[pos], s[~pos]
    good = (sp_[:, None] > sn[None, :]).sum() + 0.5 * (sp_[:, None] == sn[None, :]).sum()
    return good / (len(sp_) * len(sn))


def per_group(fn, y, s, qid, *args):
    """Apply a one-group reference to each contiguous run of ``qid``."""
    qid = np.asarray(qid)
    starts = np.concatenate(([0], np.flatnonzero(qid[1:] != qid[:-1]) + 1, [len(qid)]))
    return np.array([fn(y[a:b], s[a:b], *args) for a, b in zip(starts[:-1], starts[1:])])


# ------------------------------------------------- textbook metrics of one order
# ``order`` lists the row indices of one group from the top of the ranking down.
def ap_of_order(y, order, k=None, n_rel=None):
    """(1/R) sum over relevant items ranked <= k of precision at their rank; NaN for R == 0."""
    rel = np.asarray(y) > 0
    n_rel = int(rel.sum()) if n_rel is None else n_rel
    if n_rel == 0:
        return np.nan
    kk = len(order) if k is None else min(k, len(order))
    hits, total = 0, 0.0
    for r in range(kk):
        if rel[order[r]]:
            hits += 1
            total += hits / (r + 1)
    return total / n_rel


def hits_of_order(y, order, k=None):
    kk = len(order) if k is None else min(k, len(order))
    return sum(1 for r in range(kk) if y[order[r]] > 0)


def rr_of_order(y, order, k=None):
    """1 / rank of the first relevant item within k (0 if none there); NaN without relevant items."""
    if not np.any(np.asarray(y) > 0):
        return np.nan
    kk = len(order) if k is None else min(k, len(order))
    for r in range(kk):
        if y[order[r]] > 0:
            return 1.0 / (r + 1)
    return 0.0


def err_of_order(y, order, k=None, max_grade=4.0, exp2=True):
    """Chapelle et al. (2009) eq. (4) literally; NaN without relevant items."""
    if not np.any(np.asarray(y) > 0):
        return np.nan
    kk = len(order) if k is None else min(k, len(order))
    reach, total = 1.0, 0.0
    for r in range(kk):
        g = y[order[r]]
        R = (2.0 ** g - 1.0) / 2.0 ** max_grade if exp2 else g / max_grade
        total += reach * R / (r + 1)
        reach *= 1.0 - R
    return total


def tie_orders(s):
    """Every order of the rows consistent with decreasing ``s`` (tied rows in any order)."""
    s = np.asarray(s, dtype=np.float64)
    blocks = [list(np.flatnonzero(s == v)) for v in np.unique(s)[::-1]]
    for perms in itertools.product(*[itertools.permutations(b) for b in blocks]):
        yield [i for p in perms for i in p]


def expected_over_ties(fn, y, s, *args, **kw):
    """Average of ``fn(y, order, ...)`` over every tie order (exhaustive: tiny groups only)."""
    vals = [fn(y, order, *args, **kw) for order in tie_orders(s)]
    return float(np.mean(vals)) if vals else np.nan


def monte_carlo_over_ties(fn, y, s, n_draws, rng, *args, **kw):
    """Mean and standard error of ``fn`` over random tie orders (random keys break the ties)."""
    s = np.asarray(s, dtype=np.float64)
    vals = []
    for _ in range(n_draws):
        order = np.lexsort((rng.random(len(s)), -s))
        vals.append(fn(y, list(order), *args, **kw))
    vals = np.asarray(vals)
    return float(vals.mean()), float(vals.std(ddof=1) / np.sqrt(n_draws))


def trec_order(s, doc_ids):
    """trec_eval's order: score descending, then document id descending (as strings)."""
    ids = [str(d) for d in doc_ids]
    return sorted(range(len(s)), key=lambda i: (-float(s[i]), _Desc(ids[i])))


class _Desc:
    def __init__(self, v):
        self.v = v

    def __lt__(self, other):
        return self.v > other.v

    def __eq__(self, other):
        return self.v == other.v


def ndcg_of_order(y, order, k=None, ideal_labels=None, linear=False):
    """NDCG@k of one order; the ideal from ``ideal_labels`` (default: y); NaN when the ideal <= 0."""
    y = np.asarray(y, dtype=np.float64)
    lab = np.sort(np.asarray(y if ideal_labels is None else ideal_labels, dtype=np.float64))[::-1]
    gain = (lambda v: v) if linear else (lambda v: 2.0 ** v - 1.0)
    kk = len(order) if k is None else min(k, len(order))
    ki = len(lab) if k is None else min(k, len(lab))
    dcg = sum(gain(y[order[r]]) / math.log2(r + 2) for r in range(kk))
    ideal = sum(gain(lab[r]) / math.log2(r + 2) for r in range(ki))
    return dcg / ideal if ideal > 0 else np.nan


def average_precision_expected(y, s, k=None):
    """Expected AP over tie orders by a second derivation: per relevant item, over its offset t
    in its run and the number j of the run's other relevant items above it (hypergeometric)."""
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    rel = y > 0
    R = int(rel.sum())
    if R == 0:
        return np.nan
    n = len(y)
    kk = n if k is None else min(k, n)
    total = 0.0
    for i in np.flatnonzero(rel):
        a = int(np.sum(s > s[i]))                        # rows strictly above the run
        c = int(np.sum(rel & (s > s[i])))                # relevant rows above the run
        m = int(np.sum(s == s[i]))
        r_other = int(np.sum(rel & (s == s[i]))) - 1     # other relevant rows in the run
        for t in range(m):
            if a + t >= kk:
                break
            for j in range(0, min(t, r_other) + 1):
                # j of the t rows above i (drawn from m - 1 others) are relevant
                p = math.comb(r_other, j) * math.comb(m - 1 - r_other, t - j) / math.comb(m - 1, t)
                total += (1.0 / m) * p * (c + 1 + j) / (a + t + 1)
    return total / R


def weighted_ndcg_expected(y, s, w, k=None, linear=False):
    """Weighted NDCG@k of one group: gain w_i g(y_i); ideal = those weighted gains sorted explicitly.

    Ties in ``s``: every item of a run gets the mean discount of the run's
    positions.  NaN when the ideal DCG is <= 0.
    """
    y, s, w = (np.asarray(a, dtype=np.float64) for a in (y, s, w))
    n = len(y)
    if n == 0:
        return np.nan
    kk = n if k is None else min(k, n)
    disc = np.array([1.0 / math.log2(r + 2) if r < kk else 0.0 for r in range(n)])
    gains = w * (y if linear else 2.0 ** y - 1.0)
    ideal = float(np.sum(np.array(sorted(gains, reverse=True)) * disc))
    if ideal <= 0:
        return np.nan
    dcg = 0.0
    for i in range(n):
        above = int(np.sum(s > s[i]))
        tied = int(np.sum(s == s[i]))
        dcg += gains[i] * disc[above:above + tied].mean()
    return dcg / ideal


def weighted_ndcg_bruteforce(y, s, w, k=None):
    """Weighted NDCG@k averaged over every order of the tied items (exhaustive; tiny groups only)."""
    y, s, w = (np.asarray(a, dtype=np.float64) for a in (y, s, w))
    n = len(y)
    if n == 0:
        return np.nan
    gains = w * (2.0 ** y - 1.0)

    def dcg(order):
        kk = len(order) if k is None else min(k, len(order))
        return sum(gains[order[r]] / math.log2(r + 2) for r in range(kk))

    ideal = dcg(sorted(range(n), key=lambda i: -gains[i]))
    if ideal <= 0:
        return np.nan
    blocks = [list(np.flatnonzero(s == v)) for v in np.unique(s)[::-1]]
    total, count = 0.0, 0
    for perms in itertools.product(*[itertools.permutations(b) for b in blocks]):
        total += dcg([i for p in perms for i in p])
        count += 1
    return total / count / ideal


def weighted_pairs(y, s, w, tie=0.5):
    """(sum w_i w_j [misordered], sum w_i w_j, number of pairs) over every pair y_i < y_j, enumerated."""
    wrong = total = 0.0
    count = 0
    for i in range(len(y)):
        for j in range(len(y)):
            if y[i] < y[j]:
                count += 1
                pw = float(w[i]) * float(w[j])
                total += pw
                if s[i] > s[j]:
                    wrong += pw
                elif s[i] == s[j]:
                    wrong += tie * pw
    return wrong, total, count


def weighted_disagreement(y, s, w, qid, tie=0.5):
    """Weighted disagreement over queries: pair weight w_i w_j / #pairs of its query, pooled."""
    num = den = 0.0
    for q in dict.fromkeys(np.asarray(qid).tolist()):
        m = np.asarray(qid) == q
        wrong, total, count = weighted_pairs(np.asarray(y)[m], np.asarray(s)[m], np.asarray(w)[m], tie)
        if total > 0:
            num += wrong / count
            den += total / count
    return num / den if den > 0 else np.nan

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
    """NDCG@k with expected discounts per item (closed form, any group size)."""
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    n = len(y)
    if n == 0:
        return np.nan
    kk = n if k is None else min(k, n)
    disc = np.array([1.0 / math.log2(r + 2) if r < kk else 0.0 for r in range(n)])
    ideal = float(np.sum((2.0 ** np.sort(y)[::-1] - 1.0) * disc))
    if ideal <= 0:
        return np.nan
    dcg = 0.0
    for i in range(n):
        above = int(np.sum(s > s[i]))
        tied = int(np.sum(s == s[i]))
        dcg += (2.0 ** y[i] - 1.0) * disc[above:above + tied].mean()
    return dcg / ideal


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

"""Nightly days cut from MQ2008 (../shared/data): LETOR text days and (query, item) tuple days.

A day is a run of whole queries of Fold1 ``train.txt`` (``vali.txt`` for a day of other queries); an
*inverted* day has labels ``2 - rel`` (the order of every query reversed).  A tuple day (sgd-bilinear)
has one query row per query, all ones (so the bilinear model ``qᵀWd = (Wᵀ1)·d`` is a linear
ranker of the documents' 46 features), the documents as items, and a (q, better, worse) tuple for
(at most ``per_query``) pairs of documents of one query with different labels.
"""
from __future__ import annotations

import tarfile

import numpy as np

from streamrank.datasets._paths import data_path

ARCHIVE = data_path("letor", "MQ2008_QueryLevelNorm.tar.gz")


def read_queries(member="MQ2008/Fold1/train.txt"):
    """The member's lines, and the index of every query's first line (plus the end)."""
    with tarfile.open(ARCHIVE) as tf:
        lines = tf.extractfile(member).read().decode().splitlines(keepends=True)
    qids = [ln.split()[1] for ln in lines]
    starts = [i for i in range(len(lines)) if i == 0 or qids[i] != qids[i - 1]] + [len(lines)]
    return lines, starts


def text_day(path, lines, starts, q0, q1, invert=False):
    out = []
    for ln in lines[starts[q0]:starts[q1]]:
        lab, rest = ln.split(" ", 1)
        out.append(f"{2 - int(lab) if invert else lab} {rest}")
    path.write_text("".join(out))
    return path


def tuple_day(path, lines, starts, q0, q1, invert=False, per_query=30, seed=0):
    """An .npz tuple day of queries q0:q1 (rows local to the file, as the nightly ingests them)."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed + q0)
    rows, labels, tup = [], [], []
    for q in range(q1 - q0):
        first = len(rows)
        for ln in lines[starts[q0 + q]:starts[q0 + q + 1]]:
            parts = ln.split("#")[0].split()
            labels.append(int(parts[0]))
            x = np.zeros(46)
            for tok in parts[2:]:
                i, v = tok.split(":")
                x[int(i) - 1] = float(v)
            rows.append(x)
        idx = np.arange(first, len(rows))
        pairs = [(a, b) for a in idx for b in idx if labels[a] > labels[b]]
        if len(pairs) > per_query:
            pairs = [pairs[i] for i in rng.choice(len(pairs), per_query, replace=False)]
        tup += [(q, b, a) if invert else (q, a, b) for a, b in pairs]
    Q = sp.csr_matrix(np.ones((q1 - q0, 46)))
    D = sp.csr_matrix(np.asarray(rows))
    np.savez(path, Q_data=Q.data, Q_indices=Q.indices, Q_indptr=Q.indptr, Q_shape=Q.shape,
             D_data=D.data, D_indices=D.indices, D_indptr=D.indptr, D_shape=D.shape,
             tuples=np.asarray(tup, dtype=np.int64))
    return path

"""Class tuples ``(q, d+, d-)`` from labelled vectors (sparse-SGD paper, §IV.A).

"We construct training samples (q, d+, d-) where q and d+ are in the same
class while q and d- belong to different classes" (Chen, Bai, Qi, Lin &
Carbonell, ICDM 2010).  :func:`class_tuple_chunks` samples them uniformly:
q uniform over the queries, d+ uniform over the items of q's class (never q
itself when queries and items are the same set), d- uniform over the items of
the other classes.  Chunks are drawn from ``default_rng([seed, chunk])``, so
the tuples do not depend on how many are drawn at once, and memory is one
chunk.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

__all__ = ["class_tuple_chunks", "class_tuples", "check_class_tuples", "write_class_tuple_stores"]


def _class_index(labels_d):
    labels_d = np.asarray(labels_d)
    order = np.argsort(labels_d, kind="stable")
    classes, start, count = np.unique(labels_d[order], return_index=True, return_counts=True)
    return order, classes, start, count


def class_tuple_chunks(labels_q, labels_d, n_tuples: int, *, same_set: bool = False,
                       chunk_tuples: int = 1_000_000, random_state: int = 0) -> Iterator[np.ndarray]:
    """Yield int64 (k, 3) arrays of ``(query row, preferred item row, other item row)``.

    ``same_set=True`` when queries and items are the same rows (training
    tuples drawn within one set): then ``d+ != q``.  Queries whose class has
    no other item, and classes covering all items, cannot form a tuple; such
    queries are never drawn.
    """
    lq = np.asarray(labels_q)
    ld = np.asarray(labels_d)
    n_tuples = int(n_tuples)
    if n_tuples < 0:
        raise ValueError(f"n_tuples must be >= 0, got {n_tuples}")
    order, classes, start, count = _class_index(ld)
    cls_q = np.searchsorted(classes, lq)
    cls_q_ok = (cls_q < len(classes)) & (classes[np.minimum(cls_q, len(classes) - 1)] == lq)
    pos_count = np.where(cls_q_ok, count[np.minimum(cls_q, len(classes) - 1)], 0) - (1 if same_set else 0)
    usable = np.flatnonzero((pos_count > 0) & (pos_count + (1 if same_set else 0) < len(ld)))
    if n_tuples and usable.size == 0:
        raise ValueError("no query has both a same-class item and an other-class item")
    rank_q = np.empty(len(ld), dtype=np.int64)  # position of each item inside its class block
    rank_q[order] = np.arange(len(ld)) - np.repeat(start, count)
    done, c = 0, 0
    while done < n_tuples:
        rng = np.random.default_rng([int(random_state), 7_368_787, c])
        c += 1
        k = min(int(chunk_tuples), n_tuples - done)
        q = usable[rng.integers(0, usable.size, k)]
        cq = cls_q[q]
        # d+: uniform within the class (skip q itself when same_set)
        if same_set:
            r = (rng.random(k) * (count[cq] - 1)).astype(np.int64)
            pos = order[start[cq] + r]
            # shift past q itself inside its class block
            pos = np.where(r >= rank_q[q], order[start[cq] + r + 1], pos)
        else:
            pos = order[start[cq] + (rng.random(k) * count[cq]).astype(np.int64)]
        # d-: uniform over the items outside the class: skip the class block
        n_other = len(ld) - count[cq]
        r = (rng.random(k) * n_other).astype(np.int64)
        neg_rank = np.where(r < start[cq], r, r + count[cq])
        neg = order[np.minimum(neg_rank, len(ld) - 1)]
        yield np.stack([q, pos, neg], axis=1).astype(np.int64)
        done += k


def class_tuples(labels_q, labels_d, n_tuples: int, **kwargs) -> np.ndarray:
    """All tuples of :func:`class_tuple_chunks` in one array."""
    parts = list(class_tuple_chunks(labels_q, labels_d, n_tuples, **kwargs))
    return np.concatenate(parts) if parts else np.zeros((0, 3), dtype=np.int64)


def check_class_tuples(tuples, labels_q, labels_d, *, same_set=False) -> None:
    """Raise ``ValueError`` unless every tuple has q ~ d+ (same class) and q !~ d-."""
    t = np.asarray(tuples)
    lq, ld = np.asarray(labels_q), np.asarray(labels_d)
    bad = (lq[t[:, 0]] != ld[t[:, 1]]) | (lq[t[:, 0]] == ld[t[:, 2]])
    if same_set:
        bad |= t[:, 0] == t[:, 1]
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise ValueError(f"tuple {r} = {t[r].tolist()} breaks the class rule")


def write_class_tuple_stores(out_dir, X_train, y_train, X_test, y_test, *, n_train_tuples: int,
                             n_test_tuples: int, random_state: int = 0, chunk_tuples: int = 1_000_000,
                             classes=None, overwrite: bool = False) -> dict:
    """Write train / test TupleStores of class tuples and the labels under ``out_dir``.

    * ``train.zarr``: Q = D = the training vectors; tuples within the training set;
    * ``test.zarr``: Q = the test vectors, D = the training vectors (a test
      query ranks the training collection, as in retrieval);
    * ``labels_train.npy``, ``labels_test.npy`` (int64, ``np.save``, no pickle)
      and ``classes.txt`` (one class name per line) when ``classes`` is given.

    Tuples are appended in chunks of ``chunk_tuples`` (``rows="global"``), so
    memory is the vectors plus one chunk.  Returns the paths.
    """
    import os

    from ..io.tuple_store import TupleStore

    os.makedirs(out_dir, exist_ok=True)
    y_train = np.asarray(y_train, dtype=np.int64)
    y_test = np.asarray(y_test, dtype=np.int64)
    paths = {}
    empty = np.zeros((0, 3), dtype=np.int64)
    for name, Q, lq, n, same, seed in (("train", X_train, y_train, n_train_tuples, True, random_state),
                                       ("test", X_test, y_test, n_test_tuples, False, int(random_state) + 1)):
        path = os.path.join(out_dir, f"{name}.zarr")
        store = TupleStore.create(path, X_train.shape[1], X_train.shape[1], overwrite=overwrite)
        store.append(Q, X_train, empty, batch_id=f"{name}-vectors")
        for i, t in enumerate(class_tuple_chunks(lq, y_train, n, same_set=same, chunk_tuples=chunk_tuples,
                                                 random_state=seed)):
            store.append(None, None, t, rows="global", batch_id=f"{name}-tuples-{i}")
        paths[name] = path
    np.save(os.path.join(out_dir, "labels_train.npy"), y_train, allow_pickle=False)
    np.save(os.path.join(out_dir, "labels_test.npy"), y_test, allow_pickle=False)
    if classes is not None:
        with open(os.path.join(out_dir, "classes.txt"), "w") as f:
            f.write("\n".join(str(c) for c in classes) + "\n")
    return paths

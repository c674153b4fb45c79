"""What a group is — the one place that defines it.

A **group** is the set of rows a learner ranks within: its Laplacian couples
only rows of one group, metrics by query score one group at a time, and
cross-validation folds never split one.

Group identity
--------------
``group_identity="batch"`` (the default of new stores)
    A group is **(batch, qid)**.  The same query id in a later batch is a
    *new* group: click logs see the query "cheap flights" every day, and each
    day's impressions are ranked within that day.  Within one batch a query's
    rows must be contiguous (a second run of the same id is an error).

``group_identity="global"``
    A query id is one group in the whole store: appending an id that is
    already there is an error (``qid ... is already in the store``).  Stores
    written before this option existed behave this way.

The **batch** of a commit is its ``batch_id`` up to the first ``#``:
``streamrank ingest`` writes a large file as commits ``<file-id>#0``,
``<file-id>#1``, ..., all of batch ``<file-id>``, so a query is checked
across the pieces of its file; the nightly pipeline's batch is its day.  An
append without ``batch_id`` is a batch of its own.

Everything follows the same rule:

* :class:`~streamrank.GroupStore` — ``store.qid`` has one entry per group (an
  id recurs once per batch it appears in); ``store.group_batches()`` gives
  each group's batch; ``append`` checks the rule;
* in-memory input (``fit(X, y, qid)``, ``sr.as_source``) is one batch: a query
  id must be contiguous; ``partial_fit`` calls are separate batches (each call
  brings new groups);
* metrics by query (``per_query=True`` / ``MetricResult.qid``) report one value
  per group, in store order, keyed by the original id — with
  ``group_identity="batch"`` an id may appear once per batch;
* ``streamrank info`` prints the store's identity; the nightly pipeline
  appends each day as its own batch.

Cost of the check
-----------------
Each append compares the new block's ids with the committed ids *in scope*
(the same batch, or the whole store when global).  Committed ids are never
held in memory: their int64 keys (:mod:`streamrank._qid`) are streamed from
the store's ``qid`` array in pieces of ``SCAN_PIECE`` entries (8 MiB) and
matched against the new block's sorted keys (``np.isin``), so memory is
O(piece + block).  With batch identity the scan covers only the current
batch's earlier pieces (usually nothing).  With global identity at 10⁸
groups it reads 800 MB of keys (less compressed) per append — about 1–3 s
from the page cache at numpy's merge speed, and no extra memory; a key
match is confirmed on the stored original id (one group read).
"""
from __future__ import annotations

import numpy as np

__all__ = ["GROUP_IDENTITIES", "SCAN_PIECE", "batch_of", "check_group_identity", "scope_ranges",
           "scan_for_keys", "qid_kind_of", "offending_row"]

GROUP_IDENTITIES = ("batch", "global")
#: committed keys read per step of the duplicate check (1M int64 = 8 MiB)
SCAN_PIECE = 1 << 20


def check_group_identity(value) -> str:
    if value not in GROUP_IDENTITIES:
        raise ValueError(f"group_identity must be one of {GROUP_IDENTITIES}, got {value!r}")
    return value


def batch_of(batch_id, entry=None):
    """The batch a commit belongs to: ``batch_id`` up to the first ``#``; no id: the commit alone."""
    if batch_id is None:
        return None if entry is None else f"<unnamed commit at rows {entry['rows'][0]}>"
    return str(batch_id).split("#", 1)[0]


def scope_ranges(log, batch_id, identity: str) -> list[tuple[int, int]]:
    """Group ranges a new commit's ids must not repeat."""
    if identity == "global":
        total = log[-1]["groups"][1] if log else 0
        return [(0, total)] if total else []
    if batch_id is None:
        return []
    b = batch_of(batch_id)
    return [tuple(e["groups"]) for e in log
            if e.get("batch_id") is not None and batch_of(e["batch_id"]) == b and e["groups"][1] > e["groups"][0]]


def scan_for_keys(qid_array, ranges, sorted_keys: np.ndarray):
    """Yield ``(store group, indices into sorted_keys)`` for every committed key equal to a new one.

    Reads ``qid_array`` in pieces of :data:`SCAN_PIECE` within ``ranges``.
    """
    if not len(sorted_keys):
        return
    for a, b in ranges:
        for c in range(int(a), int(b), SCAN_PIECE):
            piece = np.asarray(qid_array[c : min(c + SCAN_PIECE, int(b))], dtype=np.int64)
            hit = np.flatnonzero(np.isin(piece, sorted_keys))
            for j in hit:
                k = piece[j]
                lo = np.searchsorted(sorted_keys, k, side="left")
                hi = np.searchsorted(sorted_keys, k, side="right")
                yield c + int(j), np.arange(lo, hi)


def qid_kind_of(group_qid: np.ndarray, store_kind, path) -> str:
    """``"int"`` or ``"str"`` for a block of group ids; a store holds one kind, chosen by its first append."""
    q = np.asarray(group_qid)
    if q.dtype.kind in "iu":
        kind = "int"
    elif all(isinstance(v, str) for v in q.tolist()):
        kind = "str"
    else:
        bad = next(v for v in q.tolist() if not isinstance(v, str))
        raise TypeError(f"a GroupStore holds integer or string query ids; got {type(bad).__name__} {bad!r} "
                        "(convert ids to str first)")
    if store_kind is not None and kind != store_kind and len(q):
        raise TypeError(f"the store at {path} holds {store_kind} query ids; got {kind} ids "
                        f"(e.g. {q[0]!r}); a store keeps one kind")
    return kind


def offending_row(store, qid) -> int:
    """The row of a refused chunk to name in the error: the first row of a run of ``qid`` (a chunk's
    query ids, in row order) whose id is already in ``store.qid``, or that repeats an earlier run of
    the chunk (a query's rows must be contiguous); 0 if neither (the error is about something else).

    An ingest that reports a line number (``streamrank ingest``, the nightly pipeline) calls this
    after ``store.append`` refused the chunk, to point at the line of that row.

    >>> class Store:  # anything with the committed group ids as ``qid``
    ...     qid = [7]
    >>> offending_row(Store(), [1, 1, 2, 1]), offending_row(Store(), [1, 7, 7]), offending_row(Store(), [1, 2])
    (3, 1, 0)
    """
    qid = np.asarray(qid)
    if not len(qid):
        return 0
    starts = np.flatnonzero(np.r_[True, qid[1:] != qid[:-1]])
    runs = qid[starts]
    bad = np.isin(runs, np.asarray(store.qid))
    _, first, count = np.unique(runs, return_index=True, return_counts=True)
    again = np.zeros(len(runs), dtype=bool)
    seen = np.zeros(len(runs), dtype=bool)
    seen[first[count > 1]] = True          # first run of a repeated qid: its later runs are the problem
    again[np.isin(runs, runs[seen])] = True
    again[first] = False
    hit = np.flatnonzero(bad | again)
    return int(starts[hit[0]]) if hit.size else 0

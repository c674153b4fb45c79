"""Copying one :class:`~streamrank.io.tuple_store.TupleStore` into another in bounded, resumable pieces.

Used by ``streamrank ingest`` (a tuple store given as a source) and by the nightly pipeline (a day of
tuples given as a store directory).  Memory is one piece (``rows_per_append`` rows of Q and D, or
``8 * rows_per_append`` tuples), whatever the size of the source; every piece is one atomic,
idempotent append, so a killed copy is completed by running it again.
"""
from __future__ import annotations

import numpy as np

__all__ = ["TUPLES_PER_ROW_BUDGET", "copy_tuple_store"]

#: a tuple append carries up to 8 x ``rows_per_append`` tuples (24 B each)
TUPLES_PER_ROW_BUDGET = 8


def copy_tuple_store(source, target, base_id, counts, *, rows_per_append=65_536, progress=None):
    """Append every batch of the TupleStore ``source`` to ``target`` in bounded pieces.

    Source batch i becomes appends ``{base_id}#{i}.{j}``: first its ``Q`` and
    ``D`` rows, ``rows_per_append`` at a time, then its tuples,
    ``8 * rows_per_append`` at a time (``rows="global"``, translated by the
    target's row counts where the copy began), the first tuple piece riding
    on the last row piece — a batch that fits is one append.  Memory is one
    piece, whatever the size of the source.  Each append is atomic and
    idempotent by its id: a killed copy leaves the target at its last
    committed piece and a rerun skips the committed pieces (the offsets come
    from the logged start of piece ``#0.0``) and completes the copy.

    ``counts`` (a dict with the keys ``tuples``, ``skipped_tuples``,
    ``batches``, ``skipped``) is increased by what was appended and what was
    already there; ``progress(n)``, if given, is called with the tuples of
    each piece.
    """
    import scipy.sparse as sp

    P = max(1, int(rows_per_append))
    T = P * TUPLES_PER_ROW_BUDGET
    first = next((e for e in target.log if e.get("batch_id") == f"{base_id}#0.0"), None)
    if first is not None:
        off_q, off_d = first["q_rows"][0], first["d_rows"][0]
    else:
        off_q, off_d = target.n_queries, target.n_items
    shift = np.array([off_q, off_d, off_d], dtype=np.int64)
    present = {e.get("batch_id") for e in target.log}

    def rows(side, r0, r1, nf):
        if r1 <= r0:
            return None
        ip, ind, dat = source._read_piece(side, r0, r1)
        return sp.csr_matrix((dat, ind, ip), shape=(r1 - r0, nf))

    for i, e in enumerate(source.log):
        (q0, q1), (d0, d1), (l0, l1) = e["q_rows"], e["d_rows"], e["tuples"]
        n_row = max(-(-(q1 - q0) // P), -(-(d1 - d0) // P), 1)
        n_tup = max(-(-(l1 - l0) // T), 1)
        appended = False
        for j in range(n_row + n_tup - 1):
            k = j - (n_row - 1)
            bid = f"{base_id}#{i}.{j}"
            if bid in present:   # committed by an earlier (maybe killed) copy: not even read again
                n = max(0, min(l0 + (k + 1) * T, l1) - (l0 + k * T)) if k >= 0 else 0
                counts["skipped_tuples"] += n
                if progress is not None:
                    progress(n)
                continue
            Q = rows("Q", q0 + j * P, min(q0 + (j + 1) * P, q1), source.n_query_features)
            D = rows("D", d0 + j * P, min(d0 + (j + 1) * P, d1), source.n_item_features)
            if k >= 0:
                t0, t1 = l0 + k * T, min(l0 + (k + 1) * T, l1)
                tup, mag = source.read_tuples(t0, t1)
                tup = tup + shift
            else:
                t0 = t1 = l0
                tup, mag = np.zeros((0, 3), np.int64), np.zeros(0)
            done = target.append(Q, D, tup, magnitudes=mag, batch_id=bid, rows="global")
            appended |= bool(done)
            counts["tuples" if done else "skipped_tuples"] += t1 - t0
            if progress is not None:
                progress(t1 - t0)
        counts["batches" if appended else "skipped"] += 1

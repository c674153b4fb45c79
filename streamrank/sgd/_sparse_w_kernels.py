"""Numba kernels of the sparse bilinear SGD ranker: W as rows in a pool.

W (n_rows query features x n_cols item features) is held row by row.  Row i
is a run of column indices ``pc[p : p + n]`` (int32, in insertion order) and
values ``pv[p : p + n]`` (float64) inside one pool; ``meta[i] = (p, n, cap,
stamp)`` gives its start, length, capacity and the sweep index of the
shrinkage last applied to the whole row.  A row that outgrows its capacity
moves to a segment of the next power of two: a segment released earlier
(free lists by size, :func:`_alloc`) or one at the end of the pool.  When the
end is reached the caller repacks the pool (``_table.SparseW``), so memory
is proportional to the entries stored, plus 32 bytes a row.

Why rows.  An SGD step on the tuple (q, d+, d-) touches the entries W[i, j]
for i in q and j in delta = d+ - d-.  With delta scattered into a dense
column vector (``dense[j] = delta_j``, ``slot[j]`` = its position, and one
bit per column in ``mask``), a step is one sequential pass over each touched
row (:func:`_step_row`) that adds the row's part of the margin and writes
its update in the same read, then appends the columns of delta the row
lacks (:func:`_append_missing`): sequential reads and writes of a few rows,
instead of nnz(q) x nnz(delta) random probes of a hash table far larger than
the caches (the structure streamrank used first; 3x slower on 20 Newsgroups
tuples, see ``benchmarks/README.md``).  A pass costs the row's length rather
than nnz(delta): rows much longer than the tuples (a W far denser than the
data) are the case where a hash table would win.

The update is written before the hinge's verdict is known (the margin needs
the whole pass) -- it is active for 98 % of the 20 Newsgroups steps -- and
taken back from a log of the overwritten values when it is not
(:func:`_undo_rows`): W is exactly what a margin pass followed by a
conditional update gives, and each row is read once instead of twice.

Cumulative L1 shrinkage (paper eq. 7 and Algorithm 1, step 4): every T steps
every entry is soft-thresholded by ``thr_k = l1 * sum(eta_s, s = t-T+1..t)``.
Consecutive soft thresholds compose, ``soft(soft(w, a), b) = soft(w, a + b)``,
so the kernels keep the running sums ``S[k] = thr_1 + ... + thr_k`` and one
stamp per ROW: every entry of row i is ``soft(pv, S[K] - S[stamp_i])``.  A
step's pass reads the whole row anyway, so it brings every entry of the row
up to date, drops the ones that reached zero (dead whether or not the step
happens) and sets the stamp to K.  Rows not touched for a long time keep
their dead entries until a flush of every row, run once the stored entries
have doubled since the last flush
(O(1) amortised per insertion, memory O(nnz)).  ``lazy=False`` runs the
literal sweep of every entry at every T-th step instead; tests check the two
against each other and against a dense numpy implementation of Algorithm 1.

Every function here is a jitted function of arrays and scalars (CSR enters as
``indptr, indices, data``); state that must survive between calls lives in
the small arrays ``istate`` / ``fstate`` owned by the Python learner:

* ``istate = [t, K, count, n_updates, n_active, t_refit, count_after_last_flush,
  pool_used, pool_garbage, pool_needed, undo_log_needed]``
* ``fstate = [window]`` (sum of eta since the last sweep)
"""
from __future__ import annotations

import numpy as np

from streamrank._numba import jit

from ._sparse_row_kernels import merge_diff as _merge_diff
from ._row_pool_kernels import (  # noqa: F401  (the pool's layout and maintenance, re-exported)
    I_ACTIVE, I_COUNT, I_FLUSHED, I_GARBAGE, I_K, I_NEED, I_NEED_LOG, I_T, I_TREFIT, I_UPDATES, I_USED,
    M_CAP, M_LEN, M_START, M_STAMP, MIN_ROW_CAP, N_CLASSES, N_ISTATE, _alloc, _moves, _release, _shrink_row,
    _sweep_rows, capacity_total, empty_free_lists, flush_rows, packed_size, repack, row_capacity, rows_to_coo,
    set_rows, stored_csr,
)

_prefetch = None     # bound to the llvm.prefetch intrinsic when a kernel here is first made (numba import)


def _numba_globals():
    """The numba-only names this module's kernels use (:func:`streamrank._numba._bind_globals`)."""
    from ._prefetch import prefetch

    return {"_prefetch": prefetch}


_u = np.uint64  # an index numba needs no wraparound code for (see _step_row)

__all__ = [
    "I_T", "I_K", "I_COUNT", "I_UPDATES", "I_ACTIVE", "I_TREFIT", "I_FLUSHED", "I_USED", "I_GARBAGE", "I_NEED",
    "I_NEED_LOG",
    "N_ISTATE", "M_START", "M_LEN", "M_CAP", "M_STAMP", "LR_INVSQRT", "LR_CONSTANT", "MIN_ROW_CAP",
    "N_CLASSES", "empty_free_lists",
    "row_capacity",
    "capacity_total",
    "sgd_steps",
    "flush_rows",
    "packed_size",
    "repack",
    "set_rows",
    "rows_to_coo",
    "stored_csr",
    "score_rows",
]

LR_INVSQRT, LR_CONSTANT = 0, 1


@jit
def _shrink(v, sh):
    """``soft(v, sh)`` without a branch: ``v - clip(v, -sh, sh)`` (the same float result)."""
    c = v if v < sh else sh
    c = c if c > -sh else -sh
    return v - c


@jit
def _row_dot(pc, pv, p, n, sh, dense):
    """sum_k soft(W[i, c_k], sh) dense[c_k] over row i = (pc, pv)[p:p+n] (any column order).

    Four partial sums (entries k = 0, 1, 2, 3 mod 4), added at the end: one
    sum would make every product wait for the previous addition.
    """
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    e = p + n
    k = p
    if sh > 0.0:
        while k + 4 <= e:
            a0 += _shrink(pv[_u(k)], sh) * dense[_u(pc[_u(k)])]
            a1 += _shrink(pv[_u(k + 1)], sh) * dense[_u(pc[_u(k + 1)])]
            a2 += _shrink(pv[_u(k + 2)], sh) * dense[_u(pc[_u(k + 2)])]
            a3 += _shrink(pv[_u(k + 3)], sh) * dense[_u(pc[_u(k + 3)])]
            k += 4
        while k < e:
            a0 += _shrink(pv[_u(k)], sh) * dense[_u(pc[_u(k)])]
            k += 1
    else:
        while k + 4 <= e:
            a0 += pv[_u(k)] * dense[_u(pc[_u(k)])]
            a1 += pv[_u(k + 1)] * dense[_u(pc[_u(k + 1)])]
            a2 += pv[_u(k + 2)] * dense[_u(pc[_u(k + 2)])]
            a3 += pv[_u(k + 3)] * dense[_u(pc[_u(k + 3)])]
            k += 4
        while k < e:
            a0 += pv[_u(k)] * dense[_u(pc[_u(k)])]
            k += 1
    return (a0 + a1) + (a2 + a3)


@jit
def _step_row(meta, pc, pv, i, sh, K, g, dense, slot, mask, hit, refit, dst, lpos, lval, u):
    """Row i <- soft(row i, sh) + g * delta on delta's columns it holds, optimistically.

    Returns (dot, u, removed, zeros).

    One pass over the row does both halves of an SGD step:

    * ``dot = sum_k soft(W[i, c_k], sh) * delta_{c_k}``, row i's part of the
      margin ``q^T W delta``, from the values *before* the update;
    * the update itself, written before the caller knows whether the hinge is
      active (it mostly is: 98 % of the steps on 20 Newsgroups top words).  For each
      entry in a column of delta the pass logs its position and value before
      the update in ``lpos[u], lval[u]`` (u advances), so that
      :func:`_undo_rows` can take the update back exactly.

    ``dense[j] = delta_j`` and ``slot[j] = b + 1`` for ``j = dj[b]`` (0
    elsewhere).  The pass reads at the row's start and writes at ``dst`` (the
    row's own segment, or a smaller one it moves to; a write never overtakes a
    read), drops the entries the shrinkage took to zero (those are dead
    whether or not the step happens; a dead entry in a column of delta is
    then missing, and its append writes the same value ``0 + g * delta_j``)
    and marks in ``hit`` (tag ``hit[0]``) the live columns of delta it found;
    :func:`_append_missing` adds the others.  A found entry stays even when
    the update takes it to exactly 0 (the step might be undone, restoring a
    nonzero value); ``zeros`` counts those, and the caller drops them.
    ``refit``: nothing shrinks and exact zeros stay (the support is fixed).
    """
    p = meta[i, M_START]
    n = meta[i, M_LEN]
    tag = hit[0] + 1
    hit[0] = tag  # the tag only grows
    a0 = 0.0
    zeros = 0
    w = dst
    k = p
    # the loops shrink without a test (soft(v, 0) is v exactly) and read these two
    # locals rather than ``refit``: 6-18 % faster than testing sh and refit per entry
    drop = not refit
    keep_all = refit
    # indices are cast to unsigned (_u) in the loops: numba then skips its
    # negative-index wraparound code, which made the row passes 2x slower.
    # Few entries of a row are in delta's columns (7 of 858 per tuple on 20NG);
    # the bit mask (L1-resident) says which, so the others never touch dense.
    if dst == p:
        # in place: only the values change until the first entry drops out
        w = p + n
        while k < p + n:
            c = _u(pc[_u(k)])
            v = _shrink(pv[_u(k)], sh)
            if v == 0.0 and drop:
                # dead (also in a column of delta: then it counts as missing, and
                # _append_missing writes the same 0 + g * delta_j when the step holds)
                w = k
                k += 1
                break
            v1 = v
            if ((mask[c >> _u(6)] >> (c & _u(63))) & _u(1)) != 0:
                # a column of delta: margin, update, found, logged
                x = dense[c]
                a0 += v * x
                v1 = v + g * x
                hit[_u(slot[c])] = tag
                lpos[_u(u)] = k
                lval[_u(u)] = v
                u += 1
                zeros += v1 == 0.0
            pv[_u(k)] = v1
            k += 1
    # compaction (or a copy into the new segment): columns move too.  The same update
    # as the loop above, written out again on purpose: with the update in a shared @jit
    # helper the whole step ran 1.5x slower (20NG tuples, 111k -> 75k tuples/s)
    while k < p + n:
        c = _u(pc[_u(k)])
        v = _shrink(pv[_u(k)], sh)
        live = keep_all | (v != 0.0)
        v1 = v
        # the mask first: it is rarely set, whereas a third of the entries can be dead
        if ((mask[c >> _u(6)] >> (c & _u(63))) & _u(1)) != 0 and live:
            x = dense[c]
            a0 += v * x
            v1 = v + g * x
            hit[_u(slot[c])] = tag
            lpos[_u(u)] = w
            lval[_u(u)] = v
            u += 1
            zeros += v1 == 0.0
        pc[_u(w)] = c
        pv[_u(w)] = v1
        w += live
        k += 1
    meta[i, M_START] = dst
    meta[i, M_LEN] = w - dst
    meta[i, M_STAMP] = K
    return a0, u, n - (w - dst), zeros


@jit
def _append_missing(meta, pc, pv, i, g, dj, dx, nd, hit, free, istate, lpos, u0, u):
    """Append ``g * delta_j`` to row i for the columns j of delta its last pass did not find; returns how many.

    The pass (:func:`_step_row`) marked the columns it found with the tag
    ``hit[0]`` and logged each of them once (``lpos[u0:u]``), so
    ``nd - (u - u0)`` columns are missing.  When the row's segment is too
    small for them, the row first moves to a segment of
    ``row_capacity(n + missing)`` (its logged positions move with it): rows
    move only when they really grow past their segment, not whenever
    nnz(delta) more might not fit.
    """
    missing = nd - (u - u0)
    if missing == 0 or g == 0.0:
        return 0
    tag = hit[0]
    p = meta[i, M_START]
    n = meta[i, M_LEN]
    cap = meta[i, M_CAP]
    if n + missing > cap:
        new_cap = row_capacity(n + missing)
        seg = _alloc(pv, free, istate, new_cap)
        for k in range(n):
            pc[_u(seg + k)] = pc[_u(p + k)]
            pv[_u(seg + k)] = pv[_u(p + k)]
        for e in range(u0, u):
            lpos[_u(e)] += seg - p
        if cap > 0:
            _release(pv, free, istate, p, cap)
        p = seg
        meta[i, M_START] = seg
        meta[i, M_CAP] = new_cap
    w = p + n
    for b in range(nd):
        if hit[_u(b + 1)] != tag:
            v = g * dx[_u(b)]
            if v != 0.0:  # (0 only when the product underflows)
                pc[_u(w)] = dj[_u(b)]
                pv[_u(w)] = v
                w += 1
    meta[i, M_LEN] = w - p
    return w - p - n


@jit
def sgd_steps(meta, pc, pv, S, istate, fstate,
              qp, qi, qx, pp, pi, px, mp, mi, mx,
              r0, r1, eta0, lr_code, l1, T, lazy, refit, dj, dx, dense, slot, mask, hit, free,
              lpos, lval, kept):
    """One SGD step (Algorithm 1) per tuple row ``r0 <= r < r1``; returns the next row.

    Tuple r is (Q[r], D_pos[r], D_neg[r]).  With delta = d+ - d-, the margin is
    ``s = q^T W delta``; if ``1 - s > 0`` (hinge loss, eq. 2) the subgradient
    step is ``W += eta_t q delta^T`` over the nnz(q) x nnz(delta) touched
    entries, with ``eta_t = eta0 / sqrt(t)`` (``lr_code == LR_INVSQRT``) or
    ``eta0``.  Every ``T`` steps the cumulative threshold
    ``l1 * sum(eta_k, k = t-T+1..t)`` is applied (eq. 7): lazily through ``S``
    or, with ``lazy == False``, by sweeping every row.

    Each touched row is read once: :func:`_step_row` adds its part of the
    margin and writes its update in the same pass, and when the hinge turns
    out inactive the logged values are put back (:func:`_undo_rows`), so W
    is exactly what a margin pass followed by a conditional update gives.

    ``refit``: the refit phase (eq. 8) -- no L1, no sweeps, updates restricted
    to the entries present (the support Omega; the caller flushes first), the
    step size continues the schedule at ``t + t_refit``.

    The kernel returns early (a row < r1) when the pool might not have room
    for the rows the next tuple moves (``istate[I_NEED]`` entries at the end
    of the pool) or the undo log ``lpos`` / ``lval`` is shorter than
    ``istate[I_NEED_LOG]``; the caller repacks (and grows) the pool or the log
    and calls again.  The caller also keeps ``len(S) > K + (r1 - r0) // T + 1``.
    ``free`` holds the heads of the free lists of :func:`_alloc`.
    ``dj`` / ``dx`` hold at least nnz(delta) entries, ``hit`` one more;
    ``kept`` at least nnz(q); ``dense`` (float64) and ``slot`` (int64) have
    one entry per column, ``mask`` (uint64) one bit per column, and all are
    zeros (they are again on return).
    """
    P = pc.shape[0]
    mflat = meta.reshape(-1)
    r = r0
    while r < r1:
        nd = _merge_diff(pp, pi, px, mp, mi, mx, r, dj, dx)
        q0 = qp[r]
        q1 = qp[r + 1]
        # room at the pool's end for every touched row that might move (the free
        # lists are not counted: a row's new size is known only after its pass),
        # and in the undo log for every entry of delta's columns in those rows
        need = 0
        lneed = 1
        nq = q1 - q0
        for a in range(q0, q1):
            i = qi[a]
            n = meta[i, M_LEN]
            lneed += n if n < nd else nd
            if not refit:
                cap = row_capacity(n + nd)
                if _moves(n + nd, cap, meta[i, M_CAP]):
                    need += cap
        if istate[I_USED] + need > P or lneed > lpos.shape[0]:
            istate[I_NEED] = need
            istate[I_NEED_LOG] = lneed
            return r
        if refit:
            istate[I_TREFIT] += 1
            tt = istate[I_T] + istate[I_TREFIT]
        else:
            istate[I_T] += 1
            tt = istate[I_T]
        if lr_code == LR_INVSQRT:
            eta = eta0 / np.sqrt(np.float64(tt))
        else:
            eta = eta0
        K = istate[I_K]
        SK = S[K]
        s = 0.0
        if r + 1 < r1:
            # the next tuple's row descriptors (fetching its rows too did not pay:
            # at the paper's density they exceed the cache, 5 % slower)
            for a in range(qp[r + 1], qp[r + 2]):
                _prefetch(mflat, 4 * qi[a])
        if nd > 0:
            # delta scattered into a dense column vector, then one pass over each
            # query row: margin q^T W delta and the (optimistic) update together
            for b in range(nd):
                j = _u(dj[_u(b)])
                dense[j] = dx[_u(b)]
                slot[j] = b + 1
                mask[j >> _u(6)] |= _u(1) << (j & _u(63))
            u = 0
            removed = 0
            zeros = 0
            for a in range(q0, q1):
                if a + 1 < q1:
                    # the rows are scattered over the pool: fetch the next one's first lines
                    i1 = qi[a + 1]
                    p1 = meta[i1, M_START]
                    n1 = meta[i1, M_LEN]
                    _prefetch(pc, p1)
                    _prefetch(pv, p1)
                    if n1 > 8:
                        _prefetch(pv, p1 + 8)
                    if n1 > 16:
                        _prefetch(pc, p1 + 16)
                        _prefetch(pv, p1 + 16)
                    if n1 > 24:
                        _prefetch(pv, p1 + 24)
                i = qi[a]
                g = eta * np.float64(qx[a])
                st = meta[i, M_STAMP]
                sh = SK - S[st] if st != K else 0.0
                n = meta[i, M_LEN]
                old = -1
                old_cap = meta[i, M_CAP]
                cap = row_capacity(n + nd)
                if refit or 4 * cap > old_cap:
                    dst = meta[i, M_START]  # in place (the appends move the row if it outgrows its segment)
                else:  # the row uses a quarter or less of its segment: copied into a smaller one
                    old = meta[i, M_START]
                    dst = _alloc(pv, free, istate, cap)
                    meta[i, M_CAP] = cap
                u0 = u
                dot, u, rm, z = _step_row(meta, pc, pv, i, sh, K, g, dense, slot, mask, hit, refit, dst,
                                          lpos, lval, u)
                s += np.float64(qx[a]) * dot
                if old >= 0 and old_cap > 0:
                    _release(pv, free, istate, old, old_cap)
                kept[a - q0] = meta[i, M_LEN]
                if not refit:
                    _append_missing(meta, pc, pv, i, g, dj, dx, nd, hit, free, istate, lpos, u0, u)
                removed += rm
                zeros += z
            added = 0
            if 1.0 - s > 0.0:
                for a in range(q0, q1):
                    added += meta[qi[a], M_LEN] - kept[a - q0]
                # counters kept in registers in the loop, stored once per tuple
                istate[I_UPDATES] += u if refit else nq * nd
            else:
                _undo_rows(meta, pc, pv, qi, q0, q1, lpos, lval, u, kept)
                zeros = 0
            if zeros > 0 and not refit:  # entries the update took to exactly 0 (rare)
                for a in range(q0, q1):
                    removed += _shrink_row(meta, pc, pv, qi[a], 0.0, K)
            istate[I_COUNT] += added - removed
            for b in range(nd):
                j = _u(dj[_u(b)])
                dense[j] = 0.0
                slot[j] = 0
                mask[j >> _u(6)] = 0
        if 1.0 - s > 0.0:
            istate[I_ACTIVE] += 1
        if not refit:
            fstate[0] += eta
            if tt % T == 0:
                thr = l1 * fstate[0]
                fstate[0] = 0.0
                if lazy:
                    S[K + 1] = SK + thr
                    istate[I_K] = K + 1
                    # rows not touched since keep their dead entries until a flush;
                    # flushing whenever the stored entries have doubled since the last
                    # flush keeps memory O(nnz) at O(1) amortised per insertion
                    if thr > 0.0 and istate[I_COUNT] >= 2 * istate[I_FLUSHED] + 64:
                        istate[I_COUNT] -= flush_rows(meta, pc, pv, S, K + 1)
                        istate[I_FLUSHED] = istate[I_COUNT]
                elif thr > 0.0:
                    istate[I_COUNT] -= _sweep_rows(meta, pc, pv, thr, K)
        r += 1
    return r


@jit
def _undo_rows(meta, pc, pv, qi, q0, q1, lpos, lval, u, kept):
    """Take back the update :func:`_step_row` wrote into the rows ``qi[q0:q1]``.

    Entries of delta's columns get their logged values back (the row shrunk
    and brought up to date, which is what W is without the step; the pass
    logged live entries only, so no value put back is 0 outside the refit)
    and the appended entries go.
    """
    for e in range(u):
        pv[_u(lpos[_u(e)])] = lval[_u(e)]
    for a in range(q0, q1):
        meta[qi[a], M_LEN] = kept[a - q0]


@jit
def score_rows(meta, pc, pv, S, K, qp, qi, qx, dp, di, dx, dense, out):
    """out[r] = q_r^T W d_r for row-aligned CSR Q, D, with pending shrinkage.

    ``dense`` (float64, one entry per column) is all zeros, and is again on return.
    """
    SK = S[K]
    for r in range(out.shape[0]):
        for b in range(dp[r], dp[r + 1]):
            dense[di[b]] += np.float64(dx[b])
        s = 0.0
        for a in range(qp[r], qp[r + 1]):
            i = qi[a]
            st = meta[i, M_STAMP]
            sh = SK - S[st] if st != K else 0.0
            s += np.float64(qx[a]) * _row_dot(pc, pv, meta[i, M_START], meta[i, M_LEN], sh, dense)
        for b in range(dp[r], dp[r + 1]):
            dense[di[b]] = 0.0
        out[r] = s

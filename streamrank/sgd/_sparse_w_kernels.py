"""Numba kernels of the sparse bilinear SGD ranker: a hash table for W.

W (n_query_features x n_item_features) is held as an open-addressing hash
table with linear probing in ONE float64 array ``tab`` of ``2 * cap`` words
(``cap`` a power of two).  Slot s is the 16-byte pair

* ``tab.view(int64)[2s]``: ``(key << STAMP_BITS) | stamp`` or ``EMPTY`` (-1),
  with ``key = i * n_cols + j`` and ``stamp`` the index k of the last
  shrinkage sweep applied to the entry;
* ``tab[2s + 1]``: the value of W_ij as of that sweep.

Key, stamp and value share a cache line, so a lookup costs one memory
access (``n_rows * n_cols < 2**43``, ``stamp < 2**20``: the caller restarts
the sweep counter before it gets there).  Memory is proportional to nnz(W)
(the caller keeps the load between ``MIN_LOAD`` and ``max_load``).  Deleted
entries are removed by backward-shift deletion, so there are no tombstones:
an entry whose value becomes exactly zero disappears from the table.

Cumulative L1 shrinkage (paper eq. 7 and Algorithm 1, step 4): every T steps
every entry is soft-thresholded by ``thr_k = l1 * sum(eta_s, s = t-T+1..t)``.
Consecutive soft thresholds compose, ``soft(soft(w, a), b) = soft(w, a + b)``,
so instead of sweeping the table the kernels keep the running sums
``S[k] = thr_1 + ... + thr_k`` and bring an entry up to date when it is read
(``w <- soft(w, S[K] - S[stamp])``).  Entries that reach zero without being
touched are dropped by a flush of the whole table at a sweep once the table
has doubled since the last flush (O(1) amortised per insertion, memory
O(nnz)).  ``lazy=False`` runs the literal sweep of every entry instead;
tests check the two against each other and against a dense numpy
implementation of Algorithm 1.

Every function here is a jitted function of arrays and scalars (CSR enters
as ``indptr, indices, data``); state that must survive between calls lives
in the small arrays ``istate`` / ``fstate`` owned by the Python learner:

* ``istate = [t, K, count, n_updates, n_active, t_refit, count_after_last_flush]``
* ``fstate = [window]`` (sum of eta since the last sweep)
"""
from __future__ import annotations

import llvmlite
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from streamrank._numba import jit

from ._sparse_row_kernels import merge_diff as _merge_diff
from ._sparse_row_kernels import soft as _soft

__all__ = [
    "EMPTY", "STAMP_BITS", "MAX_STAMP", "MAX_KEY",
    "I_T", "I_K", "I_COUNT", "I_UPDATES", "I_ACTIVE", "I_TREFIT", "I_FLUSHED", "N_ISTATE",
    "LR_INVSQRT", "LR_CONSTANT",
    "find_slot",
    "insert_keys",
    "delete_key",
    "rehash",
    "sgd_steps",
    "threshold_all",
    "table_to_coo",
    "table_entries",
    "score_rows",
    "table_values",
]

EMPTY = -1
STAMP_BITS = 20
MAX_STAMP = (1 << STAMP_BITS) - 1
MAX_KEY = (1 << (63 - STAMP_BITS)) - 1
_SMASK = np.int64(MAX_STAMP)
I_T, I_K, I_COUNT, I_UPDATES, I_ACTIVE, I_TREFIT, I_FLUSHED = 0, 1, 2, 3, 4, 5, 6
N_ISTATE = 7
LR_INVSQRT, LR_CONSTANT = 0, 1
PREFETCH = 24  # products ahead (measured on 20 Newsgroups tuples: 8 < 64 < 24)

_GOLD = np.uint64(0x9E3779B97F4A7C15)


# the intrinsic's name mangles the pointer type: typed pointers (llvmlite <= 0.50 default) vs opaque
_PREFETCH_NAME = ("llvm.prefetch.p0i8" if getattr(llvmlite, "ir_layer_typed_pointers_enabled", True)
                  else "llvm.prefetch.p0")


@intrinsic
def _prefetch(typingctx, arr, idx):
    """``llvm.prefetch`` (read, high locality) of ``arr[idx]``: a hint, no effect on results."""
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), _PREFETCH_NAME)
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3),
                          ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@jit
def _shift_of(cap):
    bits = 0
    while (1 << bits) < cap:
        bits += 1
    return 64 - bits


@jit
def _home(key, shift):
    if shift >= 64:
        return 0
    return np.int64((np.uint64(key) * _GOLD) >> np.uint64(shift))


@jit
def _pack(key, stamp):
    return (np.int64(key) << STAMP_BITS) | np.int64(stamp)


@jit
def find_slot(ik, key, shift, mask):
    """Slot of ``key`` (>= 0), or ``-1 - s`` where ``s`` is the empty slot to insert at.

    ``ik`` is ``tab.view(np.int64)``.
    """
    s = _home(key, shift)
    while True:
        k = ik[2 * s]
        if k == EMPTY:
            return -1 - s
        if (k >> STAMP_BITS) == key:
            return s
        s = (s + 1) & mask


@jit
def _delete_slot(tab, ik, s, shift, mask):
    """Backward-shift deletion of the entry at slot ``s`` (linear probing)."""
    i = s
    j = s
    while True:
        j = (j + 1) & mask
        k = ik[2 * j]
        if k == EMPTY:
            break
        h = _home(k >> STAMP_BITS, shift)
        # the entry at j may move into the hole i iff its home is not in (i, j] cyclically
        if i <= j:
            movable = h <= i or h > j
        else:
            movable = h <= i and h > j
        if movable:
            ik[2 * i] = k
            tab[2 * i + 1] = tab[2 * j + 1]
            i = j
    ik[2 * i] = EMPTY
    tab[2 * i + 1] = 0.0


@jit
def delete_key(tab, key):
    """Remove ``key``; returns 1 if it was present, else 0."""
    ik = tab.view(np.int64)
    cap = tab.shape[0] // 2
    shift = _shift_of(cap)
    s = find_slot(ik, key, shift, cap - 1)
    if s < 0:
        return 0
    _delete_slot(tab, ik, s, shift, cap - 1)
    return 1


@jit
def insert_keys(tab, new_keys, new_vals, stamps):
    """Set ``W[key] = val`` (stamp ``stamps[n]``) for each key; returns entries added.

    The caller guarantees room (count + len(new_keys) < capacity).
    """
    ik = tab.view(np.int64)
    cap = tab.shape[0] // 2
    shift = _shift_of(cap)
    mask = cap - 1
    added = 0
    for n in range(new_keys.shape[0]):
        key = np.int64(new_keys[n])
        s = find_slot(ik, key, shift, mask)
        if s < 0:
            s = -1 - s
            added += 1
        ik[2 * s] = _pack(key, stamps[n])
        tab[2 * s + 1] = new_vals[n]
    return added


@jit
def rehash(tab, new_tab):
    """Move every entry into the (empty, larger or smaller) table ``new_tab``."""
    ik = tab.view(np.int64)
    nik = new_tab.view(np.int64)
    cap = new_tab.shape[0] // 2
    shift = _shift_of(cap)
    mask = cap - 1
    n = 0
    for s in range(tab.shape[0] // 2):
        k = ik[2 * s]
        if k == EMPTY:
            continue
        t = -1 - find_slot(nik, k >> STAMP_BITS, shift, mask)
        nik[2 * t] = k
        new_tab[2 * t + 1] = tab[2 * s + 1]
        n += 1
    return n


@jit
def threshold_all(tab, S, K, thr, mode):
    """Shrink every entry and remove the zeros; returns the number removed.

    ``mode == 0``: bring every entry up to date, ``w <- soft(w, S[K] - S[stamp])``
    (flush of the lazy shrinkage); ``mode == 1``: the literal sweep of
    Algorithm 1 step 4, ``w <- soft(w, thr)`` for every entry.  Afterwards every
    stamp is ``K``.

    One pass, clusters rebuilt in place: starting just after an empty slot,
    every entry is taken out of its slot and -- unless it shrank to zero --
    put back at the first empty slot from its home.  That slot is never after
    the one it came from (the slots between its home and its old slot are
    either still holding earlier survivors or empty), so slots not yet visited
    are untouched and every entry is visited once; the result is the table
    that inserting the survivors in probe order would give, so every key stays
    reachable from its home.  Dead entries cost a read, with no backward shift
    per deletion.
    """
    ik = tab.view(np.int64)
    cap = tab.shape[0] // 2
    shift = _shift_of(cap)
    mask = cap - 1
    start = -1
    for s in range(cap):
        if ik[2 * s] == EMPTY:
            start = s
            break
    if start < 0:
        return 0
    removed = 0
    SK = S[K]
    s = start
    for _ in range(cap - 1):
        s = (s + 1) & mask
        k = ik[2 * s]
        if k == EMPTY:
            continue
        v = tab[2 * s + 1]
        if mode == 0:
            st = k & _SMASK
            if st != K:
                v = _soft(v, SK - S[st])
        else:
            v = _soft(v, thr)
        ik[2 * s] = EMPTY
        if v == 0.0:
            tab[2 * s + 1] = 0.0
            removed += 1
            continue
        key = k >> STAMP_BITS
        t = _home(key, shift)
        while ik[2 * t] != EMPTY:
            t = (t + 1) & mask
        if t != s:
            tab[2 * s + 1] = 0.0
        ik[2 * t] = _pack(key, K)
        tab[2 * t + 1] = v
    return removed


@jit
def sgd_steps(tab, S, istate, fstate,
              qp, qi, qx, pp, pi, px, mp, mi, mx,
              r0, r1, n_cols, eta0, lr_code, l1, T, lazy, refit, max_load,
              slot_buf, dj, dx, zero_buf):
    """One SGD step (Algorithm 1) per tuple row ``r0 <= r < r1``; returns the next row.

    Tuple r is (Q[r], D_pos[r], D_neg[r]).  With delta = d+ - d-, the margin is
    ``s = q^T W delta``; if ``1 - s > 0`` (hinge loss, eq. 2) the subgradient
    step is ``W += eta_t q delta^T`` over the nnz(q) x nnz(delta) touched
    entries, with ``eta_t = eta0 / sqrt(t)`` (``lr_code == LR_INVSQRT``) or
    ``eta0``.  Every ``T`` steps the cumulative threshold
    ``l1 * sum(eta_k, k = t-T+1..t)`` is applied (eq. 7): lazily through ``S``
    or, with ``lazy == False``, by sweeping the table.

    ``refit``: the refit phase (eq. 8) -- no L1, no sweeps, updates restricted
    to the entries present (the support Omega; the caller flushes first), the
    step size continues the schedule at ``t + t_refit``.

    The kernel returns early (a row < r1) when the next tuple could push the
    load of the table above ``max_load``; the caller grows the table and calls
    again.  The caller also keeps ``len(S) > K + (r1 - r0) // T + 1`` and
    ``K + (r1 - r0) // T + 1 <= MAX_STAMP``.  ``slot_buf`` and ``zero_buf``
    hold at least nnz(q) * nnz(delta) entries, ``dj`` / ``dx`` nnz(delta).
    """
    ik = tab.view(np.int64)
    cap = tab.shape[0] // 2
    shift = _shift_of(cap)
    mask = cap - 1
    limit = np.int64(max_load * cap)
    r = r0
    while r < r1:
        nd = _merge_diff(pp, pi, px, mp, mi, mx, r, dj, dx)
        q0 = qp[r]
        q1 = qp[r + 1]
        nq = q1 - q0
        if not refit and istate[I_COUNT] + nq * nd > limit:
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
        # margin q^T W (d+ - d-), bringing touched entries up to date
        s = 0.0
        m = 0
        nz = 0
        # software prefetch of the home slot PREFETCH products ahead: the probes are
        # random accesses into a table far larger than the caches, and the branchy
        # probe loop alone keeps few of them in flight
        pa = q0
        pb = 0
        if nd > 0:
            for _ in range(PREFETCH):
                if pa < q1:
                    _prefetch(ik, 2 * _home(np.int64(qi[pa]) * n_cols + dj[pb], shift))
                    pb += 1
                    if pb == nd:
                        pb = 0
                        pa += 1
        for a in range(q0, q1):
            base = np.int64(qi[a]) * n_cols
            qa = np.float64(qx[a])
            acc = 0.0
            for b in range(nd):
                if pa < q1:
                    _prefetch(ik, 2 * _home(np.int64(qi[pa]) * n_cols + dj[pb], shift))
                    pb += 1
                    if pb == nd:
                        pb = 0
                        pa += 1
                key = base + dj[b]
                sl = find_slot(ik, key, shift, mask)
                slot_buf[m] = sl
                m += 1
                if sl >= 0:
                    v = tab[2 * sl + 1]
                    if lazy:
                        st = ik[2 * sl] & _SMASK
                        if st != K:
                            v = _soft(v, SK - S[st])
                            tab[2 * sl + 1] = v
                            ik[2 * sl] = _pack(key, K)
                            if v == 0.0:
                                zero_buf[nz] = key
                                nz += 1
                    acc += v * dx[b]
            s += qa * acc
        if 1.0 - s > 0.0:
            istate[I_ACTIVE] += 1
            mend = m
            m = 0
            upd = 0
            added = 0
            for a in range(q0, q1):
                base = np.int64(qi[a]) * n_cols
                g = eta * np.float64(qx[a])
                for b in range(nd):
                    # the slots were found by the margin pass; fetch them back ahead
                    if m + PREFETCH < mend:
                        pf = slot_buf[m + PREFETCH]
                        _prefetch(ik, 2 * (pf if pf >= 0 else -1 - pf))
                    sl = slot_buf[m]
                    m += 1
                    if sl >= 0:
                        v = tab[2 * sl + 1] + g * dx[b]
                        tab[2 * sl + 1] = v
                        if v == 0.0 and not refit:
                            zero_buf[nz] = base + dj[b]
                            nz += 1
                        upd += 1
                    elif not refit:
                        v = g * dx[b]
                        if v != 0.0:
                            key = base + dj[b]
                            ins = -1 - sl
                            # an insertion earlier in this tuple may have taken the slot
                            if ik[2 * ins] != EMPTY:
                                ins = -1 - find_slot(ik, key, shift, mask)
                            ik[2 * ins] = _pack(key, K)
                            tab[2 * ins + 1] = v
                            added += 1
                        upd += 1
            # counters kept in registers in the loop, stored once per tuple
            istate[I_UPDATES] += upd
            istate[I_COUNT] += added
        if not refit:
            for z in range(nz):
                sl = find_slot(ik, zero_buf[z], shift, mask)
                if sl >= 0 and tab[2 * sl + 1] == 0.0:
                    _delete_slot(tab, ik, sl, shift, mask)
                    istate[I_COUNT] -= 1
            fstate[0] += eta
            if tt % T == 0:
                thr = l1 * fstate[0]
                fstate[0] = 0.0
                if lazy:
                    S[K + 1] = SK + thr
                    istate[I_K] = K + 1
                    # entries shrunk to zero but not touched since stay in the table
                    # until a flush; flushing whenever the table has doubled since the
                    # last flush keeps memory O(nnz) at O(1) amortised per insertion
                    if thr > 0.0 and istate[I_COUNT] >= 2 * istate[I_FLUSHED] + 64:
                        removed = threshold_all(tab, S, K + 1, 0.0, 0)
                        istate[I_COUNT] -= removed
                        istate[I_FLUSHED] = istate[I_COUNT]
                elif thr > 0.0:
                    removed = threshold_all(tab, S, K, thr, 1)
                    istate[I_COUNT] -= removed
        r += 1
    return r


@jit
def table_values(tab, S, K):
    """Current (up-to-date) value of every slot (0 where empty); read-only."""
    ik = tab.view(np.int64)
    cap = tab.shape[0] // 2
    out = np.zeros(cap, dtype=np.float64)
    SK = S[K]
    for s in range(cap):
        k = ik[2 * s]
        if k != EMPTY:
            v = tab[2 * s + 1]
            st = k & _SMASK
            if st != K:
                v = _soft(v, SK - S[st])
            out[s] = v
    return out


@jit
def table_entries(tab):
    """(keys, values, stamps) of the occupied slots as stored (pending shrinkage not applied)."""
    ik = tab.view(np.int64)
    cap = tab.shape[0] // 2
    n = 0
    for s in range(cap):
        if ik[2 * s] != EMPTY:
            n += 1
    keys = np.empty(n, dtype=np.int64)
    vals = np.empty(n, dtype=np.float64)
    stamps = np.empty(n, dtype=np.int64)
    n = 0
    for s in range(cap):
        k = ik[2 * s]
        if k != EMPTY:
            keys[n] = k >> STAMP_BITS
            stamps[n] = k & _SMASK
            vals[n] = tab[2 * s + 1]
            n += 1
    return keys, vals, stamps


@jit
def table_to_coo(tab, S, K, n_cols):
    """(rows, cols, values) of the nonzero up-to-date entries; read-only."""
    ik = tab.view(np.int64)
    cap = tab.shape[0] // 2
    cur = table_values(tab, S, K)
    n = 0
    for s in range(cap):
        if ik[2 * s] != EMPTY and cur[s] != 0.0:
            n += 1
    rows = np.empty(n, dtype=np.int64)
    cols = np.empty(n, dtype=np.int64)
    data = np.empty(n, dtype=np.float64)
    n = 0
    for s in range(cap):
        if ik[2 * s] != EMPTY and cur[s] != 0.0:
            k = ik[2 * s] >> STAMP_BITS
            rows[n] = k // n_cols
            cols[n] = k % n_cols
            data[n] = cur[s]
            n += 1
    return rows, cols, data


@jit
def score_rows(tab, S, K, qp, qi, qx, dp, di, dx, n_cols, out):
    """out[r] = q_r^T W d_r for row-aligned CSR Q, D, reading W with pending shrinkage."""
    ik = tab.view(np.int64)
    cap = tab.shape[0] // 2
    shift = _shift_of(cap)
    mask = cap - 1
    SK = S[K]
    for r in range(out.shape[0]):
        s = 0.0
        for a in range(qp[r], qp[r + 1]):
            base = np.int64(qi[a]) * n_cols
            qa = np.float64(qx[a])
            for b in range(dp[r], dp[r + 1]):
                sl = find_slot(ik, base + di[b], shift, mask)
                if sl >= 0:
                    v = tab[2 * sl + 1]
                    st = ik[2 * sl] & _SMASK
                    if st != K:
                        v = _soft(v, SK - S[st])
                    s += qa * v * np.float64(dx[b])
        out[r] = s

"""Numba kernels of the svmlight / LETOR text parser (bytes in, CSR arrays out).

Only jitted functions of arrays and scalars.  The caller
(:mod:`streamrank.io.svmlight`) hands over a buffer of whole lines
(``uint8``), arrays sized by :func:`count_lines_colons`, and turns error
codes into ``ValueError`` messages naming ``file:line``.

Line grammar (LETOR / svmlight)::

    line    := ws* [ label ws+ [ "qid:" int ws+ ] { index ":" value ws+ } ] [ "#" comment ] ("\\n" | "\\r\\n" | EOF)

A carriage return is part of a line end only before ``\\n`` (or at the very
end of the text): a bare ``\\r`` elsewhere outside a comment is an error (code
11), never the silent end of a line.  Files whose line ends are bare ``\\r``
(classic Mac) are translated to ``\\n`` by the caller before parsing.

Numbers are parsed with Clinger's fast path: up to 19 significant digits
into an integer mantissa ``m`` and a decimal exponent ``e``; when ``m < 2**53``
and ``|e| <= 22`` the value ``m * 10**e`` (or ``m / 10**-e``) is the
correctly rounded float64 — true for every number in the LETOR files.  Numbers off
the fast path (rare: more than 15-16 significant digits or huge exponents)
are reported to the caller, which re-parses those tokens exactly.
"""
from __future__ import annotations

import math

import numpy as np

from .._numba import jit

__all__ = ["count_lines_colons", "parse_svmlight", "csr_to_dense", "ERRORS"]

# error codes -> messages (the Python side adds file:line and the text)
ERRORS = {
    1: "bad label (expected a number first on the line)",
    2: "bad qid (expected qid:<non-negative integer>)",
    3: "bad feature index (expected <integer>:<value>)",
    4: "bad feature value (expected a finite number after ':')",
    5: "feature indices must be strictly increasing within a line",
    6: "feature index out of range",
    7: "qid present on some lines and missing on others",
    8: "NULL feature value (pass null_value= to substitute a number)",
    9: "missing ':' in a feature (expected <index>:<value>)",
    10: "feature value out of the float32 range",
    11: "stray carriage return (\\r) inside the line; line ends must be \\n or \\r\\n",
}

_POW10 = np.array([10.0 ** i for i in range(23)], dtype=np.float64)


@jit
def count_lines_colons(buf):
    """(number of b'\\n', number of b':') in ``buf`` — capacity bounds."""
    nl = 0
    nc = 0
    for i in range(buf.shape[0]):
        c = buf[i]
        if c == 10:
            nl += 1
        elif c == 58:
            nc += 1
    return nl, nc


@jit
def _parse_number(buf, i, n, pow10):
    """Parse a decimal float starting at i; returns (value, next_i, ok, exact).

    ``exact`` is False when the value is off Clinger's fast path (then it is
    within a few ulp, and the caller re-parses the token exactly).
    """
    neg = False
    if i < n and (buf[i] == 45 or buf[i] == 43):  # - +
        neg = buf[i] == 45
        i += 1
    mant = np.uint64(0)
    nd = 0          # significant digits stored
    exp10 = 0
    any_digit = False
    dot = False     # one loop over the digits before and after the '.'
    while i < n:
        d = np.int64(buf[i]) - 48
        if d == -2 and not dot:  # '.'
            dot = True
            i += 1
            continue
        if d < 0 or d > 9:
            break
        any_digit = True
        if nd < 19:
            if mant != 0 or d != 0:
                mant = mant * np.uint64(10) + np.uint64(d)
                nd += 1
            if dot:
                exp10 -= 1
        elif not dot:
            exp10 += 1
        i += 1
    if not any_digit:
        return 0.0, i, False, True
    if i < n and (buf[i] == 101 or buf[i] == 69):  # e E
        i += 1
        eneg = False
        if i < n and (buf[i] == 45 or buf[i] == 43):
            eneg = buf[i] == 45
            i += 1
        if i >= n or not (48 <= buf[i] <= 57):
            return 0.0, i, False, True
        e = 0
        while i < n and 48 <= buf[i] <= 57:
            if e < 100000:
                e = e * 10 + (buf[i] - 48)
            i += 1
        exp10 += -e if eneg else e
    if i < n:
        c = buf[i]
        if not (c == 32 or c == 9 or c == 13 or c == 10 or c == 35):   # space, tab, \r, \n, '#'
            return 0.0, i, False, True
    exact = mant == 0 or (nd < 19 and mant <= np.uint64(9007199254740992) and -22 <= exp10 <= 22)
    v = float(mant)
    if mant == 0:
        v = 0.0
    elif -22 <= exp10 <= 22:
        v = v * pow10[exp10] if exp10 >= 0 else v / pow10[-exp10]
    else:
        # 10^x for x > 22, as numba computes float ** int (binary powering; pow() beyond 2^16), written
        # out here: numba compiles its own float ** int as a separate unit.  e < -22: m * 10^e in two
        # steps, to avoid underflow of 10^e.
        x = exp10 if exp10 > 0 else -exp10 - 22
        p10 = 1.0
        if x > 0x10000:
            p10 = math.pow(10.0, float(x))
        else:
            base = 10.0
            while x != 0:
                if x & 1:
                    p10 *= base
                x >>= 1
                base *= base
        v = v * p10 if exp10 > 0 else (v / pow10[22]) / p10
    if v - v != 0.0:  # inf (overflow)
        return 0.0, i, False, True
    return (-v if neg else v), i, True, exact


@jit
def parse_svmlight(buf, zero_based, max_index, max_abs, null_value, has_null, qid_mode,
                   labels, qids, indptr, indices, values, slow, row_lines):
    """Parse the whole lines of ``buf`` into preallocated CSR arrays.

    Parameters
    ----------
    buf : uint8 array of whole lines.
    zero_based : feature indices start at 0 (else 1: LETOR, subtract 1).
    max_index : largest allowed 0-based column (``n_features - 1``), or -1.
    max_abs : largest allowed absolute feature value (float32 max).
    null_value, has_null : substitute for ``NULL`` values when ``has_null``.
    qid_mode : 1 / 0 if earlier text had / lacked ``qid:``, -1 if unknown.
    labels, qids : float64 / int64 (capacity rows); indptr int64 (rows + 1);
    indices int32, values float64 (capacity nnz).
    slow : int64 (cap, 4) — numbers off the fast path: (kind, index, start, end)
        with kind 0 a label (index = row), 1 a value (index = nnz position);
        ``start:end`` the token's bytes, for an exact re-parse by the caller.
    row_lines : int64 (capacity rows) — out: the 0-based line of ``buf`` each row comes from.

    Returns
    -------
    (status, n_rows, nnz, n_lines, err_line, err_pos, qid_mode, max_col, n_slow)
        status 0 on success, else an ``ERRORS`` code; ``err_line`` the 0-based
        line of the error inside ``buf`` and ``err_pos`` its byte offset;
        ``qid_mode`` 1 if the lines carry ``qid:``, 0 if not, -1 if no data
        line; ``max_col`` the largest 0-based column seen (-1 if none);
        ``n_slow`` the number of off-fast-path numbers (entries beyond the
        capacity of ``slow`` are counted, not stored: call again with more).
    """
    pow10 = _POW10
    n = buf.shape[0]
    i = 0
    line = 0
    row = 0
    nnz = 0
    max_col = -1
    indptr[0] = 0
    offset = 0 if zero_based else 1
    n_slow = 0
    cap_slow = slow.shape[0]
    status = 0      # an error breaks out of the loops with its code and byte offset: one return
    pos = -1
    while i < n:
        # skip leading blanks
        while i < n and (buf[i] == 32 or buf[i] == 9):
            i += 1
        if i >= n:
            break
        c = buf[i]
        if c == 13 and i + 1 < n and buf[i + 1] != 10:  # a bare CR, then more of the line
            status = 11
            pos = i
            break
        if c == 10 or c == 13 or c == 35:  # empty line or comment line
            while i < n and buf[i] != 10:
                i += 1
            i += 1
            line += 1
            continue
        # label
        start = i
        lab, i, ok, exact = _parse_number(buf, i, n, pow10)
        if not ok:
            status = 1
            pos = i
            break
        labels[row] = lab
        row_lines[row] = line
        if not exact:
            if n_slow < cap_slow:
                slow[n_slow, 0] = 0
                slow[n_slow, 1] = row
                slow[n_slow, 2] = start
                slow[n_slow, 3] = i
            n_slow += 1
        # tokens
        has_q = 0
        prev = -1
        first = True
        while True:
            while i < n and (buf[i] == 32 or buf[i] == 9):
                i += 1
            if i >= n or buf[i] == 10 or buf[i] == 13 or buf[i] == 35:
                break
            is_q = first and buf[i] == 113  # 'q'
            if is_q:
                if not (i + 4 <= n and buf[i + 1] == 105 and buf[i + 2] == 100 and buf[i + 3] == 58):
                    status = 2
                    pos = i
                    break
                i += 4
            first = False
            # the qid or the feature index: a non-negative decimal integer of at most 18 digits
            start = i
            idx = 0
            ok = True
            while i < n:
                d = np.int64(buf[i]) - 48
                if d < 0 or d > 9:
                    break
                if i - start >= 18:
                    ok = False
                    break
                idx = idx * 10 + d
                i += 1
            ok = ok and i > start
            if is_q:
                e = buf[i] if i < n else np.uint8(32)
                if not ok or not (e == 32 or e == 9 or e == 13 or e == 10 or e == 35):   # an end: blank, \r, \n, '#'
                    status = 2
                    pos = i
                    break
                qids[row] = idx
                has_q = 1
                continue
            if not ok:
                status = 3
                pos = i
                break
            if i >= n or buf[i] != 58:
                status = 9
                pos = i
                break
            i += 1
            col = idx - offset
            # columns are stored in int32 (CSR indices): a larger one would wrap around
            if col < 0 or col > 2147483646 or (max_index >= 0 and col > max_index):
                status = 6
                pos = i
                break
            if col <= prev:
                status = 5
                pos = i
                break
            prev = col
            if i < n and buf[i] == 78:  # 'N' -> NULL
                e = buf[i + 4] if i + 4 < n else np.uint8(32)
                if i + 4 <= n and buf[i + 1] == 85 and buf[i + 2] == 76 and buf[i + 3] == 76 and (
                        e == 32 or e == 9 or e == 13 or e == 10 or e == 35):
                    if not has_null:
                        status = 8
                        pos = i
                        break
                    v = null_value
                    i += 4
                else:
                    status = 4
                    pos = i
                    break
            else:
                start = i
                v, i, ok, exact = _parse_number(buf, i, n, pow10)
                if not ok:
                    status = 4
                    pos = i
                    break
                if abs(v) > max_abs:
                    status = 10
                    pos = start
                    break
                if not exact and v != 0.0:
                    if n_slow < cap_slow:
                        slow[n_slow, 0] = 1
                        slow[n_slow, 1] = nnz
                        slow[n_slow, 2] = start
                        slow[n_slow, 3] = i
                    n_slow += 1
            if v != 0.0:
                indices[nnz] = col
                values[nnz] = v
                nnz += 1
            if col > max_col:
                max_col = col
        if status != 0:
            break
        if i + 1 < n and buf[i] == 13 and buf[i + 1] != 10:  # a bare CR would hide the rest of the line
            status = 11
            pos = i
            break
        if qid_mode == -1:
            qid_mode = has_q
        elif qid_mode != has_q:
            status = 7
            pos = i
            break
        row += 1
        indptr[row] = nnz
        # skip comment and the end of line
        while i < n and buf[i] != 10:
            i += 1
        i += 1
        line += 1
    return status, row, nnz, line, line if status != 0 else -1, pos, qid_mode, max_col, n_slow


@jit
def csr_to_dense(indptr, indices, data, out):
    """Scatter CSR rows into the zeroed dense ``out`` (rows, n_features)."""
    for r in range(indptr.shape[0] - 1):
        for p in range(indptr[r], indptr[r + 1]):
            out[r, indices[p]] = data[p]

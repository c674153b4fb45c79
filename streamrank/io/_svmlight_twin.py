"""A numpy fast path of the svmlight / LETOR parser for well-formed text: no numba (issue 22).

Why: ``streamrank ingest`` of MQ2008 Fold1 train (5.9 MB, 9,630 rows x 46
features) compiled :func:`~streamrank.io._svmlight_kernels.parse_svmlight`
(3.5 s cold) and paid numba's import and set-up (~0.55 s warm) for ~20 ms of
parsing.  :func:`parse` reads the same text with whole-buffer bytes and numpy
operations (no per-line or per-token Python loop) in a few tens of ms.

It is a *fast path*, not a second parser: it either returns exactly what
:func:`streamrank.io.svmlight._parse` returns for the same arguments (the same
arrays bit for bit, dtypes, line numbers, ``qid_mode`` and ``max_col``), or
``None`` -- "not sure" -- and the caller runs the kernels, so every error,
message, ``NULL`` substitution, bare-CR rule and off-fast-path number stays
the kernel's.  It accepts only a strict subset of the kernel's grammar
(:mod:`~streamrank.io._svmlight_kernels`)::

    line   := [ws] [ num [ws "qid:" int15] { ws int9 ":" num } [ws] ] [ "#" comment ] ("\\n" | "\\r\\n" | EOF)
    num    := ["-"] digits ["." digits] [("e" | "E") ["+" | "-"] digit [digit]]
    int9   := 1-9 digits; int15 := 1-15 digits; ws := spaces and tabs

with ``qid:`` on every data line or on none (and as the earlier text had
it), feature indices within range and strictly increasing in a line, values
with ``|v| <= 3e38`` (the kernel refuses ``|v|`` above float32's max, 3.4e38: the
margin covers its approximation of long numbers).  Anything else -- a ``NULL``,
a bare CR, a leading ``+`` or ``.5``, a 3-digit exponent, non-ASCII outside a
comment, any error -- returns ``None``.

Numbers: the mantissa's digits (sign and dot removed) are read 8 bytes at a
time as a little-endian word and combined by the SWAR multiply-shift steps;
with ``f`` digits after the dot and ``e`` the exponent, a mantissa ``m <=
2**53`` (at most 16 digits) with ``|e - f| <= 22`` is ``m * 10**(e - f)`` or
``m / 10**(f - e)`` -- Clinger's fast path, correctly rounded, the same
float64 operation the kernel does.  The rest (more digits, ``m > 2**53``,
larger powers of ten) is parsed by Python's ``float`` (David Gay's correctly
rounded conversion; the kernel re-parses those with numpy's, also correctly
rounded), at most :data:`MAX_SLOW` tokens per call (files written with 17
significant digits, e.g. ``repr``, exceed it and go to the kernel).  So
every value is the correctly rounded float64 of its text, as the kernel's is.
"""
from __future__ import annotations

import re

import numpy as np

__all__ = ["parse", "csr_to_dense", "estimate_s", "S_FIXED", "S_PER_BYTE", "S_PER_ENTRY", "MAX_SLOW", "PIECE_BYTES"]

#: Seconds of :func:`parse` per byte of text, for :func:`streamrank._numba.use_twin`.  Measured on this 2-core
#: machine at load 0.7-2.5 (best and median of 7-9 calls, session 11's note has the commands): MQ2008 Fold1
#: train (5.9 MB) 134-220 ms, 25-37 ns a byte (the kernel, warm: 19-34 ms); Fold1 test (1.8 MB) 18-22 ns; 46
#: random values a line written with ``%g`` / ``%.3e`` / ``%.6f`` 31 / 30 / 27 ns.  Smaller texts cost more a
#: byte: ``benchmarks/letor_parse.py``'s synthetic file 0.11 MB 61 ns, 1.1 MB 42-48 ns, 5.7 MB 29-35 ns; a
#: call's fixed part (2-3 ms measured) is charged as :data:`S_FIXED`.  Rounded up to 5 ms + 45 ns a byte:
#: MQ2008 train is charged 0.271 s of the 0.5 s budget (0.276 s with :data:`S_PER_ENTRY` for its dense X;
#: the store write's read checks add under 1 ms), its test fold 0.085 s.
S_PER_BYTE = 45e-9
S_FIXED = 5e-3

#: Seconds of :func:`csr_to_dense` per stored entry (numpy's scatter): 10 ns an entry measured on MQ2008
#: train's 233,775 nonzeros (median of 7; the kernel 2 ns), rounded up to 20 ns.
S_PER_ENTRY = 20e-9

#: tokens parsed one by one by ``float`` (exponents, long numbers) beyond which :func:`parse` gives up
MAX_SLOW = 20_000

#: :func:`parse` reads a longer text in pieces of about this many bytes (cut after a line end): a piece's
#: ~80,000 tokens keep its dozens of intermediate arrays in the CPU caches.  MQ2008 Fold1 train (5.9 MB):
#: 148 ms against 202 ms whole (median CPU of 15 alternated calls, load 2.5-4; best 117 against 154 ms);
#: its 1.8 MB test fold, whole or in pieces, 36-38 ms (issue 22)
PIECE_BYTES = 512 << 10

_COMMENT = re.compile(rb"#[^\n]*")
_ALLOWED = b"0123456789.-+eE:qid \t\n"
_TO_SPACE = bytes.maketrans(b":qid", b"    ")
_NUM_E = re.compile(rb"-?[0-9]+(?:\.[0-9]+)?[eE][+-]?[0-9]{1,2}")
_POW10 = np.array([10.0 ** i for i in range(23)], dtype=np.float64)
_KEEP = np.array([0] + [(1 << (8 * k)) - 1 for k in range(1, 8)] + [(1 << 64) - 1], dtype=np.uint64)
_ZEROS = np.array([int.from_bytes(b"0" * k, "little") for k in range(9)], dtype=np.uint64)
_P10_INT = np.array([10 ** k for k in range(9)], dtype=np.uint64)
_TWO53 = 1 << 53
_MAX_ABS = 3.0e38


def estimate_s(n_bytes: int) -> float:
    """Seconds :func:`parse` is estimated to take on ``n_bytes`` of text (for ``use_twin``)."""
    return S_FIXED + S_PER_BYTE * n_bytes


def _swar8(words, nd):
    """The integers of the first ``nd`` (0-8) ASCII digits of each little-endian word."""
    w = (words & _KEEP[nd]) - _ZEROS[nd]                   # digits 0-9 in the low nd bytes (no borrow)
    w <<= (np.uint64(8) * (np.uint64(8) - nd.astype(np.uint64)))   # leading zeros: the last digit in byte 7
    w = ((w & np.uint64(0x0F0F0F0F0F0F0F0F)) * np.uint64(2561)) >> np.uint64(8)
    w = ((w & np.uint64(0x00FF00FF00FF00FF)) * np.uint64(6553601)) >> np.uint64(16)
    w = ((w & np.uint64(0x0000FFFF0000FFFF)) * np.uint64(42949672960001)) >> np.uint64(32)
    return w


def _tokens(b):
    """Start and end offsets of the runs of bytes > 32 in ``b``."""
    solid = (b > 32).view(np.int8)
    edge = np.diff(solid, prepend=np.int8(0), append=np.int8(0))
    return np.flatnonzero(edge == 1), np.flatnonzero(edge == -1)


class _TokenOf:
    """``at(positions)``: the token (index into ``st``) holding each byte position (one cumulative sum, made
    on first use)."""

    def __init__(self, b, st):
        self.b, self.st, self.cum = b, st, None

    def __call__(self, pos):
        if self.cum is None:
            flag = np.zeros(self.b.shape[0], dtype=np.int32)
            flag[self.st] = 1
            self.cum = np.cumsum(flag, dtype=np.int32)
        return self.cum[pos].astype(np.int64) - 1


def parse(text, zero_based, max_index, qid_mode, first_line):
    """:func:`streamrank.io.svmlight._parse`'s result for ``text`` (bytes of whole lines), or None if not sure.

    ``max_index`` as the kernel takes it (the largest 0-based column, -1: no cap); ``qid_mode`` 1/0/-1 as
    the earlier text had ``qid:``.  No ``null_value``: a ``NULL`` is never on the fast path.  A text longer
    than :data:`PIECE_BYTES` is read in pieces of whole lines, each as the text after the previous one (its
    ``qid_mode``, its first line number, what is left of the :data:`MAX_SLOW` budget), and the pieces'
    arrays are joined: the same result, or None if any piece is not sure.
    """
    text = bytes(text)
    budget = [MAX_SLOW]
    if len(text) <= PIECE_BYTES:
        return _parse_piece(text, zero_based, max_index, qid_mode, first_line, budget)
    parts, i, mode, line = [], 0, qid_mode, first_line
    while i < len(text):
        j = text.find(b"\n", min(i + PIECE_BYTES, len(text)) - 1)
        j = len(text) if j < 0 else j + 1
        got = _parse_piece(text[i:j], zero_based, max_index, mode, line, budget)
        if got is None:
            return None
        parts.append(got)
        mode, line, i = got[6], line + got[5], j
    nnz = np.cumsum([0] + [int(p[2][-1]) for p in parts[:-1]])
    indptr = np.concatenate([parts[0][2]] + [p[2][1:] + z for p, z in zip(parts[1:], nnz[1:].tolist())])
    cat = [np.concatenate([p[k] for p in parts]) for k in (0, 1, 3, 4, 8)]
    return (cat[0], cat[1], indptr, cat[2], cat[3], sum(p[5] for p in parts), mode, max(p[7] for p in parts),
            cat[4])


def _parse_piece(text, zero_based, max_index, qid_mode, first_line, budget):
    """:func:`parse` of one piece (bytes); ``budget``: ``[tokens]`` left for ``float``, taken from."""
    if b"\r" in text:
        if text.count(b"\r") != text.count(b"\r\n"):
            return None                     # a bare CR: the kernel's rule (or its error)
        text = text.replace(b"\r\n", b"\n")
    last = text.rfind(b"\n")
    n_lines = text.count(b"\n") + (1 if text[last + 1:].strip(b" \t") else 0)
    if b"#" in text:
        text = _COMMENT.sub(b"", text)
    if text.translate(None, _ALLOWED):
        return None                         # NULL, '+5' without 'e', non-ASCII, other bytes: the kernel's
    n_q = text.count(b"q")
    if not (text.count(b"qid:") == n_q == text.count(b"i") == text.count(b"d")):
        return None                         # a 'q', 'i' or 'd' outside "qid:" (even with no qid at all)
    raw = np.frombuffer(text, dtype=np.uint8)
    u = text.translate(_TO_SPACE)           # numbers separated by blanks: label [qid] index value index value ...
    b = np.frombuffer(u, dtype=np.uint8)
    st, en = _tokens(b)
    n_tok = st.shape[0]
    nl = np.flatnonzero(b == 10)
    # data rows: lines holding tokens (comments are gone); tokens of line k are first[k]:first[k + 1]
    first = np.searchsorted(st, np.r_[0, nl + 1, len(b) + 1])
    per_line = np.diff(first)
    row_line = np.flatnonzero(per_line)
    rows = row_line.shape[0]
    r0 = first[row_line]                    # each row's first token: its label
    n_in_row = per_line[row_line]
    if rows and n_q not in (0, rows):
        return None                         # qid on some lines only: the kernel's error 7 (or 2)
    has_q = 1 if n_q else 0
    if rows and qid_mode != -1 and qid_mode != has_q:
        return None
    # the token kinds: 0 label, 1 qid, 2 feature index, 3 value
    n_feat = n_in_row - 1 - has_q
    if np.any(n_feat < 0) or np.any(n_feat & 1):
        return None
    n_feat >>= 1
    kind = np.full(n_tok, 3, dtype=np.int8)
    kind[r0] = 0
    q_tok = r0 + 1
    if has_q:
        qpos = np.flatnonzero(raw == 113)
        # "qid:" right after the label and a blank: its number is the row's second token
        if not (np.array_equal(st[q_tok], qpos + 4) and np.all(raw[qpos - 1] <= 32)):
            return None
        kind[q_tok] = 1
    nnz_all = int(n_feat.sum())
    pair_row = np.repeat(np.arange(rows), n_feat)
    # index tokens: row start + 1 + has_q + 2 j
    idx_tok = np.repeat(r0 + 1 + has_q - np.r_[0, np.cumsum(2 * n_feat)[:-1]], n_feat) + 2 * np.arange(nnz_all)
    val_tok = idx_tok + 1
    kind[idx_tok] = 2
    # every ':' joins an index to its value (or ends "qid"): right after the index, right before the value
    if np.count_nonzero(raw == 58) != nnz_all + n_q or np.any(raw[en[idx_tok]] != 58) or np.any(
            st[val_tok] != en[idx_tok] + 1):
        return None
    # signs, dots and exponents: where the grammar allows them
    pad = np.concatenate([b, np.zeros(2, np.uint8)])
    isdig = lambda a: (a - np.uint8(48)) < np.uint8(10)        # noqa: E731
    at = _TokenOf(b, st)
    special = np.zeros(n_tok, dtype=bool)                      # tokens with an exponent
    end_mant = en.copy()                                       # where each token's mantissa ends
    exp10 = np.zeros(n_tok, dtype=np.int64)                    # the exponent written after 'e'
    if b"e" in u or b"E" in u:
        ee = np.flatnonzero((b == 101) | (b == 69))
        etok = at(ee)
        if ee[0] == 0 or not np.all(isdig(b[ee - 1])) or np.any(np.diff(etok) <= 0):
            return None                     # 'e' after a digit, once a number
        esign = pad[ee + 1]
        e0 = ee + 1 + ((esign == 45) | (esign == 43))           # the exponent's first digit
        n_e = en[etok] - e0
        if not np.all(isdig(pad[e0])) or np.any(n_e > 2):
            return None                     # 1-2 digits (then only digits: signs, dots, 'e' are checked)
        e_val = (pad[e0] - np.uint8(48)).astype(np.int64)
        two = n_e == 2
        e_val[two] = e_val[two] * 10 + (pad[e0[two] + 1] - np.uint8(48))
        exp10[etok] = np.where(esign == 45, -e_val, e_val)
        special[etok] = True
        end_mant[etok] = ee
    if b"+" in u:
        plus = np.flatnonzero(b == 43)
        if not np.all((b[plus - 1] == 101) | (b[plus - 1] == 69)):
            return None
    sign = np.zeros(n_tok, dtype=bool)
    removed = np.zeros(n_tok, dtype=np.int64)                  # signs and dots in each token
    if b"-" in u:
        minus = np.flatnonzero(b == 45)
        at_start = b[minus - 1] <= 32 if minus[0] > 0 else np.r_[True, b[minus[1:] - 1] <= 32]
        if not np.all(isdig(pad[minus + 1])):
            return None
        in_exp = ~at_start
        if np.any(in_exp) and not np.all((b[minus[in_exp] - 1] == 101) | (b[minus[in_exp] - 1] == 69)):
            return None
        sign[at(minus[at_start])] = True
        removed += sign
        if np.any(in_exp):
            removed += np.bincount(at(minus[in_exp]), minlength=n_tok)
    frac = np.zeros(n_tok, dtype=np.int64)
    has_dot = np.zeros(n_tok, dtype=bool)
    if b"." in u:
        dots = np.flatnonzero(b == 46)
        dtok = at(dots)
        if (dots[0] == 0 or not np.all(isdig(b[dots - 1])) or not np.all(isdig(pad[dots + 1]))
                or np.any(np.diff(dtok) <= 0)):
            return None                     # '.5', '5.', two dots in a number
        frac[dtok] = end_mant[dtok] - dots - 1
        if np.any(frac[dtok] < 1):
            return None                     # a dot in an exponent
        has_dot[dtok] = True
        removed += has_dot
    odd = kind[sign | has_dot | special]
    if np.any((odd == 1) | (odd == 2)):
        return None                         # labels and values only may have a sign, a dot or an exponent
    n_dig = (end_mant - st) - sign - has_dot                   # mantissa digits
    if np.any(n_dig > 40):
        return None                         # 41+ digits: maybe past float64's range (the kernel's error)
    if np.any(n_dig[idx_tok] > 9) or (has_q and np.any(n_dig[q_tok] > 15)):
        return None                         # long indices (the kernel's range error) or qids: the kernel's
    if np.count_nonzero(n_dig > 16) > budget[0]:
        return None
    # the digits alone (signs and dots removed: a mantissa's digits are contiguous)
    digits = u.translate(None, b"-.") if np.any(removed) else u
    dst = st - np.r_[0, np.cumsum(removed)[:-1]] if n_tok else st
    buf = digits + bytes(16)
    words = np.ndarray((len(digits) + 9,), dtype="<u8", buffer=buf, strides=(1,))
    mant = _swar8(words[dst], np.minimum(n_dig, 8))
    wide = np.flatnonzero(n_dig > 8)
    if wide.shape[0]:                       # 9-16 digits: the first n - 8, then the last 8
        nd = np.minimum(n_dig[wide], 16)
        mant[wide] = (_swar8(words[dst[wide]], nd - 8) * np.uint64(10 ** 8)
                      + _swar8(words[dst[wide] + nd - 8], np.full_like(nd, 8)))
    exp10 -= frac                           # value = mant * 10**exp10
    slow = (n_dig > 16) | (mant > np.uint64(_TWO53)) | (exp10 > 22) | (exp10 < -22)
    n_slow = int(np.count_nonzero(slow))
    if n_slow > budget[0]:
        return None
    budget[0] -= n_slow
    vals = mant.astype(np.float64)          # Clinger: exact mant, one correctly rounded * or / by 10**k
    up = exp10 > 0
    if np.any(up):
        np.multiply(vals, _POW10[np.clip(exp10, 0, 22)], out=vals, where=up)
    np.divide(vals, _POW10[np.clip(-exp10, 0, 22)], out=vals, where=~up)
    np.negative(vals, out=vals, where=sign)
    if n_slow:
        for t in np.flatnonzero(slow).tolist():
            tok = u[st[t]:en[t]]
            if special[t] and _NUM_E.fullmatch(tok) is None:
                return None
            vals[t] = float(tok)
    labels = vals[r0]
    if has_q:
        qids = mant[q_tok].astype(np.int64)
    else:
        qids = np.zeros(rows, dtype=np.int64)
    cols = mant[idx_tok].astype(np.int64) - (0 if zero_based else 1)
    values = vals[val_tok]
    if nnz_all:
        if cols.min() < 0 or (max_index >= 0 and cols.max() > max_index):
            return None                     # the kernel's range error
        if np.any((np.diff(cols) <= 0) & (np.diff(pair_row) == 0)):
            return None                     # not strictly increasing in a line: the kernel's error 5
        if not np.all(np.abs(values) <= _MAX_ABS):
            return None                     # near or past float32's range: the kernel's check
    max_col = int(cols.max()) if nnz_all else -1
    keep = values != 0.0
    indptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(pair_row[keep], minlength=rows), out=indptr[1:])
    mode = has_q if rows else int(qid_mode)
    return (labels, qids, indptr, cols[keep].astype(np.int32), values[keep], int(n_lines), mode, max_col,
            row_line.astype(np.int64) + first_line)


def csr_to_dense(indptr, indices, data, out):
    """:func:`~streamrank.io._svmlight_kernels.csr_to_dense` by numpy: ``out[r, indices[p]] = data[p]``."""
    nnz = int(indptr[-1]) if indptr.shape[0] else 0
    out[np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr)), indices[:nnz]] = data[:nnz]

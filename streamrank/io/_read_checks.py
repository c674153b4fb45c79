"""Checks on every block read from a store, before learners (numba, scipy's C code) see it.

DESIGN §6: data read from disk is untrusted.  A store written through zarr by
someone else — or edited metadata that makes zarr decode the same bytes
differently — can hold CSR column indices past ``n_features``, offsets that
decrease or run past the nonzeros, tuple rows past ``Q``/``D`` or NaN/inf
that no ``append`` would have let in.  Unchecked, these read past buffers in
native code (a SIGSEGV, heap corruption, or silently wrong scores).

Every function here is one pass over what was just read (O(block); the
loops are in :mod:`streamrank.io._check_kernels`) and raises
:class:`~streamrank.io.schema.StoreFormatError` naming the store, the array
and the rows concerned.  The cost is measured by
``benchmarks/stream_throughput.py`` (section "read checks").

The row-chunked arrays of a :class:`~streamrank.GroupStore` are checked one
decoded chunk at a time, inside the chunk decoder's call, while the chunk is
still in the CPU cache (:func:`finite_rows_check`, :func:`entries_check`, run
by :class:`~streamrank.io._chunk_files.ChunkFileDecoder` for
:class:`~streamrank.io._row_chunks.RowChunkReader` right after numcodecs'
blosc decoded the chunk): that is what keeps the checks at a few per cent of
a block pass.

Every check runs its kernel, whatever the length of the array: one
implementation of each check (no numpy twin to keep in step with it).

``CHECK_READS`` turns the checks off — for that benchmark only.
"""
from __future__ import annotations

import numpy as np

from . import _check_kernels as K
from .schema import StoreFormatError

__all__ = ["CHECK_READS", "BadEntry", "check_offsets", "check_indices", "check_finite_rows",
           "check_tuple_rows", "check_csr_piece", "finite_rows_check", "entries_check",
           "with_row", "first_nonfinite", "first_bad_offset", "first_out_of_range", "first_bad_tuple"]

#: check every block read from a store (False: only for measuring the cost of the checks)
CHECK_READS = True

def first_nonfinite(a) -> int:
    """:func:`~streamrank.io._check_kernels.first_nonfinite` of the 1-D float array ``a``."""
    return int(K.first_nonfinite(a))


def first_bad_offset(a, lo: int, hi: int) -> int:
    """:func:`~streamrank.io._check_kernels.first_bad_offset` of int64 offsets ``a``.

    The first ``i`` with ``a[0] < lo`` (i = 0), ``a[i] > hi`` or ``a[i] < a[i-1]``; -1 if none.  (An entry
    below ``lo`` after a good ``a[0]`` is also below its predecessor, so the kernel checks ``lo`` once.)
    """
    return int(K.first_bad_offset(a, np.int64(lo), np.int64(hi)))


def first_out_of_range(a, n_cols: int) -> int:
    """:func:`~streamrank.io._check_kernels.first_out_of_range` of the signed indices ``a``: the first ``i`` with
    ``a[i] < 0`` or ``a[i] >= n_cols``; -1 if none."""
    return int(K.first_out_of_range(K.unsigned(a), n_cols))


def first_bad_tuple(t, n_q: int, n_d: int) -> int:
    """:func:`~streamrank.io._check_kernels.first_bad_tuple` of the (l, 3) int64 tuples ``t``: the first flat
    position ``3 r + c`` outside its range; -1 if none."""
    return int(K.first_bad_tuple(t, np.int64(n_q), np.int64(n_d)))


class BadEntry(StoreFormatError):
    """A bad CSR entry found by a per-chunk check; :func:`with_row` adds the row it belongs to."""

    def __init__(self, store, array, entry: int, what: str):
        self.store, self.array, self.entry, self.what = store, array, int(entry), what
        super().__init__(_corrupt(store, array, f"entry {entry} {what}").args[0])


def with_row(exc: BadEntry, indptr, first_row: int) -> StoreFormatError:
    """``exc`` with the row of its entry, found in the global offsets ``indptr`` of rows ``first_row...``.

    A chunk is checked whole: the bad entry may lie outside these rows (then ``exc`` as it is).
    """
    indptr = np.asarray(indptr)
    if not (indptr.size and int(indptr[0]) <= exc.entry < int(indptr[-1])):
        return exc
    r = int(np.searchsorted(indptr, exc.entry, side="right")) - 1
    return _corrupt(exc.store, exc.array, f"entry {exc.entry} (row {first_row + r}) {exc.what}")


def finite_rows_check(store, array: str):
    """``check(first_row, rows)`` for a :class:`RowChunkReader`: no NaN or ±inf (names the row)."""
    def check(first_row, a):
        check_finite_rows(a, store=store, array=array, first_row=first_row)
    return check


def entries_check(store, array: str, n_cols: int | None = None, what: str = "n_features"):
    """``check(first_entry, entries)`` for the CSR ``indices`` (in ``[0, n_cols)``) or ``data`` (finite).

    Raises :class:`BadEntry` (the reader knows entries, not rows).
    """
    def check(first, a):
        if not CHECK_READS or a.shape[0] == 0:
            return
        if n_cols is not None:
            i = first_out_of_range(a, n_cols)
            if i >= 0:
                raise BadEntry(store, array, first + i, f"is {int(a[i])}, outside [0, {what}={n_cols})")
        else:
            i = first_nonfinite(a)
            if i >= 0:
                raise BadEntry(store, array, first + i, f"holds {float(a[i])}; streamrank never stores NaN or "
                                                        "infinity (append refuses them)")
    return check


def _corrupt(store, array, what) -> StoreFormatError:
    return StoreFormatError(f"{store}: array {array!r} {what}; the store is corrupt (damaged, or "
                            "written or edited outside streamrank) and is not read further")


def check_offsets(a, lo: int, hi: int, *, store, array: str, first: int) -> None:
    """Offsets ``a`` (entries ``first:first+len(a)`` of ``array``) stay within ``[lo, hi]`` and never decrease."""
    if not CHECK_READS:
        return
    a = np.ascontiguousarray(a, dtype=np.int64)
    i = first_bad_offset(a, lo, hi)
    if i >= 0:
        prev = f", after {int(a[i - 1])}" if i else ""
        raise _corrupt(store, array, f"entries {first}:{first + len(a)} must lie in {lo}..{hi} without "
                                     f"decreasing, but entry {first + i} is {int(a[i])}{prev}")


def check_indices(indices, n: int, *, store, array: str, indptr=None, first_row: int = 0,
                  first_entry: int = 0, what: str = "n_features") -> None:
    """Every entry of ``indices`` is in ``[0, n)``; the message names the row (via ``indptr``) and entry."""
    if not CHECK_READS or indices.shape[0] == 0:
        return
    i = first_out_of_range(indices, n)
    if i >= 0:
        row = ""
        if indptr is not None:
            r = int(np.searchsorted(np.asarray(indptr) - int(indptr[0]), i, side="right")) - 1
            row = f" (row {first_row + r})"
        raise _corrupt(store, array, f"entry {first_entry + i}{row} is {int(indices[i])}, "
                                     f"outside [0, {what}={n})")


def check_finite_rows(a, *, store, array: str, first_row: int, indptr=None, first_entry: int = 0) -> None:
    """No NaN or ±inf in ``a`` (rows ``first_row...`` of ``array``; CSR values when ``indptr`` is given)."""
    if not CHECK_READS or a.size == 0 or a.dtype.kind != "f":
        return
    flat = a.reshape(-1) if a.flags.c_contiguous else np.ascontiguousarray(a).reshape(-1)
    i = first_nonfinite(flat)
    if i < 0:
        return
    if indptr is not None:
        r = int(np.searchsorted(np.asarray(indptr) - int(indptr[0]), i, side="right")) - 1
        where = f"entry {first_entry + i} (row {first_row + r})"
    else:
        width = int(np.prod(a.shape[1:])) if a.ndim > 1 else 1
        where = f"row {first_row + i // width}"
    raise _corrupt(store, array, f"holds {float(flat[i])} at {where}; streamrank never stores NaN or infinity "
                                 "(append refuses them)")


def check_csr_piece(ip, indices, data, n_cols: int, *, store, side: str, r0: int, z0: int,
                    what: str = "n_features") -> None:
    """A run of CSR rows ``r0...`` read from ``side/{indices,data}``: columns in range, values finite.

    ``ip`` (the rows' ``indptr`` entries, global offsets starting at ``z0``)
    was checked by the caller with :func:`check_offsets` before it used them
    to read ``indices`` and ``data``.
    """
    check_indices(indices, n_cols, store=store, array=f"{side}/indices", indptr=ip, first_row=r0,
                  first_entry=z0, what=what)
    check_finite_rows(data, store=store, array=f"{side}/data", first_row=r0, indptr=ip, first_entry=z0)


def check_tuple_rows(t, mag, n_q: int, n_d: int, *, store, t0: int) -> None:
    """Tuples ``t0...``: query rows in ``[0, n_q)``, item rows in ``[0, n_d)``; magnitudes finite."""
    if not CHECK_READS:
        return
    if t.shape[0]:
        k = first_bad_tuple(np.ascontiguousarray(t, dtype=np.int64), n_q, n_d)
        if k >= 0:
            r, c = divmod(k, 3)
            side, n = ("Q", n_q) if c == 0 else ("D", n_d)
            raise _corrupt(store, "tuples", f"row {t0 + r} column {c} is {int(t[r, c])}, not a row of {side} "
                                            f"(expected 0 <= index < {n})")
    check_finite_rows(mag, store=store, array="magnitude", first_row=t0)

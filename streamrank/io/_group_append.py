"""The write side of :class:`~streamrank.GroupStore`: validation, append, torn-tail repair, the commit.

``append`` is one run of the append transaction both stores share
(:mod:`streamrank.io._append_transaction`: lock, re-read the commit record,
skip a logged ``batch_id``, validate, repair a torn tail, write beyond the
committed length, commit last).  This module supplies the group store's
parts: validating a batch of query groups (features, scores, query ids and
their uniqueness in scope, document ids), writing its rows, groups and ids,
and the new commit record (counts plus a log entry with the batch's
checksum).
"""
from __future__ import annotations

import logging

import numpy as np
import scipy.sparse as sp

from .._qid import qid_keys
from .._validation import check_qid, check_X, check_y, group_ptr_from_qid
from ._append_transaction import AppendParts, NewCommit, append_transaction, commit_time, repair_torn_tail
from ._qid_text import encode_qids
from .docids import append_docids, check_docids
from .row_columns import append_row_columns, check_row_columns
from .groups import batch_of, qid_kind_of, scan_for_keys, scope_ranges
from ._writer import write_attrs
from .schema import BatchHasher, append_csr

__all__ = ["GroupAppend"]

logger = logging.getLogger("streamrank")

_F32_MAX = float(np.finfo(np.float32).max)


def _as_float32(X, name: str = "X"):
    """Cast features to the stored float32, refusing values float32 cannot hold."""
    if sp.issparse(X):
        data = X.data
    else:
        data = X
    if data.dtype != np.float32:
        if data.dtype.kind == "f" and data.size:
            big = np.abs(data) > _F32_MAX
            if big.any():
                k = int(np.flatnonzero(big.ravel())[0])
                row = (int(np.searchsorted(X.indptr, k, side="right") - 1) if sp.issparse(X)
                       else k // max(1, X.shape[1]))
                raise ValueError(f"{name} row {row} holds {data.ravel()[k]!r}, outside the "
                                 "float32 range the store keeps features in")
        if sp.issparse(X):
            X = sp.csr_matrix((data.astype(np.float32), X.indices, X.indptr), shape=X.shape)
        else:
            X = np.ascontiguousarray(X, dtype=np.float32)
    return X


def _positive_int(v, name):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return int(v)


def _check_csr_width(n, name):
    """CSR column indices are stored as int32: a wider matrix would wrap around silently."""
    if n > np.iinfo(np.int32).max:
        raise ValueError(f"{name}={n} exceeds the int32 column indices of the store's CSR layout "
                         f"(at most {np.iinfo(np.int32).max}); hash the features into fewer columns")
    return n


class GroupAppend:
    """Mixin of :class:`~streamrank.GroupStore`: everything that writes rows (see the module docstring)."""

    def append(self, X, y, qid, *, batch_id=None, docid=None, weight=None, click=None, position=None,
               ranker=None) -> bool:
        """Append whole query groups; atomic and idempotent.

        Parameters
        ----------
        X : ndarray (rows, n_features), scipy.sparse matrix, or a pandas DataFrame / pyarrow Table
            Features (bool, integer or float); stored as float32.  A table's
            feature columns are matched to the store's ``feature_names`` by name;
            ``y`` and ``qid`` may then be column names (``append(table, y="label",
            qid="qid")``).  Values
            outside the float32 range, NaN and ±inf are refused, as are
            strings, objects and complex numbers.
        y : array-like (rows,) or (rows, n_outputs)
            Scores, stored as float64.
        qid : array-like (rows,) of integer or string ids (one kind per store)
            The rows of one query must be contiguous.  With
            ``group_identity="batch"`` an id may recur in a later batch (a new
            group); within a batch (``batch_id`` up to ``#``) or, with
            ``"global"``, within the store, a repeat is an error — checked by
            streaming the committed keys, see :mod:`streamrank.io.groups`.
        batch_id : str, optional
            Identifier of the batch.  If the log already holds it, nothing is
            written and False is returned.
        docid : sequence of str, optional
            One document id per row; required by (and only by) a store
            created with ``docids=True``.
        weight, click, position, ranker : array-like (rows,), optional
            The store's row columns (:mod:`streamrank.io.row_columns`): a store
            created with ``row_columns=`` takes every column it keeps, and only
            those.  ``weight`` finite and >= 0, ``click`` 0 or 1, ``position``
            an integer rank >= 1; an error names the array and the row.

        Returns
        -------
        bool
            True if the batch was committed, False if ``batch_id`` was already there.
        """
        if self.mode != "a":
            raise PermissionError(f"{self.path} is open read-only; use GroupStore.open(path, mode='a')")
        if batch_id is not None:
            batch_id = str(batch_id)
        X, y, qid = self._from_table(X, y, qid)

        def validate():
            self._batch_id_pending = batch_id
            Xv, yv, gp, gq = self._validate(X, y, qid)
            ids = self._validate_docids(docid, Xv.shape[0])
            cols = check_row_columns(self.row_columns, {"weight": weight, "click": click, "position": position,
                                                         "ranker": ranker},
                                     Xv.shape[0], self.path)
            return Xv, yv, gp, gq, batch_id, ids, cols

        return append_transaction(self, "GroupStore", batch_id, AppendParts(
            reopen_arrays=self._reopen_arrays, validate=validate, repair=self.repair, write=self._write,
            commit_record=_commit_record, committed=self._committed))

    def _from_table(self, X, y, qid):
        """A DataFrame / Arrow table: ``y``/``qid`` may name its columns; features matched by name."""
        from .._tables import is_table, reorder_by_name, split_table

        if not is_table(X):
            return X, y, qid
        if qid is None:
            raise TypeError("GroupStore.append(table, y=..., qid=...) needs qid: the name of the query id "
                            "column (or an array)")
        Xa, y, qid, names = split_table(X, y, qid)
        want = self.feature_names
        if want is not None and names is not None and list(names) != list(want):
            Xa = reorder_by_name(Xa, names, want, "the table's feature columns do not match the store's feature "
                                 "names", extra_label="not in the store", shown=5)
        if self.sparse:
            Xa = sp.csr_matrix(Xa)
        return Xa, y, qid

    def _validate(self, X, y, qid):
        """Everything is checked before a byte is written."""
        if qid is None:
            raise TypeError("GroupStore.append needs qid (one integer id per row); for one "
                            "global group pass an array of one constant id")
        if sp.issparse(X) != self.sparse:
            want = "a scipy.sparse matrix" if self.sparse else "a dense array"
            raise TypeError(f"X must be {want}: the store at {self.path} was created with "
                            f"sparse={self.sparse}")
        X = check_X(X, "X", n_features=self.n_features, dtype=(np.float32, np.float64))
        X = _as_float32(X, "X")
        n = X.shape[0]
        y = check_y(y, n, "y")
        if y.ndim == 2 and y.shape[1] == 1 and self.n_outputs == 1:
            y = y[:, 0]
        got = 1 if y.ndim == 1 else y.shape[1]
        if got != self.n_outputs or (self.n_outputs > 1 and y.ndim != 2):
            raise ValueError(f"y has {got} output column(s) (shape {y.shape}); the store holds "
                             f"{self.n_outputs}")
        q = check_qid(qid, n, "qid")
        gp, gq = group_ptr_from_qid(q, "qid")
        kind = qid_kind_of(gq, self._qid_kind, self.path)
        self._check_new_groups(gq, gp, kind, self._batch_id_pending)
        if self.sparse:
            if X.nnz and (X.indices.min() < 0 or X.indices.max() >= self.n_features):
                raise ValueError(f"X has column indices outside [0, {self.n_features})")
        return X, y, gp, gq

    def _validate_docids(self, docid, n_rows):
        if not self.has_docids:
            if docid is not None:
                raise ValueError(f"docid given, but the store at {self.path} keeps no document ids "
                                 "(create it with docids=True)")
            return None
        if docid is None:
            raise ValueError(f"the store at {self.path} keeps one document id per row: pass docid=")
        return check_docids(docid, n_rows)

    def _check_new_groups(self, gq, gp, kind, batch_id):
        """Refuse a query id that is already a group of the same batch (or of the store, if global).

        Streams the committed keys of the groups in scope in pieces of
        :data:`streamrank.io.groups.SCAN_PIECE` (8 MiB), so memory is bounded
        by the piece plus the new block; a key match is confirmed on the
        original id (string keys may collide).  See :mod:`streamrank.io.groups`
        for the cost.
        """
        if not len(gq):
            return
        ranges = scope_ranges(self._attrs["log"], batch_id, self._group_identity)
        keys = qid_keys(gq)
        order = np.argsort(keys, kind="stable")
        skeys = keys[order]
        for g_store, js in scan_for_keys(self._arrays["qid"], ranges, skeys):
            stored = self._group_qid(g_store, g_store + 1)[0]
            for g_new in sorted(int(i) for i in order[js]):
                if kind == "int" or gq[g_new] == stored:
                    from .._qid import qid_repr

                    scope = ("the store" if self._group_identity == "global"
                             else f"batch {batch_of(batch_id)!r}")
                    raise ValueError(
                        f"qid {qid_repr(gq[g_new])} (batch row {int(gp[g_new])}) is already in {scope} as "
                        f"group {g_store}; a query's rows must be contiguous within a batch"
                        + ("" if self._group_identity == "batch" else
                           " (this store has group_identity='global'; a store created with "
                           "group_identity='batch' takes a recurring query as a new group of each batch)"))

    def repair(self) -> int:
        """Cut a torn tail back to the committed counts; return the number of fixes.

        Called by every append.  Removes temporary ``*.partial`` files of a
        killed writer and shrinks arrays that are longer than committed.
        """
        if self.mode != "a":
            raise PermissionError(f"{self.path} is open read-only")
        return repair_torn_tail(self, "GroupStore", self._arrays,
                                self._needed_lengths(self._rows, self._groups, self._nnz),
                                f"; the store is at its last commit ({self._rows} rows)")

    def _write(self, X, y, gp, gq, batch_id, ids=None, cols=None):
        m0, q0, z0 = self._rows, self._groups, self._nnz
        k, g = X.shape[0], len(gq)
        m1, q1 = m0 + k, q0 + g
        h = BatchHasher()
        a = self._arrays
        if self.sparse:
            _, z1 = append_csr(a, "X", X, m0, z0, h)
        else:
            z1 = z0
            h.update("X", X)
            if k:
                a["X"].resize((m1, self.n_features))
                a["X"][m0:m1] = X
        h.update("y", y)
        sizes = np.diff(gp).astype(np.int64)
        h.update("group_size", sizes)
        kind = qid_kind_of(gq, self._qid_kind, self.path)
        keys = qid_keys(gq)
        h.update("qid", keys)
        if kind == "str":
            lengths, text = encode_qids(gq)
            h.update("qid_text.len", lengths)
            h.update("qid_text.utf8", text)
        if k:
            a["y"].resize((m1,) + tuple(y.shape[1:]))
            a["y"][m0:m1] = y
        append_row_columns(a, cols or {}, m0, h)
        if g:
            a["group_ptr"].resize((q1 + 1,))
            a["group_ptr"][q0 + 1 : q1 + 1] = m0 + gp[1:]
            a["qid"].resize((q1,))
            a["qid"][q0:q1] = keys
            if kind == "str":
                self._qid_text.write(q0, lengths, text)
        attrs = dict(self._attrs)
        if g:
            attrs["qid_kind"] = kind
        attrs["committed"] = {"rows": m1, "groups": q1, "nnz": z1}
        entry = {"batch_id": batch_id, "rows": [m0, m1], "groups": [q0, q1], "nnz": [z0, z1]}
        if self.has_docids:
            b0 = self._docid_bytes
            b1 = append_docids(a, *ids, m0, b0, h)
            attrs["committed"]["docid_bytes"] = b1
            entry["docid_bytes"] = [b0, b1]
        attrs["log"] = list(attrs["log"]) + [{**entry, "time": commit_time(), "checksum": h.hexdigest()}]
        lengths = self._needed_lengths(m1, q1, z1)
        if self.has_docids:
            lengths["docid/bytes"] = int(attrs["committed"]["docid_bytes"])
        arrays = a
        if attrs.get("qid_kind") == "str":                   # the string ids' two arrays are bound too
            text_arrays, text_lengths = self._qid_text.committed(q1)
            arrays, lengths = {**a, **text_arrays}, {**lengths, **text_lengths}
        return NewCommit(attrs, arrays, lengths, news=(m0 + gp[1:], keys, batch_id, k, g))

    def _committed(self, new):
        """The store object takes the commit just written (step 7 of :mod:`._append_transaction`)."""
        attrs = new.attrs
        c = attrs["committed"]
        ptr, keys, batch_id, k, g = new.news
        self._rebind()
        self._attrs = attrs
        self._rows, self._groups, self._nnz = c["rows"], c["groups"], c["nnz"]
        if self.has_docids:
            self._docid_bytes = int(c["docid_bytes"])
        self._gp_all = np.concatenate((self._gp_all, ptr))
        if self._qid_cache is not None:
            self._qid_all = np.concatenate((self._qid_all, keys))
        self._load_qid_kind(attrs)
        self._group_ptr_cache = None
        logger.debug("GroupStore %s: committed batch %r (%d rows, %d groups)", self.path, batch_id, k, g)


def _commit_record(loc, attrs):
    """The commit point of an append: this module's ``write_attrs`` (the name tests replace to kill a writer at
    the commit)."""
    write_attrs(loc, attrs)

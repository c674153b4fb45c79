"""``GroupStore.verify()``: every committed batch re-read and compared with its logged checksum."""
from __future__ import annotations

import numpy as np

from .._qid import qid_keys
from ._chunk_binding import reads_unbound
from .docids import check_docids, hash_docids
from .row_columns import hash_row_columns
from .schema import BatchHasher, StoreFormatError

__all__ = ["GroupVerify"]


class GroupVerify:
    """Mixin of :class:`~streamrank.GroupStore`: :meth:`verify` (local and remote stores alike)."""

    @reads_unbound      # per-batch checksums name the batch; chunk bindings would name a chunk
    def verify(self, *, piece_rows: int = 262_144, batch_ids=None) -> int:
        """Re-read every committed batch and compare it with its logged checksum.

        Also checks the structural invariants (log ranges contiguous and equal
        to the committed counts, ``group_ptr`` increasing, CSR ``indptr``
        consistent).  Returns the number of batches verified; raises
        :class:`StoreFormatError` naming the first batch that does not match.
        ``batch_ids``: re-read only the batches with these ids (e.g. the ones
        just appended); the structural checks still cover the whole store.
        """
        log = self._attrs["log"]
        r = g = z = 0
        for e in log:
            if e["rows"][0] != r or e["groups"][0] != g or e["nnz"][0] != z:
                raise StoreFormatError(f"{self.path}: append log is not contiguous at batch "
                                       f"{e.get('batch_id')!r}")
            r, g, z = e["rows"][1], e["groups"][1], e["nnz"][1]
        if (r, g, z) != (self._rows, self._groups, self._nnz):
            raise StoreFormatError(f"{self.path}: append log ends at rows={r}, groups={g}, nnz={z} "
                                   f"but the commit record says {self._rows}, {self._groups}, {self._nnz}")
        if np.any(np.diff(self._gp_all) < 0) or self._gp_all[0] != 0:
            raise StoreFormatError(f"{self.path}: array 'group_ptr' is not non-decreasing from 0")
        if batch_ids is not None:
            batch_ids = set(batch_ids)
            log = [e for e in log if e.get("batch_id") in batch_ids]
        for e in log:
            (r0, r1), (g0, g1) = e["rows"], e["groups"]
            try:      # a chunk that cannot be read (missing, swapped, damaged) fails its batch too
                h = BatchHasher()
                for a in range(r0, r1, piece_rows):
                    b = min(a + piece_rows, r1)
                    if self.sparse:
                        ip = np.asarray(self._indptr[a : b + 1], dtype=np.int64)
                        h.update("X.indices", self._indices[int(ip[0]) : int(ip[-1])])
                        h.update("X.data", self._data[int(ip[0]) : int(ip[-1])])
                        h.update("X.row_nnz", np.diff(ip))
                    else:
                        h.update("X", self._X[a:b])
                    h.update("y", self._y[a:b])
                    hash_row_columns(h, {n: self._arrays[n][a:b] for n in self.row_columns})
                if self.sparse and r1 == r0:
                    h.update("X.indices", np.zeros(0, np.int32))
                    h.update("X.data", np.zeros(0, np.float32))
                    h.update("X.row_nnz", np.zeros(0, np.int64))
                elif not self.sparse and r1 == r0:
                    h.update("X", np.zeros((0, self.n_features), np.float32))
                if r1 == r0:
                    h.update("y", np.zeros(0))
                    hash_row_columns(h, {n: np.zeros(0) for n in self.row_columns})
                h.update("group_size", np.diff(self._gp_all[g0 : g1 + 1]))
                h.update("qid", self._qid_all[g0:g1])
                if self.has_docids:
                    ids = self.docids(r0, r1)
                    hash_docids(h, *check_docids(ids, r1 - r0))
                if self._qid_kind == "str":
                    lengths, text = self._qid_text.raw(g0, g1)
                    h.update("qid_text.len", lengths)
                    h.update("qid_text.utf8", text)
                    labels = self._qid_text.read(g0, g1, self._groups)
                    if not np.array_equal(qid_keys(labels), self._qid_all[g0:g1]):
                        raise StoreFormatError(f"{self.path}: string query ids of batch {e.get('batch_id')!r} do "
                                               "not match their keys in 'qid'; the store is corrupt")
                if self.sparse and r1 > r0 and int(self._indptr[r0]) != e["nnz"][0]:
                    raise StoreFormatError(f"{self.path}: 'X/indptr' disagrees with the log at batch "
                                           f"{e.get('batch_id')!r}")
            except StoreFormatError as exc:
                raise StoreFormatError(
                    f"{self.path}: batch {e.get('batch_id')!r} (rows {r0}:{r1}) does not match its checksum: "
                    f"it cannot be read ({exc})") from exc
            if h.hexdigest() != e["checksum"]:
                raise StoreFormatError(
                    f"{self.path}: batch {e.get('batch_id')!r} (rows {r0}:{r1}) does not match its "
                    "checksum; committed data was modified or lost")
        return len(log)

"""Split groups in :class:`~streamrank.rankrls._statistics.RankStatistics`: pieces kept open until complete.

A group cut across blocks adds its diagonal part piece by piece and keeps its
running sums (O(n) per open group; plus O(n²) per distinct target value with
ties="exclude") until its last row has been seen; then its low-rank part
−s_g S Sᵀ (and the tie classes' terms) closes it.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..laplacian import group_weights
from ._gram import _dense_row, _pair_count, _weighted_gram

__all__ = ["OpenGroups"]


class OpenGroups:
    """Open (split) groups: join their pieces, close them when complete (a part of RankStatistics)."""

    @property
    def is_complete(self) -> bool:
        """True when no group is waiting for more of its pieces."""
        if self._parts is not None:
            return self._parts[0].is_complete
        return not self._open and not getattr(self, "_open_w", None)

    def check_complete(self):
        if self._parts is not None:
            return self._parts[0].check_complete()
        opened = {**self._open, **getattr(self, "_open_w", {})}
        if opened:
            gid, st = next(iter(opened.items()))
            raise ValueError(
                f"{len(opened)} group(s) are incomplete (e.g. group {gid}: {st[0]} of {st[1]} rows seen); "
                "every piece of a split group must be added before solving"
            )

    def _add_pieces(self, Phi, Y, gp, S, Sy, size, whole, group_id):
        if not whole.all():
            if group_id is None:
                raise ValueError("group_id is needed to join the pieces of a split group")
            gid = np.asarray(group_id, dtype=np.int64)
            for g in np.flatnonzero(~whole):
                a, b = gp[g], gp[g + 1]
                Sg = _dense_row(S, g)
                self._add_open(int(gid[g]), int(b - a), int(size[g]), Sg, Sy[g].copy(), None)
                if self.ties == "exclude" and b > a:
                    piece = Phi[a:b] if sp.issparse(Phi) else np.asarray(Phi[a:b], dtype=np.float64)
                    yv = Y[a:b, 0]
                    classes = {}
                    for val in np.unique(yv):
                        r = yv == val
                        P = piece[r]
                        Sc = np.asarray(P.sum(axis=0)).ravel()
                        Mc = _weighted_gram(P, np.ones(int(r.sum())))
                        classes[float(val)] = [int(r.sum()), Sc, Mc]
                    self._merge_classes(int(gid[g]), classes)
                self._maybe_close(int(gid[g]))

    def _add_open(self, gid, rows, size, Sg, Sy, _):
        st = self._open.get(gid)
        if st is None:
            self._open[gid] = [rows, size, Sg, Sy]
        else:
            if st[1] != size:
                raise ValueError(f"group {gid} was announced with {st[1]} rows and now with {size}")
            st[0] += rows
            st[2] = st[2] + Sg
            st[3] = st[3] + Sy
            if st[0] > size:
                raise ValueError(f"group {gid} received {st[0]} rows but has only {size}: a piece was added twice")

    def _merge_classes(self, gid, classes):
        cur = self._open_cls.setdefault(gid, {})
        for val, (cnt, Sc, Mc) in classes.items():
            c = cur.get(val)
            if c is None:
                cur[val] = [cnt, Sc, Mc]
            else:
                c[0] += cnt
                c[1] = c[1] + Sc
                c[2] = c[2] + Mc

    def _maybe_close(self, gid):
        rows, size, Sg, Sy = self._open[gid]
        if rows < size:
            return
        del self._open[gid]
        s = float(group_weights(np.array([size]), self.group_weight)[0])
        self._G -= s * np.outer(Sg, Sg)
        self._B -= s * np.outer(Sg, Sy)
        self._yLy -= s * Sy * Sy
        self.n_groups += 1
        self.n_pairs += int(_pair_count(size))
        for cnt, Sc, Mc in self._open_cls.pop(gid, {}).values():
            if cnt > 1:
                self._G -= s * (cnt * Mc - np.outer(Sc, Sc))
                self.n_pairs -= int(_pair_count(cnt))

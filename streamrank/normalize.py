"""Feature normalization fitted with the model: streamed column statistics and the fitted scales.

A learner with ``normalize="standard"`` or ``"minmax"`` scores

    f(x) = Σ_j w_j (x_j − o_j) / s_j

with, per feature j over all training rows,

* ``"standard"``: o_j = mean, s_j = standard deviation (population, ddof=0);
* ``"minmax"``:   o_j = minimum, s_j = maximum − minimum;

and s_j = 1 where it would be 0 (a constant feature), as scikit-learn's scalers do.
That is exactly the formula of the search engines' normalizers: the
OpenSearch/Elasticsearch LTR plugin's ``standard`` (``(v − mean) /
standard_deviation``) and ``min_max`` (``(v − minimum) / (maximum −
minimum)``), and Solr's ``StandardNormalizer`` / ``MinMaxNormalizer`` — so an
exported model carries (o, s) per feature and its weights unchanged.

:class:`FeatureMoments` gathers count, mean, the sum of squared deviations
(merged blockwise: Chan, Golub & LeVeque 1979) and min/max in float64 from
dense blocks (one fused numba kernel, :mod:`streamrank._moments_kernels`) or
CSR blocks (implicit zeros count); it merges, so it rides along the
statistics of a streaming pass or a dask reduction.  :class:`Normalizer` is
the fitted (kind, offset, scale).

For RankRLS no extra pass is needed: with D = diag(1/s), the statistics of
the normalized features are a congruence of the accumulated ones,
G' = D G D and B' = D B, because per-group centering (L 1 = 0) removes any
shift o.  So ``"standard"`` there means: the model equals RankRLS fitted on
globally standardized features (the global mean only shifts every score by
a constant, which changes no ranking); what it changes is the
regularization, λ‖w‖² on the standardized scale.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp

from .io.blocks import BlockSource, WrappedSource

__all__ = ["NORMALIZE", "FeatureMoments", "Normalizer", "NormalizedSource", "check_normalize"]

NORMALIZE = (None, "standard", "minmax")


def check_normalize(normalize):
    """Validate a learner's ``normalize=`` parameter."""
    if normalize not in NORMALIZE:
        raise ValueError(f"normalize must be one of {NORMALIZE}, got {normalize!r}")
    return normalize


class FeatureMoments:
    """Mergeable float64 column statistics: n, mean, M2 = Σ (x − mean)², min, max."""

    def __init__(self, n_features: int):
        n = int(n_features)
        self.n = 0
        self.mean = np.zeros(n)
        self.m2 = np.zeros(n)
        self.min = np.full(n, np.inf)
        self.max = np.full(n, -np.inf)

    @property
    def n_features(self) -> int:
        return self.mean.shape[0]

    def update(self, X) -> "FeatureMoments":
        """Add the rows of a dense (rows, n) array or a CSR matrix."""
        rows = X.shape[0]
        if rows == 0:
            return self
        if X.shape[1] != self.n_features:
            raise ValueError(f"X has {X.shape[1]} features; the moments have {self.n_features}")
        part = FeatureMoments(self.n_features)
        part.n = rows
        if sp.issparse(X):
            X = X.tocsr()
            data = np.asarray(X.data, dtype=np.float64)
            cols = X.indices
            s = np.bincount(cols, weights=data, minlength=self.n_features)
            nnz = np.bincount(cols, minlength=self.n_features)
            part.mean = s / rows
            dev = data - part.mean[cols]
            # deviations of the stored entries plus those of the implicit zeros
            part.m2 = np.bincount(cols, weights=dev * dev, minlength=self.n_features) \
                + (rows - nnz) * part.mean ** 2
            mn = np.full(self.n_features, np.inf)
            mx = np.full(self.n_features, -np.inf)
            np.minimum.at(mn, cols, data)
            np.maximum.at(mx, cols, data)
            has_zero = nnz < rows
            mn[has_zero] = np.minimum(mn[has_zero], 0.0)
            mx[has_zero] = np.maximum(mx[has_zero], 0.0)
            part.min, part.max = mn, mx
        else:
            from ._moments_kernels import block_moments

            A = np.asarray(X)
            if A.dtype not in (np.float32, np.float64):
                A = A.astype(np.float64)
            A = np.ascontiguousarray(A)
            n = self.n_features
            part.mean, part.m2, part.min, part.max = (np.empty(n) for _ in range(4))
            block_moments(A, part.mean, part.m2, part.min, part.max)
        return self.merge(part)

    def merge(self, other: "FeatureMoments") -> "FeatureMoments":
        """Chan et al.'s pairwise update; exact in any order up to rounding."""
        if other.n_features != self.n_features:
            raise ValueError(f"cannot merge moments of {other.n_features} and {self.n_features} features")
        if other.n == 0:
            return self
        if self.n == 0:
            self.n, self.mean, self.m2 = other.n, other.mean.copy(), other.m2.copy()
            self.min, self.max = other.min.copy(), other.max.copy()
            return self
        n = self.n + other.n
        delta = other.mean - self.mean
        self.mean = self.mean + delta * (other.n / n)
        self.m2 = self.m2 + other.m2 + delta ** 2 * (self.n * other.n / n)
        self.n = n
        self.min = np.minimum(self.min, other.min)
        self.max = np.maximum(self.max, other.max)
        return self

    def copy(self) -> "FeatureMoments":
        return FeatureMoments(self.n_features).merge(self)

    def normalizer(self, kind: str) -> "Normalizer":
        """The fitted :class:`Normalizer` of ``kind`` ("standard" or "minmax")."""
        if self.n == 0:
            raise ValueError("no rows seen: the normalizer needs at least one row")
        if kind == "standard":
            return Normalizer(kind, self.mean.copy(), np.sqrt(np.maximum(self.m2, 0.0) / self.n))
        if kind == "minmax":
            return Normalizer(kind, self.min.copy(), self.max - self.min)
        raise ValueError(f"normalize must be 'standard' or 'minmax', got {kind!r}")

    # persistence: plain arrays (sr.save stores them beside the model's own)
    def to_arrays(self, prefix: str) -> dict:
        return {f"{prefix}n": np.array([self.n], dtype=np.int64), f"{prefix}mean": self.mean,
                f"{prefix}m2": self.m2, f"{prefix}min": self.min, f"{prefix}max": self.max}

    @classmethod
    def from_arrays(cls, arrays: dict, prefix: str) -> "FeatureMoments":
        mean = np.asarray(arrays[f"{prefix}mean"], dtype=np.float64)
        m = cls(mean.shape[0])
        m.n = int(np.asarray(arrays[f"{prefix}n"]).ravel()[0])
        m.mean = mean.copy()
        for name in ("m2", "min", "max"):
            a = np.asarray(arrays[f"{prefix}{name}"], dtype=np.float64)
            if a.shape != mean.shape:
                raise ValueError(f"{prefix}{name} has shape {a.shape}; expected {mean.shape}")
            setattr(m, name, a.copy())
        if m.n < 0 or not (np.isfinite(m.mean).all() and np.isfinite(m.m2).all()):
            raise ValueError(f"{prefix}moments are not finite or have a negative count")
        return m


class Normalizer:
    """Fitted per-feature ``(x − offset) / scale`` of kind "standard" or "minmax".

    ``scale`` is 1 where the statistic is 0 (constant feature).  For
    "standard" ``offset``/``scale`` are the mean and standard deviation, for
    "minmax" the minimum and maximum − minimum.
    """

    def __init__(self, kind: str, offset, scale):
        if kind not in ("standard", "minmax"):
            raise ValueError(f"normalizer kind must be 'standard' or 'minmax', got {kind!r}")
        offset = np.asarray(offset, dtype=np.float64).ravel()
        scale = np.asarray(scale, dtype=np.float64).ravel()
        if offset.shape != scale.shape:
            raise ValueError(f"normalizer offset {offset.shape} and scale {scale.shape} differ in shape")
        if not (np.isfinite(offset).all() and np.isfinite(scale).all()) or (scale < 0).any():
            raise ValueError("normalizer offset and scale must be finite, scale >= 0")
        self.kind = kind
        self.offset = offset
        self.scale = np.where(scale > 0, scale, 1.0)

    @property
    def n_features(self) -> int:
        return self.offset.shape[0]

    def transform(self, X) -> np.ndarray:
        """Dense float64 ``(X − offset) / scale``."""
        A = X.toarray() if sp.issparse(X) else np.asarray(X)
        return (A.astype(np.float64, copy=False) - self.offset) / self.scale

    def fold(self, W):
        """``(W / scale, −offsetᵀ (W / scale))``: the same scores as weights and a constant on raw x.

        ``Σ_j w_j (x_j − o_j)/s_j = x · (w/s) − o · (w/s)``; used to score
        sparse rows without densifying them.
        """
        W = np.asarray(W, dtype=np.float64)
        Ws = W / (self.scale if W.ndim == 1 else self.scale[:, None])
        return Ws, -(self.offset @ Ws)

    def to_arrays(self, prefix: str = "normalizer_") -> dict:
        return {f"{prefix}offset": self.offset, f"{prefix}scale": self.scale}

    @classmethod
    def from_arrays(cls, kind: str, arrays: dict, prefix: str = "normalizer_") -> "Normalizer":
        return cls(kind, arrays[f"{prefix}offset"], arrays[f"{prefix}scale"])

    def __repr__(self):
        return f"Normalizer({self.kind!r}, n_features={self.n_features})"


class NormalizedSource(WrappedSource):
    """The blocks of ``source`` with X replaced by the dense ``normalizer.transform(X)`` (same groups, y, qid).

    For learners that compute on the normalized features themselves (kernel
    RankRLS evaluates k(x̃, R̃)); memory per block: one dense float64 copy of X.
    """

    def __init__(self, source: BlockSource, normalizer: Normalizer):
        if source.n_features != normalizer.n_features:
            raise ValueError(f"the source has {source.n_features} features; the normalizer {normalizer.n_features}")
        super().__init__(source)
        self.normalizer = normalizer
        self.sparse = False

    def _read_rows(self, r0, r1):
        X, y = self.inner._read_rows(r0, r1)
        return self.normalizer.transform(X), y

    def _nnz_at(self, rows):
        return None  # dense rows: no nonzero offsets

    def _map_block(self, b):
        return dataclasses.replace(b, X=self.normalizer.transform(b.X))

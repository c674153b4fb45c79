"""Kernel functions on blocks of rows: linear, Gaussian (rbf), polynomial, callable.

Every function returns a float64 matrix ``K[i, j] = k(X[i], Z[j])`` for dense
arrays or CSR matrices ``X`` (rows, n) and ``Z`` (cols, n).  The work reduces
to one matrix product ``X Zᵀ`` done by BLAS (dense) or by scipy's sparse ×
dense product (CSR), followed by an elementwise map done in place:

* ``"linear"``  k(x, z) = x·z
* ``"rbf"``     k(x, z) = exp(−γ‖x − z‖²),  ‖x − z‖² = ‖x‖² + ‖z‖² − 2 x·z
  (clipped at 0; exactly 0 on the diagonal of ``kernel_matrix(X)``) —
  RLScore's ``GaussianKernel(gamma)``
* ``"poly"``    k(x, z) = (γ x·z + coef0)^degree
* a callable ``kernel(X, Z) -> ndarray (len(X), len(Z))`` evaluated on whole
  blocks (it receives the same dense/CSR objects it would be given row by row).

The products are accumulated in float64 whatever the storage type of ``X``;
the elementwise map after the product is one fused numba pass
(:mod:`streamrank._kernel_kernels`) plus, for the Gaussian kernel, numpy's
vectorised ``exp`` in place.
"""
from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp


__all__ = ["KernelSpec", "KernelColumns", "kernel_matrix", "kernel_diag", "check_kernel"]

KERNELS = ("linear", "rbf", "poly")

#: row chunk used when a kernel block would exceed this many entries
_MAX_BLOCK_ENTRIES = 1 << 24
#: blocks at least this large use the prange twin of the elementwise loop (smaller blocks: the
#: serial loop, which does not compete with BLAS and the prefetch thread for the cores)
_PARALLEL_ENTRIES = 1 << 24


class KernelSpec:
    """A validated kernel: name or callable plus its parameters.

    Built by :func:`check_kernel`; call ``spec(X, Z)`` for a kernel block.
    """

    __slots__ = ("kernel", "gamma", "degree", "coef0")

    def __init__(self, kernel, gamma, degree, coef0):
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0

    @property
    def is_callable(self) -> bool:
        return callable(self.kernel)

    @property
    def psd_by_construction(self) -> bool:
        """True when the kernel is positive semidefinite for every input."""
        if self.kernel in ("linear", "rbf"):
            return True
        if self.kernel == "poly":
            return self.coef0 >= 0
        return False

    def __call__(self, X, Z=None, *, out=None):
        return kernel_matrix(X, Z, kernel=self.kernel, gamma=self.gamma,
                             degree=self.degree, coef0=self.coef0, out=out)

    def diag(self, X):
        return kernel_diag(X, kernel=self.kernel, gamma=self.gamma,
                           degree=self.degree, coef0=self.coef0)

    def params(self) -> dict:
        return {"kernel": self.kernel, "gamma": self.gamma, "degree": self.degree,
                "coef0": self.coef0}


def check_kernel(kernel="rbf", gamma=1.0, degree=2, coef0=0.0) -> KernelSpec:
    """Validate kernel parameters; errors name the argument and what was expected."""
    if not callable(kernel):
        if not isinstance(kernel, str) or kernel not in KERNELS:
            raise ValueError(
                f"kernel must be one of {KERNELS} or a callable kernel(X, Z) -> array; got {kernel!r}")
    if kernel in ("rbf", "poly"):
        if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
            raise TypeError(f"gamma must be a positive number, got {gamma!r}")
        gamma = float(gamma)
        if not np.isfinite(gamma) or gamma <= 0:
            raise ValueError(f"gamma must be a finite number > 0 for kernel={kernel!r}, got {gamma!r}")
    if kernel == "poly":
        if isinstance(degree, bool) or not isinstance(degree, numbers.Integral) or degree < 1:
            if not (isinstance(degree, numbers.Real) and float(degree).is_integer() and degree >= 1):
                raise ValueError(f"degree must be an integer >= 1 for kernel='poly', got {degree!r}")
        degree = int(degree)
        if isinstance(coef0, bool) or not isinstance(coef0, numbers.Real) or not np.isfinite(coef0):
            raise ValueError(f"coef0 must be a finite number, got {coef0!r}")
        coef0 = float(coef0)
    return KernelSpec(kernel, gamma, degree, coef0)


def _sq_norms(X) -> np.ndarray:
    if sp.issparse(X):
        X = _as64(X)
        return np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    X = np.asarray(X, dtype=np.float64)
    return np.einsum("ij,ij->i", X, X)


def _as64(X):
    if sp.issparse(X):
        return X if X.dtype == np.float64 else X.astype(np.float64)
    return np.asarray(X, dtype=np.float64)


def _dot(X, Z, out=None) -> np.ndarray:
    """X Zᵀ as a dense float64 array (BLAS for dense, scipy for CSR), C-contiguous or written into ``out``."""
    X = _as64(X)
    Z = _as64(Z)
    xs, zs = sp.issparse(X), sp.issparse(Z)
    if not xs and not zs:
        if out is None:
            return X @ Z.T
        if out.flags.f_contiguous:
            np.matmul(Z, X.T, out=out.T)          # (Z Xᵀ) into the C-contiguous transpose
            return out
        return np.matmul(X, Z.T, out=out)
    if out is not None:
        out[...] = _dot(X, Z)
        return out
    if xs and not zs:
        return np.ascontiguousarray(X @ Z.T)
    if not xs and zs:
        return np.ascontiguousarray((Z @ X.T).T)
    # both sparse: densify the smaller one when it is small, else sparse product
    if Z.shape[0] * Z.shape[1] <= _MAX_BLOCK_ENTRIES:
        return np.ascontiguousarray(X @ Z.toarray().T)
    if X.shape[0] * X.shape[1] <= _MAX_BLOCK_ENTRIES:
        return np.ascontiguousarray((Z @ X.toarray().T).T)
    return np.asarray((X @ Z.T).toarray())


def kernel_matrix(X, Z=None, *, kernel="rbf", gamma=1.0, degree=2, coef0=0.0, out=None) -> np.ndarray:
    """Kernel block ``K[i, j] = k(X[i], Z[j])`` (float64, shape (len(X), len(Z))).

    ``Z=None`` means ``Z = X`` (then the result is exactly symmetric and, for
    the Gaussian kernel, exactly 1 on the diagonal).  ``out``: a float64
    (len(X), len(Z)) array, Fortran-contiguous or with unit column stride
    (e.g. the first columns of a wider buffer, such as
    :meth:`RankStatistics.workspace`), that receives the block instead of a
    new array; it is returned.  A Fortran-contiguous ``out`` is filled through
    its C-contiguous transpose (same values).
    """
    same = Z is None
    if same:
        Z = X
    if X.shape[1] != Z.shape[1]:
        raise ValueError(f"X has {X.shape[1]} features but the kernel's second argument has "
                         f"{Z.shape[1]}; they must match")
    if out is not None:
        if (not isinstance(out, np.ndarray) or out.dtype != np.float64 or out.shape != (X.shape[0], Z.shape[0])
                or (out.size and out.strides[1] != 8 and not out.flags.f_contiguous) or not out.flags.writeable):
            raise ValueError(f"out must be a writeable float64 array of shape {(X.shape[0], Z.shape[0])}, "
                             "Fortran-contiguous or with unit column stride")
    if callable(kernel):
        K = np.asarray(kernel(X, Z), dtype=np.float64)
        if K.shape != (X.shape[0], Z.shape[0]):
            raise ValueError(f"callable kernel returned shape {K.shape}; expected "
                             f"{(X.shape[0], Z.shape[0])} = (len(X), len(Z))")
        if not np.isfinite(K).all():
            raise ValueError("callable kernel returned NaN or infinity")
        if out is not None:
            out[...] = K
            return out
        return np.ascontiguousarray(K)
    K = np.ascontiguousarray(_dot(X, Z), dtype=np.float64) if out is None else _dot(X, Z, out=out)
    par = K.size >= _PARALLEL_ENTRIES
    # a Fortran-contiguous out: the elementwise loops run on its C-contiguous transpose (X and Z swap roles)
    flip = out is not None and K.flags.f_contiguous and not K.flags.c_contiguous
    Kc = K.T if flip else K
    if kernel == "linear":
        pass
    elif kernel == "poly":
        from . import _kernel_kernels as _kk
        (_kk.poly_from_dot_parallel if par else _kk.poly_from_dot)(Kc, float(gamma), float(coef0), int(degree))
    elif kernel == "rbf":
        from . import _kernel_kernels as _kk
        nx = _sq_norms(X)
        nz = nx if same else _sq_norms(Z)
        (_kk.rbf_exponent_from_dot_parallel if par else _kk.rbf_exponent_from_dot)(
            Kc, nz if flip else nx, nx if flip else nz, float(gamma), bool(same))
        np.exp(Kc, out=Kc)
    else:  # pragma: no cover - check_kernel guards
        raise ValueError(f"unknown kernel {kernel!r}")
    if same:  # exact symmetry (BLAS may round the two triangles differently)
        if out is not None:
            out[...] = 0.5 * (K + K.T)
            return out
        K = 0.5 * (K + K.T)
    return K


class KernelColumns:
    """``k(X, Z)`` for many row blocks X against one fixed Z (e.g. the basis of sparse RankRLS).

    Z's float64 copy and squared norms are made once; ``cols.into_rows(X, A,
    r0)`` then writes the block into rows ``r0:r0 + len(X)`` of a row-major
    buffer ``A`` (e.g. a workspace with more columns) with one BLAS product
    straight into ``A`` and the elementwise map in place: no temporary of the
    block's size.  ``cols(X, out)`` fills a float64 ``(len(X), len(Z))`` array
    of any layout.  The values
    are those of :func:`kernel_matrix` (same product, same map).  CSR input
    and callable kernels go through :func:`kernel_matrix` and are copied in.

    Examples
    --------
    >>> import numpy as np
    >>> from streamrank.kernels import KernelColumns, check_kernel, kernel_matrix
    >>> X, Z = np.random.default_rng(0).normal(size=(2, 5, 3))
    >>> A = np.empty((5, 6))
    >>> cols = KernelColumns(check_kernel("rbf", gamma=0.5), Z)
    >>> np.allclose(cols.into_rows(X, A, 0)[:, :5], kernel_matrix(X, Z, kernel="rbf", gamma=0.5))
    True
    """

    def __init__(self, spec: KernelSpec, Z):
        self.spec = spec
        self.Z = Z
        self._fast = not spec.is_callable and not sp.issparse(Z)
        if self._fast:
            self._Z64 = np.ascontiguousarray(Z, dtype=np.float64)
            self._nz = _sq_norms(self._Z64)

    def __call__(self, X, out):
        """Write k(X, Z) into ``out`` (float64, (len(X), len(Z))) and return it."""
        if out.dtype != np.float64 or out.shape != (X.shape[0], self.Z.shape[0]) or not out.flags.writeable:
            raise ValueError(f"out must be a writeable float64 array of shape {(X.shape[0], self.Z.shape[0])}")
        if out.flags.c_contiguous:
            self.into_rows(X, out, 0)
        else:                                   # any other layout: computed aside, copied in
            out[...] = self.into_rows(X, np.empty(out.shape), 0)
        return out

    def into_rows(self, X, A, r0: int):
        """Write k(X, Z) into ``A[r0:r0 + len(X), :len(Z)]`` of a C-contiguous float64 A (e.g. a workspace
        with more columns): the product goes straight there and the map runs on A itself, vectorised."""
        m, r1 = self.Z.shape[0], int(r0) + X.shape[0]
        if A.dtype != np.float64 or not A.flags.c_contiguous or A.ndim != 2 or A.shape[1] < m or r1 > A.shape[0]:
            raise ValueError(f"A must be a C-contiguous float64 array with >= {m} columns and >= {r1} rows")
        self._check(X)
        if not self._fast or sp.issparse(X) or X.shape[0] == 0:
            A[r0:r1, :m] = self.spec(X, self.Z)
            return A
        self._product_and_map(np.asarray(X, dtype=np.float64), A, int(r0))
        return A

    def _check(self, X):
        if X.shape[1] != self.Z.shape[1]:
            raise ValueError(f"X has {X.shape[1]} features but the kernel's second argument has "
                             f"{self.Z.shape[1]}; they must match")

    def _product_and_map(self, X64, A, r0):
        from . import _kernel_kernels as _kk

        m, r1 = self._Z64.shape[0], r0 + X64.shape[0]
        K = A[r0:r1, :m]
        np.matmul(X64, self._Z64.T, out=K)
        if self.spec.kernel == "rbf":
            _kk.rbf_exponent_rows(A, r0, r1, m, _sq_norms(X64), self._nz, float(self.spec.gamma))
            np.exp(K, out=K)
        elif self.spec.kernel == "poly":
            _kk.poly_rows(A, r0, r1, m, float(self.spec.gamma), float(self.spec.coef0), int(self.spec.degree))


def kernel_diag(X, *, kernel="rbf", gamma=1.0, degree=2, coef0=0.0) -> np.ndarray:
    """``k(x_i, x_i)`` for every row, without forming the matrix (callables: row by row)."""
    if kernel == "rbf":
        return np.ones(X.shape[0])
    if kernel == "linear":
        return _sq_norms(X)
    if kernel == "poly":
        return (gamma * _sq_norms(X) + coef0) ** degree
    return np.array([kernel_matrix(X[i:i + 1], None, kernel=kernel)[0, 0] for i in range(X.shape[0])])


def kernel_rows(spec: KernelSpec, X, Z, coef=None, *, max_entries: int = _MAX_BLOCK_ENTRIES):
    """``k(X, Z) @ coef`` in row chunks so that at most ``max_entries`` kernel values are alive.

    With ``coef=None`` the chunks of ``k(X, Z)`` are yielded as ``(row0, block)``.
    """
    n = X.shape[0]
    step = max(1, int(max_entries // max(1, Z.shape[0])))
    if coef is None:
        def gen():
            for r0 in range(0, n, step):
                yield r0, spec(X[r0:r0 + step], Z)
        return gen()
    coef = np.asarray(coef, dtype=np.float64)
    out = np.empty((n,) + coef.shape[1:], dtype=np.float64)
    for r0 in range(0, n, step):
        out[r0:r0 + step] = spec(X[r0:r0 + step], Z) @ coef
    return out

"""scipy.sparse only where sparse data is (issue 22): a test that imports nothing, and the module on first use.

Importing ``scipy.sparse`` costs 0.2-0.35 s in a process that already has
numpy, most of it in scipy's array-API layer, which touches every attribute
of numpy and so imports ``numpy.f2py``, ``numpy.testing`` (with unittest,
email and importlib.metadata), ``numpy.random``, ``numpy.ma``...  A warm
``streamrank ingest``, ``evaluate`` or ``predict`` of a dense store is about
1 s, so that import was a quarter of it although nothing in it is sparse.

* :func:`issparse` answers False without importing scipy when
  ``scipy.sparse`` is not in :data:`sys.modules`: an object cannot be a scipy
  sparse array or matrix when scipy.sparse was never imported (its classes
  live in ``scipy.sparse._csr`` and friends, whose import imports the
  package first -- unpickling one too).  Otherwise it is
  ``scipy.sparse.issparse``, so a user who imports scipy.sparse *after*
  streamrank, or passes a ``csr_array`` or a ``csr_matrix``, is served as
  before.
* :data:`sp` stands for the module in code that builds CSR:
  ``from .._sparse import sp`` in place of ``import scipy.sparse as sp``.
  ``sp.issparse`` is :func:`issparse`; any other attribute
  (``sp.csr_matrix``, ``sp.vstack``, ``sp.diags``...) imports scipy.sparse
  on first use and is looked up on it each time (so nothing is cached that a
  test's monkeypatch could miss).  :func:`scipy_sparse` returns the module
  itself.

Modules that keep ``import scipy.sparse`` (or ``scipy.linalg``) at their top
are those whose every use is sparse or needs the solver, and that nothing on
a dense path imports (``tests/core/test_no_scipy.py`` checks this list
against the sources, and the dense paths in fresh interpreters):

* ``streamrank.rankrls.cg`` -- its operator is a
  ``scipy.sparse.linalg.LinearOperator`` and its per-group sums are CSR
  indicator products, dense data included (``--learner cg``);
* ``streamrank.rankrls.kernel``, ``streamrank.rankrls._dual``,
  ``streamrank.rankrls._sparse_kernel``, ``streamrank.rankrls.transductive``
  -- the kernel learners: LAPACK solves (``scipy.linalg``), a CSR basis;
* ``streamrank.sgd._base``, ``streamrank.sgd._table``,
  ``streamrank.sgd.bilinear``, ``streamrank.sgd.pairwise`` -- the SGD
  rankers turn every input into canonical CSR, and the bilinear weights W
  are a CSR matrix;
* ``streamrank.datasets.text``, ``streamrank.datasets.newsgroups``,
  ``streamrank.datasets.mnist``, ``streamrank.datasets.reuters`` -- text and
  image collections as CSR matrices (``streamrank.datasets.synthetic`` goes
  through :data:`sp`: the README's ``make_letor_like`` is dense).

* ``streamrank.pipelines._nightly_ingest``, ``streamrank.pipelines._nightly_views`` -- the nightly
  pipeline, which imports public names only (``tests/test_pipeline_imports.py``) and fits through scipy
  anyway (its gate and learners); no command of the CLI imports it.

Everything else goes through :data:`sp` (or imports scipy inside the
function that needs it, as ``RankRLS``'s solve imports ``scipy.linalg``).
"""
from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING

__all__ = ["issparse", "scipy_sparse", "sp"]


def issparse(x) -> bool:
    """``scipy.sparse.issparse(x)``, answered False without importing scipy when scipy.sparse was never imported."""
    mod = sys.modules.get("scipy.sparse")
    # None: never imported.  No ``issparse`` yet: another thread is importing it right now, and no sparse
    # object can exist before the import has made its classes.
    test = getattr(mod, "issparse", None)
    return False if test is None else test(x)


def scipy_sparse() -> types.ModuleType:
    """The ``scipy.sparse`` module, imported now if it was not (code about to build or combine sparse matrices)."""
    return importlib.import_module("scipy.sparse")


class _LazySparse:
    """``scipy.sparse`` on first use; its ``issparse`` is :func:`issparse` (see the module doc)."""

    __slots__ = ()

    issparse = staticmethod(issparse)

    def __getattr__(self, name):
        return getattr(scipy_sparse(), name)

    def __dir__(self):
        return dir(scipy_sparse())

    def __repr__(self):
        return "<scipy.sparse, imported on first use (streamrank._sparse)>"


if TYPE_CHECKING:        # type checkers see the module itself, so ``sp.csr_matrix`` stays a valid annotation
    import scipy.sparse as sp
else:
    #: stands for ``scipy.sparse`` (``from .._sparse import sp``): imported on the first attribute but issparse
    sp = _LazySparse()

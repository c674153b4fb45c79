"""Helpers shared by the streamrank-only benchmarks (rankrls_linear, distributed_scaling, stream_throughput).

* :func:`write_dense_store` — a synthetic GroupStore: X ~ N(0, 1) float32,
  y = X w + N(0, 1), groups of ``group_size`` consecutive rows, appended in
  batches of ``batch`` rows (the data depend on ``seed`` and ``batch``);
* :func:`scratch_dir` — a temporary working directory removed on exit.

Not part of the streamrank package: benchmarks only.  (The peer and
reproduction benchmarks share ``_bench_common.py``.)
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["write_dense_store", "scratch_dir"]


def write_dense_store(path, rows, n_features, group_size, *, seed=0, batch=200_000, batch_id_prefix=None):
    """Create (overwrite) a dense GroupStore at ``path``; returns it opened read-only.

    ``batch_id_prefix``: each append gets batch id ``f"{prefix}{first row}"``
    (default: the store's own ids).
    """
    import streamrank as sr

    rng = np.random.default_rng(seed)
    w = rng.normal(size=n_features)
    store = sr.GroupStore.create(path, n_features=n_features, overwrite=True)
    for a in range(0, rows, batch):
        b = min(a + batch, rows)
        X = rng.normal(size=(b - a, n_features)).astype(np.float32)
        y = X @ w + rng.normal(size=b - a)
        qid = np.arange(a, b) // group_size
        if batch_id_prefix is None:
            store.append(X, y, qid)
        else:
            store.append(X, y, qid, batch_id=f"{batch_id_prefix}{a}")
    return sr.GroupStore.open(path)


@contextlib.contextmanager
def scratch_dir(prefix, dir=None):
    """``tempfile.mkdtemp(prefix=prefix, dir=dir)`` as a Path, removed (whatever happens) on exit.

    ``dir`` (a benchmark's ``--dir``) is created, parents included, if it does not exist yet.
    """
    if dir is not None:
        os.makedirs(dir, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=dir))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

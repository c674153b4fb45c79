"""A small MQ2008 slice (LETOR 4.0, Fold1: training rows and held-out test rows), read from the archive."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

_HERE = pathlib.Path(__file__).resolve().parent
for _p in (_HERE, _HERE.parent / "reference"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from streamrank.datasets._paths import data_path  # noqa: E402
from streamrank.datasets.letor import iter_letor, letor_member  # noqa: E402

ARCHIVE = data_path("letor", "MQ2008_QueryLevelNorm.tar.gz")


def _read(split, rows):
    parts = list(iter_letor(ARCHIVE, member=letor_member("MQ2008", 1, split), n_features=46, limit_rows=rows))
    X = np.vstack([p.X for p in parts]).astype(np.float32)
    y = np.concatenate([p.y for p in parts]).astype(np.float64)
    q = np.concatenate([p.qid for p in parts])
    return X, y, q


@pytest.fixture(scope="session")
def mq2008():
    if not ARCHIVE.exists():
        pytest.skip("MQ2008 archive not available")
    Xtr, ytr, qtr = _read("train", 2000)
    Xte, yte, qte = _read("test", 1200)
    return Xtr, ytr, qtr, Xte, yte, qte

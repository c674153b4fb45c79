"""sr.plot.learning_curve writes the two panels of the paper's Figure 1."""
from __future__ import annotations

import importlib.util
import numpy as np
import pytest
import scipy.sparse as sp
from sgd_testdata import ArrayTuples, random_tuples

import streamrank as sr

# skipped without matplotlib, which is not imported at collection (~0.5 CPU-s in every pytest process)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs matplotlib")


@pytest.mark.slow   # a fit with history and a plot (matplotlib): 3.1 s wall under load 13
def test_learning_curve_png(tmp_path):
    Q, Dp, Dn = random_tuples(200, 8, 8, seed=1)
    src = ArrayTuples(Q, sp.vstack([Dp, Dn]), np.c_[np.arange(200), np.arange(200), 200 + np.arange(200)])
    m = sr.SparseSGDRanker(eta0=1.0, l1=0.01, shrink_every=5).fit(
        src, n_steps=200, validation=random_tuples(40, 8, 8, seed=2), checkpoint_every=50)
    out = tmp_path / "curve.png"
    fig = sr.plot.learning_curve(m, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(fig.axes) == 2
    assert len(fig.axes[0].lines) == 2 and len(fig.axes[1].lines) == 2  # sparse + refit
    with pytest.raises(ValueError, match="history_"):
        sr.plot.learning_curve(sr.SparseSGDRanker(), tmp_path / "x.png")

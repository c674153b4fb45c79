"""The parts of benchmarks/rankrls_linear.py and benchmarks/rankrls_kernel.py that print the issue's ratios run."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _import(name):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return __import__(name)


def test_rankrls_linear_dense_case(tmp_path, capsys):
    bench = _import("rankrls_linear")
    out = bench.dense_case(3000, 6, 20, tmp_path, 1000, "dense", repeat=2)
    text = capsys.readouterr().out
    assert "x max(a, b) (target <= 1.3)" in text and "x max(block pass, b)" in text and "CPU seconds" in text
    assert out["fit"] > 0 and out["fit_cpu"] > 0 and np.isfinite(out["gemm32"]) and out["zarr_read"] > 0


def test_rankrls_kernel_sparse_worker(tmp_path):
    import streamrank as sr

    bench = _import("rankrls_kernel")
    store = sr.GroupStore.create(tmp_path / "s", n_features=bench.N_FEATURES)
    X, y, qid = bench._data(400, seed=3)
    store.append(X.astype(np.float32), y, qid)
    res = bench._worker_sparse(str(tmp_path / "s"), 20, 1.0, 100, 64)
    assert res["rows"] == 400 and res["fit"] > 0 and res["gemm"] > 0 and res["fit_cpu"] > 0
    assert 0.0 <= res["ndcg10"] <= 1.0

"""benchmarks/sgd_throughput.py runs end to end in --smoke mode (no timing asserted)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sgd_throughput_smoke(capsys):
    assert _load("sgd_throughput").main(["--smoke", "--no-vw", "--tuples", "500"]) == 0
    out = capsys.readouterr().out
    assert "tuples/s" in out and "ratio streamrank" in out


def test_sparse_sgd_20ng_has_help():
    mod = _load("sparse_sgd_20ng")
    assert "Table II" in mod.build_parser().format_help()

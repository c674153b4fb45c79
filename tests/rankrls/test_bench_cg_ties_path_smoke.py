"""benchmarks/rankrls_cg_ties_path.py runs end to end in --smoke mode (no timing asserted)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "rankrls_cg_ties_path.py"


def test_smoke(capsys):
    spec = importlib.util.spec_from_file_location("_bench_rankrls_cg_ties_path", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--smoke"]) == 0
    out = capsys.readouterr().out
    assert "ratio to raw pass" in out and "ratio path / cold fits" in out

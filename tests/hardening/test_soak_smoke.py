"""benchmarks/soak.py --smoke: the soak harness runs and its chunked references agree."""
from __future__ import annotations

import importlib.util
from pathlib import Path


def test_soak_smoke(capsys):
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py"
    spec = importlib.util.spec_from_file_location("soak", path)
    soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak)
    assert soak.main(["--smoke"]) == 0
    assert "result equal to the chunked reference: True" in capsys.readouterr().out

"""Makes ``tests/reference`` importable for the metrics tests."""
from __future__ import annotations

import pathlib
import sys

_REF = pathlib.Path(__file__).resolve().parents[1] / "reference"
if str(_REF) not in sys.path:
    sys.path.insert(0, str(_REF))

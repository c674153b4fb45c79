"""Makes ``tests/reference`` importable for the metrics tests, and has them test the kernels.

A metrics call runs a kernel's plain-Python twin while the process has not
set numba up and the twins' budget lasts (issue 22), so which of the two a
test met would depend on the tests before it.  Here every test meets the
kernel unless it asks for the twins (``streamrank._numba.twins(True)``, as
``test_twins.py`` does, which also compares the two).  To run every metrics
test on the twins instead: ``STREAMRANK_TEST_TWINS=1 pytest tests/metrics``.
"""
from __future__ import annotations

import os
import pathlib
import sys

import pytest

from streamrank._numba import twins

_REF = pathlib.Path(__file__).resolve().parents[1] / "reference"
if str(_REF) not in sys.path:
    sys.path.insert(0, str(_REF))


@pytest.fixture(autouse=True)
def _kernels_unless_asked():      # or the twins, with STREAMRANK_TEST_TWINS=1
    with twins(os.environ.get("STREAMRANK_TEST_TWINS") == "1"):
        yield

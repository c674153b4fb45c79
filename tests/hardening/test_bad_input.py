"""Bad input at every public entry point: a specific error or correct handling.

The table of cases and entry points lives in :mod:`badinput_table` (run it as
``python -m tests.hardening.badinput_table`` to print every outcome).  Each
cell either raises the expected exception type with a message naming the
argument (and the row, where there is one), or gives the same result as the
well-formed equivalent input.  A crash inside numba, a hang or a silently
different result fails the cell.
"""
from __future__ import annotations

import warnings

import pytest

from . import badinput_table as T

CELLS = [(e, c) for e in T.ENTRIES for c in T.CASES if T.expectation(e, c) is not T.NA]


@pytest.mark.parametrize("entry,case", CELLS, ids=[f"{e.name}-{c.name}" for e, c in CELLS])
def test_bad_input_cell(entry, case, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expect, problem, text = T.outcome(entry, case, tmp_path)
    assert problem is None, f"{entry.name} × {case.name}: {problem}"


def test_table_covers_every_entry_and_case():
    assert {e.name for e, _ in CELLS} == {e.name for e in T.ENTRIES}
    assert {c.name for _, c in CELLS} == {c.name for c in T.CASES}

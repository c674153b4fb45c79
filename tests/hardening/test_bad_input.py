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


def _quick_cells(cells):
    """One cell per case, each taken from the entry point with the fewest cells picked so far, so that every case
    and every entry point is in the quick loop (``pytest -m "not slow"``); the full grid runs in ``make test``."""
    picked, uses = set(), {e.name: 0 for e, _ in cells}
    for case in T.CASES:
        entries = [e for e, c in cells if c is case]
        if entries:
            entry = min(entries, key=lambda e: uses[e.name])
            uses[entry.name] += 1
            picked.add((entry.name, case.name))
    for entry in T.ENTRIES:   # an entry point no case reached yet: its first cell
        if not uses[entry.name]:
            first = next(c for e, c in cells if e is entry)
            picked.add((entry.name, first.name))
    return picked


QUICK = _quick_cells(CELLS)


@pytest.mark.parametrize("entry,case", [
    pytest.param(e, c, id=f"{e.name}-{c.name}",
                 marks=() if (e.name, c.name) in QUICK else pytest.mark.slow)  # the other ~750 cells: ~28 CPU-s
    for e, c in CELLS])
def test_bad_input_cell(entry, case, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expect, problem, text = T.outcome(entry, case, tmp_path)
    assert problem is None, f"{entry.name} × {case.name}: {problem}"


def test_table_covers_every_entry_and_case():
    assert {e.name for e, _ in CELLS} == {e.name for e in T.ENTRIES}
    assert {c.name for _, c in CELLS} == {c.name for c in T.CASES}


def test_quick_loop_keeps_every_entry_and_case():
    assert {e for e, _ in QUICK} == {e.name for e in T.ENTRIES}
    assert {c for _, c in QUICK} == {c.name for c in T.CASES}
    assert QUICK <= {(e.name, c.name) for e, c in CELLS}

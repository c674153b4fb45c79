"""``streamrank ingest``'s click-log columns: ``--weight-column``, ``--click-column``, ``--position-column``.

A GroupStore may keep per-row ``weight``, ``click`` and ``position`` columns
(:mod:`streamrank.io.row_columns`).  Ingest maps them *by name* — a Parquet
column or an ``.npz`` array — only when named: a column that happens to be
called ``position`` may be a feature, so nothing is mapped by default.  A
new store keeps the columns named; an existing store needs exactly its own
(every night's file carries them).  A zarr store copied into another keeps
its columns (a target that keeps a column the source lacks refuses).
LETOR text has no such columns.
"""
from __future__ import annotations

__all__ = ["add_column_args", "named_columns", "refuse_columns"]

_HELP = {
    "weight": "a row weight >= 0 (sample_weight; fit --weights weight)",
    "click": "0/1 clicks (fit --ips)",
    "position": "the 1-based rank the row was shown at (fit --ips)",
    "ranker": "the id (>= 0) of the logging ranker that showed the row (fit --ips --propensity estimate:harvest)",
}


def add_column_args(p) -> None:
    for name, what in _HELP.items():
        p.add_argument(f"--{name}-column", default=None, metavar="COL",
                       help=f"Parquet column / .npz array kept as the store's {name!r} column: {what}")


def named_columns(args) -> dict:
    """``{store column: file column}`` of the ``--<col>-column`` options given."""
    return {n: getattr(args, f"{n}_column") for n in _HELP if getattr(args, f"{n}_column", None) is not None}


def refuse_columns(args, store, what: str) -> None:
    """A source without row columns (LETOR text): refuse ``--<col>-column`` and a store that keeps columns."""
    named = named_columns(args)
    if named:
        raise ValueError(f"--{next(iter(named))}-column: {what} has no weight/click/position columns "
                         "(Parquet and .npz do)")
    if store is not None and store.row_columns:
        raise ValueError(f"the store {args.store} keeps the columns {list(store.row_columns)}; {what} has none "
                         "(ingest Parquet or .npz naming them)")

"""Argument types of the command line: the λ GRID syntax (``parse_grid``), folds, positive numbers,
``--storage-options JSON`` (``parse_storage_options``)."""
from __future__ import annotations

import argparse
import math

import numpy as np

from ._common import UsageError


def _number(text: str) -> float:
    t = text.strip()
    if "^" in t:
        base, exp = t.split("^", 1)
        return float(base) ** float(exp)
    return float(t)


def _power(text: str):
    """``B^E`` -> (B, E); a plain number -> None."""
    if "^" not in text:
        return None
    base, exp = text.split("^", 1)
    return float(base), float(exp)


GRID_HELP = ("'a,b,c' (the values; items may be powers 2^-3), 'LO:HI:N' (N values log-spaced from LO to HI, "
             "both included; LO, HI may be powers: 10^-3:10^3:7) or 'B^A:B^C' (the integer powers of B from "
             "A to C: 2^-15:2^15 is 2^-15:2^15:31)")


def parse_grid(text: str) -> np.ndarray:
    """Parse a λ grid (the ``--alphas GRID`` of ``streamrank`` and of :mod:`streamrank.pipelines.nightly`).

    One grammar, one meaning per form:

    * ``a,b,c`` — these values (an item may be a power ``2^-3``);
    * ``LO:HI:N`` — N values spaced evenly on a log scale from LO to HI, both
      included (``np.geomspace(LO, HI, N)``); LO and HI may be powers, so
      ``10^-3:10^3:7`` is 0.001, 0.01, …, 1000.  N is a count (an integer
      >= 1; N = 1 needs LO = HI), never a step;
    * ``B^A:B^C`` — shorthand for ``B^A:B^C:(C-A+1)``, the integer powers of
      B from A to C (``2^-15:2^15``, the papers' grid, 31 values); A and C
      integers, the same base on both sides.

    Anything else — ``LO:HI`` between plain numbers, a fractional or
    negative N, LO > HI, a value <= 0 or not finite — is a
    :class:`UsageError` naming the accepted forms.
    """
    s = str(text).strip()

    def bad(why):
        return UsageError(f"bad GRID {text!r}: {why}; use {GRID_HELP}")

    try:
        if ":" in s:
            parts = [p.strip() for p in s.split(":")]
            if len(parts) == 3:
                lo, hi = _number(parts[0]), _number(parts[1])
                try:
                    n = int(parts[2])
                except ValueError:
                    raise bad(f"N = {parts[2]!r} is not a whole number of values (N is a count, not a step)") \
                        from None
                if n < 1:
                    raise bad(f"N = {n} values")
                if n == 1 and lo != hi:
                    raise bad("N = 1 value between two different ends")
            elif len(parts) == 2:
                pa, pb = _power(parts[0]), _power(parts[1])
                if pa is None or pb is None:
                    raise bad("'LO:HI' needs N ('LO:HI:N'), unless both ends are powers of one base (B^A:B^C)")
                if pa[0] != pb[0]:
                    raise bad(f"the two ends have different bases ({pa[0]:g} and {pb[0]:g})")
                if pa[1] != int(pa[1]) or pb[1] != int(pb[1]):
                    raise bad("B^A:B^C needs integer exponents (for other ends give N: LO:HI:N)")
                lo, hi, n = pa[0] ** pa[1], pb[0] ** pb[1], int(pb[1]) - int(pa[1]) + 1
                if n < 1:
                    raise bad(f"LO = {lo:g} > HI = {hi:g}")
            else:
                raise bad(f"{len(parts)} ':'-separated parts")
            if not (math.isfinite(lo) and math.isfinite(hi) and lo > 0 and hi > 0):
                raise bad("LO and HI must be finite numbers > 0")
            if lo > hi:
                raise bad(f"LO = {lo:g} > HI = {hi:g}")
            vals = np.geomspace(lo, hi, n)
            if n > 1:
                vals[0], vals[-1] = lo, hi          # the ends exactly as written
        else:
            vals = np.asarray([_number(x) for x in s.split(",") if x.strip()], dtype=np.float64)
    except (ValueError, ZeroDivisionError, OverflowError):
        raise bad("not a number") from None
    vals = np.asarray(vals, dtype=np.float64)
    if vals.size == 0 or not np.all(np.isfinite(vals)) or np.any(vals <= 0):
        raise bad("every value must be a finite number > 0")
    return vals


def _grid_type(text):
    try:
        return parse_grid(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _folds_type(text):
    if text == "query":
        return "query"
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 2 or 'query', got {text!r}") from None
    if k < 2:
        raise argparse.ArgumentTypeError(f"expected an integer >= 2 or 'query', got {text!r}")
    return k


def _positive_float(text):
    try:
        v = _number(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return v


def parse_storage_options(text: str) -> dict:
    """``--storage-options JSON``: a JSON object of fsspec options (argparse type of every command with a
    store or model URL, the ``streamrank`` command's and the pipelines' alike)."""
    import json

    try:
        opts = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc})") from None
    if not isinstance(opts, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {type(opts).__name__}")
    return opts

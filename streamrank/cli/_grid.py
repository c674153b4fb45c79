"""Argument types of the command line: the λ GRID syntax (``parse_grid``), folds, positive numbers."""
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


def parse_grid(text: str) -> np.ndarray:
    """Parse a λ grid: ``a,b,c`` | ``2^A:2^B[:STEP]`` | ``10^A:10^B[:STEP]`` | ``LO:HI:N`` (log-spaced)."""
    s = str(text).strip()
    try:
        if ":" in s:
            parts = s.split(":")
            if len(parts) not in (2, 3):
                raise ValueError
            a, b = parts[0].strip(), parts[1].strip()
            if "^" in a and "^" in b:
                ba, ea = a.split("^", 1)
                bb, eb = b.split("^", 1)
                if float(ba) != float(bb):
                    raise ValueError
                step = float(parts[2]) if len(parts) == 3 else 1.0
                if step <= 0:
                    raise ValueError
                exps = np.arange(float(ea), float(eb) + step / 2, step)
                vals = float(ba) ** exps
            else:
                if len(parts) != 3:
                    raise ValueError
                n = int(parts[2])
                if n < 1:
                    raise ValueError
                vals = np.geomspace(_number(a), _number(b), n)
        else:
            vals = np.asarray([_number(x) for x in s.split(",") if x.strip()], dtype=np.float64)
    except (ValueError, ZeroDivisionError, OverflowError):
        raise UsageError(f"bad GRID {text!r}: use a comma list '0.1,1,10', powers '2^-15:2^15[:STEP]' "
                         "or 'LO:HI:N' (N log-spaced values)") from None
    vals = np.asarray(vals, dtype=np.float64)
    if vals.size == 0 or not np.all(np.isfinite(vals)) or np.any(vals <= 0):
        raise UsageError(f"bad GRID {text!r}: every value must be a finite number > 0")
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

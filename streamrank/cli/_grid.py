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


def _power_of_two_exponent(side: str) -> int:
    """``2^E`` -> E (an integer); a plain number x -> int(log2 x) (truncated toward 0)."""
    if "^" in side:
        base, exp = side.split("^", 1)
        if float(base) != 2.0:
            raise ValueError
        return int(exp)
    x = float(side)
    if not (math.isfinite(x) and x > 0):
        raise ValueError
    return int(np.log2(x))


def parse_grid(text: str, *, plain_range: bool = False) -> np.ndarray:
    """Parse a λ grid (the ``--alphas GRID`` of ``streamrank`` and of :mod:`streamrank.pipelines.nightly`).

    * ``a,b,c`` — the values (items may be powers ``2^-3``);
    * ``B^A:B^C[:STEP]`` — the powers B^A, B^(A+STEP), …, B^C (inclusive, same base B on both sides);
    * ``LO:HI:N`` — N values log-spaced from LO to HI.

    ``plain_range=True`` (:mod:`streamrank.pipelines.nightly`, whose ``--alphas`` always took it) also accepts
    ``LO:HI`` with no N and a plain number on at least one side: the powers of two
    2^int(log2 LO) … 2^int(log2 HI) (a side may be ``2^E``).  The ``streamrank`` command refuses
    ``LO:HI`` (how many values between would be a guess): there it is a usage error.
    """
    s = str(text).strip()
    try:
        if ":" in s:
            parts = s.split(":")
            if len(parts) not in (2, 3):
                raise ValueError
            a, b = parts[0].strip(), parts[1].strip()
            if plain_range and len(parts) == 2 and not ("^" in a and "^" in b):
                lo, hi = _power_of_two_exponent(a), _power_of_two_exponent(b)
                vals = 2.0 ** np.arange(lo, hi + 1)
            elif "^" in a and "^" in b:
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

"""Phases of a long computation, told to whoever shows progress (the command line); a no-op otherwise.

A learner wraps each long step in ``with phase(name, total, unit) as p:``
and calls ``p.update(n)`` as pieces finish (λ values, folds, groups).  A
step that cannot report from inside (one LAPACK call) is still a phase: the
display says which step runs instead of a bar frozen at 100 %.  The
reporter is set per context by :func:`reporting` (``streamrank.cli`` sets
one around a command); without one, :func:`phase` costs a context-variable
lookup.
"""
from __future__ import annotations

import contextlib
import contextvars

__all__ = ["phase", "reporting"]

_REPORTER: contextvars.ContextVar = contextvars.ContextVar("streamrank_phase_reporter", default=None)


class _Null:
    def update(self, n: int = 1) -> None:
        pass


_NULL = _Null()


@contextlib.contextmanager
def phase(name: str, total=None, unit: str = "steps"):
    """A named step of ``total`` ``unit`` (None: no count inside); yields a handle with ``update(n)``."""
    r = _REPORTER.get()
    if r is None:
        yield _NULL
        return
    handle = r.begin(name, total, unit)
    try:
        yield handle
    finally:
        r.end(handle)


@contextlib.contextmanager
def reporting(reporter):
    """Send the phases begun in this context to ``reporter`` (``begin(name, total, unit) -> handle``,
    ``end(handle)``; the handle has ``update(n)``)."""
    token = _REPORTER.set(reporter)
    try:
        yield reporter
    finally:
        _REPORTER.reset(token)

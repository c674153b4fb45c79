"""Phases of a long computation, told to whoever shows progress (the command line); a no-op otherwise.

A learner wraps each long step in ``with phase(name, total, unit) as p:``
and calls ``p.update(n)`` as pieces finish (λ values, folds, groups).  A
step that cannot report from inside (one LAPACK call) is still a phase: the
display says which step runs instead of a bar frozen at 100 %.  Phases nest
(the CV folds of a selection, the cg iterations of each fold's solve): the
display names the inner one inside the outer's count.  ``p.note(text)``
attaches a short state to the count (cg: the residual against the tolerance).  The
reporter is set per context by :func:`reporting` (``streamrank.cli`` sets
one around a command); without one, :func:`phase` costs a context-variable
lookup.
"""
from __future__ import annotations

import contextlib
import contextvars

__all__ = ["phase", "counted", "reporting"]

_REPORTER: contextvars.ContextVar = contextvars.ContextVar("streamrank_phase_reporter", default=None)


class _Null:
    def update(self, n: int = 1) -> None:
        pass

    def note(self, text: str) -> None:
        pass


_NULL = _Null()


@contextlib.contextmanager
def phase(name: str, total=None, unit: str = "steps"):
    """A named step of ``total`` ``unit`` (None: no count inside); yields a handle with ``update(n)`` and
    ``note(text)``."""
    r = _REPORTER.get()
    if r is None:
        yield _NULL
        return
    handle = r.begin(name, total, unit)
    try:
        yield handle
    finally:
        r.end(handle)


def counted(items, name: str, unit: str, total=None):
    """``items`` (folds, shards...) as a phase counting them: each is counted when the next one is asked
    for, i.e. when the loop body that used it has finished.  ``for f in counted(range(k), "CV folds", "folds")``."""
    with phase(name, total=len(items) if total is None else total, unit=unit) as p:
        for item in items:
            yield item
            p.update(1)


@contextlib.contextmanager
def reporting(reporter):
    """Send the phases begun in this context to ``reporter`` (``begin(name, total, unit) -> handle``,
    ``end(handle)``; the handle has ``update(n)`` and ``note(text)``)."""
    token = _REPORTER.set(reporter)
    try:
        yield reporter
    finally:
        _REPORTER.reset(token)

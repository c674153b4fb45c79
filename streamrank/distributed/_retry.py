"""Redo a piece of distributed work that lost a worker (killed, unreachable).

Used where the client drives many short steps whose inputs it scatters —
one CG product (:mod:`streamrank.distributed._cg`), one SGD round
(:mod:`streamrank.distributed._sgd`).  dask recomputes lost *tasks* by
itself, but scattered data is not recomputable, and a scatter or gather that
meets a dead worker raises.  Each step here is a pure function of what the
client holds (the vector, the round's model), so running it again gives the
same numbers.  Scatters are not broadcast: a broadcast waits on every worker
the scheduler still lists, a dead one included (measured: minutes of 30 s
connect timeouts); the other workers fetch the data from the one holding it.
"""
from __future__ import annotations

import time

__all__ = ["RETRIES", "lost_worker_errors", "with_retries"]

RETRIES = 3


def lost_worker_errors() -> tuple:
    """The exceptions of a step that lost a worker (dask's, and the OS's for a dead connection)."""
    from concurrent.futures import CancelledError

    from distributed import KilledWorker
    from distributed.comm.core import CommClosedError

    return (CommClosedError, KilledWorker, CancelledError, OSError)


def with_retries(client, step, *, on_loss=None, retries=None):
    """``step()``, run again (up to ``retries`` more times) when it loses a worker.

    Between attempts: a short wait, until the scheduler has a worker again,
    then ``on_loss()`` (e.g. scatter again what may have died with the
    worker).  Returns ``(result, n_retries)``; the last failure is raised.
    """
    retries = RETRIES if retries is None else int(retries)
    lost = lost_worker_errors()
    for attempt in range(retries + 1):
        try:
            return step(), attempt
        except lost:
            if attempt == retries:
                raise
            time.sleep(0.5 * (attempt + 1))      # let the scheduler notice the dead worker
            client.wait_for_workers(1, timeout=60)
            if on_loss is not None:
                on_loss()

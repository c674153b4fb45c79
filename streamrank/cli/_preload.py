"""Start-up of a console command: its heavy imports with the garbage collector paused, then frozen.

A warm ``streamrank ingest`` spends most of its CPU importing numpy, scipy, numba
and zarr (``benchmarks/cold_start.py`` prints where it goes).  Those imports
create ~130,000 objects that live until the process ends (modules, classes,
functions, numba's typing templates).  While they are being created CPython's
generational collector runs about 300 times, twice over every object in the
process, and finds no garbage: 0.17-0.23 CPU-s of a 1.6-2.0 CPU-s command,
measured on the collector's own callbacks.

So the console script (``streamrank ...`` / ``python -m streamrank.cli``, not
an in-process ``main([...])``, whose caller owns the collector) imports
the packages the command is about to import anyway with the collector paused,
moves what they created to the permanent generation (:func:`gc.freeze`, the
start-up pattern the :mod:`gc` documentation gives), and turns the collector
back on before the command starts: cyclic garbage made while the command
reads and fits is collected as before.  Measured: the collector's time in a warm
``fit`` goes from 186 ms to 34 ms.

Only commands whose every normal run imports these packages preload them, and
only when the command's local inputs (``--store``, ``--model``) exist: a
mistyped path is still reported at once, without ~0.5 CPU-s of imports first.
An import that fails here is left to the command, which reports it in its
usual way.
"""
from __future__ import annotations

import gc
import importlib
import os

__all__ = ["INPUTS", "PRELOAD", "preload_for", "preload_paused"]

_STORE_COMMANDS = ("scipy.sparse", "zarr")

#: command -> the packages every normal run of it imports (read or write a store).  numba is not preloaded:
#: on a small store or text file the kernels' twins do the work (``ingest``: the svmlight parser's numpy fast
#: path) and numba is never imported (``streamrank._numba.use_twin``); a big one imports it on its first kernel.
PRELOAD = {name: _STORE_COMMANDS for name in ("fit", "cv", "evaluate", "predict", "ingest")}

#: command -> the arguments naming what it reads (ingest's sources take archive members and globs: not checked)
INPUTS = {"fit": ("store",), "cv": ("store",), "evaluate": ("model", "store"), "predict": ("model", "store")}


def preload_for(args) -> None:
    """The preload of the parsed command ``args``, when it has one and its local inputs exist."""
    for dest in INPUTS.get(args.command, ()):
        path = getattr(args, dest, None)
        if isinstance(path, str) and "://" not in path and not os.path.exists(path):
            return                      # the command stops at once with its own error
    preload_paused(PRELOAD.get(args.command, ()))


def preload_paused(modules) -> None:
    """Import ``modules`` with the collector paused, freeze what they made, then restore the collector."""
    if not modules:
        return
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the command imports it again and reports the error its own way
                pass
        gc.freeze()
    finally:
        if was_enabled:
            gc.enable()

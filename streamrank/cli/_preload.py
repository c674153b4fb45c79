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

``scipy.sparse`` is preloaded only for a run that will import it (issue 22):
``ingest --sparse``, a store whose root metadata says it holds CSR (a sparse
group store, a tuple store), a learner that imports it whatever the data
(``cg``, the kernel and SGD learners), or a saved model of one of those.  A dense ``ingest``, ``fit --learner
rankrls``, ``evaluate`` or ``predict`` imports no scipy.sparse at all
(:mod:`streamrank._sparse`), and preloading it would add 0.2-0.35 s to them.
The metadata is only a hint here: a file that cannot be read or parsed means
"not sparse", and the command then reads the store as it always does.
"""
from __future__ import annotations

import gc
import importlib
import json
import os

__all__ = ["INPUTS", "PRELOAD", "SPARSE_PRELOAD", "preload_for", "preload_paused", "store_holds_csr"]

_STORE_COMMANDS = ("zarr",)

#: what a run on CSR data adds to its command's preload
SPARSE_PRELOAD = ("scipy.sparse",)
#: learners whose module imports scipy.sparse whatever the data (cg's operator and indicator products, the kernel
#: learners, the SGD rankers' CSR weights; streamrank._sparse lists them)
_SPARSE_LEARNERS = frozenset(("cg", "kernel", "sparse-kernel", "sgd-bilinear", "sgd-pairwise"))
#: saved models whose class's module imports scipy.sparse (the kernel learners and the SGD rankers)
_SPARSE_MODELS = frozenset(("KernelRankRLS", "TransductiveRankRLS", "SparseSGDRanker", "PairwiseSGDRanker"))
_TUPLE_FORMAT = "streamrank.tuple_store"    # streamrank.io.schema.TUPLE_FORMAT (not imported: it is the command's)

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
    modules = PRELOAD.get(args.command, ())
    if modules and _reads_csr(args):
        modules = modules + SPARSE_PRELOAD
    preload_paused(modules)


def _reads_csr(args) -> bool:
    """Whether this run will import scipy.sparse: ``--sparse``, a CSR learner or its model, a store holding CSR."""
    if getattr(args, "sparse", False) is True or getattr(args, "learner", None) in _SPARSE_LEARNERS:
        return True
    if args.command in ("evaluate", "predict"):
        model = _root_attributes(getattr(args, "model", None))
        if model.get("class") in _SPARSE_MODELS:
            return True
    return store_holds_csr(getattr(args, "store", None))


def store_holds_csr(path) -> bool:
    """True if the root ``zarr.json`` at the local ``path`` describes a sparse group store or a tuple store (a hint
    only: a file that cannot be read or parsed gives False, and the command reads and checks the store itself)."""
    attrs = _root_attributes(path)
    return attrs.get("sparse") is True or attrs.get("format") == _TUPLE_FORMAT


def _root_attributes(path) -> dict:
    """The attributes of the root ``zarr.json`` at a local ``path``; {} for a URL or anything unreadable."""
    if not isinstance(path, str) or "://" in path:
        return {}
    try:
        with open(os.path.join(path, "zarr.json"), "rb") as f:
            attrs = json.load(f).get("attributes")
    except (OSError, ValueError, AttributeError, RecursionError):
        return {}
    return attrs if isinstance(attrs, dict) else {}


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

"""The ``streamrank`` command line.

The commands and their usage lines: ``streamrank --help`` (the lines are
:data:`streamrank.cli._app.SYNOPSIS`); each command's options: ``streamrank COMMAND --help``.

Learners: ``rankrls`` (RankRLS, primal statistics), ``cg`` (RankRLS, conjugate
gradient), ``kernel`` (KernelRankRLS, exact dual), ``sparse-kernel``
(KernelRankRLS with ``--n-basis`` basis rows), ``sgd-bilinear``
(SparseSGDRanker on a *tuple* store), ``sgd-pairwise`` (PairwiseSGDRanker).

λ grids (``--alphas GRID``)
---------------------------
One grammar (:func:`parse_grid`), one meaning per form:

* a comma list ``0.01,0.1,1,10`` (items may be powers: ``2^-3,2^0,2^3``);
* ``LO:HI:N`` — N values spaced evenly on a log scale from LO to HI, both
  ends included; LO and HI may be powers (``10^-3:10^3:7`` is 0.001, 0.01,
  …, 1000).  N is a count, never a step;
* ``B^A:B^C`` — the integer powers of B from A to C, i.e. ``B^A:B^C:(C-A+1)``
  (``2^-15:2^15``, the papers' grid: 31 values).

Anything else (``LO:HI`` between plain numbers, a fractional N, LO > HI, a
value <= 0) is a usage error (exit 2) naming these forms.  The nightly
pipeline's ``--alphas`` takes the same grammar.

Progress and messages
---------------------
Long operations (ingest, every pass of a fit, evaluate, predict) show a tqdm
bar on a terminal and one plain log line every 10 s (``STREAMRANK_PROGRESS_SECONDS``)
when stderr is not a terminal (cron).  Each phase of a fit shows its own count (``decomposition``, ``CV folds``,
``cross-validation`` per λ, ``leave-query-out`` groups); a phase that
cannot count from inside (one LAPACK call) says when it starts and ends.
An exact kernel fit first logs its memory estimate (32·m² bytes) and is
refused above ``--max-memory-mb`` (default half the RAM), naming
``--learner sparse-kernel --n-basis N``.  Ctrl-C stops every phase within
about a second: the console script runs the command in a child process and
kills it if it is still inside native code 1 s after the signal
(:mod:`streamrank.cli._supervise`; ``STREAMRANK_NO_FORK=1`` runs in-process).
``--quiet`` silences progress and log
messages (results still go to stdout); ``--verbose`` adds debug messages and
the traceback of an error.

Exit codes
----------
=====  ==================================================================
0      success
1      unexpected internal error (rerun with --verbose and report it)
2      usage error: unknown option or learner, bad GRID, bad --out suffix
3      a path given does not exist (store, model, source file, tar member)
4      invalid data or format: not a streamrank store/model, newer format
       version, corrupt file, parse error (file:line), wrong store kind
5      cannot write: the output exists and is not replaceable, or another
       process is appending to the store (one writer at a time)
6      unsupported combination (e.g. --cv query with --learner cg)
7      nightly only: the night ran, but a new day failed the data checks and
       was quarantined (kept in the store, excluded from training)
130    interrupted (Ctrl-C / SIGINT; 143 for SIGTERM): nothing half-written
       is left — models are written to a temporary directory and renamed,
       store appends are atomic (an interrupted ingest resumes where it
       stopped when run again: committed chunks are skipped by batch id)
=====  ==================================================================

In Python the codes are the constants ``streamrank.cli.EXIT_OK`` ... ``EXIT_SIGTERM``
(``EXIT_CODES`` says each in words) and :func:`exit_code` maps an exception to its code: the
pipelines end with the same codes through them.

Modules
-------
``_app`` parser, ``main``, error -> exit code; ``_grid`` the GRID syntax
(``parse_grid``) and other argument types; ``_ingest`` ingest/info; ``_fit``
fit/cv; ``_evaluate`` evaluate/predict; ``_export`` export; ``_plot`` plot; ``_stores`` opening
stores and models; ``_atomic`` atomic model/score writes; ``_common`` exit
codes and exceptions; ``_delegate`` the commands run by a module's own ``main(argv)``
(``nightly`` and ``distributed``: :mod:`streamrank.pipelines`; ``recipe NAME``: :mod:`streamrank.recipes`).
"""
from __future__ import annotations

import os  # noqa: F401 - tests patch ``cli.os.replace`` to interrupt a model replacement
import sys

from ._app import build_parser, main
from ._atomic import _replace_dir, _save_model  # noqa: F401
from ._common import (DEFAULT_MAX_ROWS, EXIT_BUG, EXIT_CODES, EXIT_DATA, EXIT_NOT_FOUND,  # noqa: F401
                      EXIT_OK, EXIT_QUARANTINED, EXIT_SIGINT, EXIT_SIGTERM, EXIT_UNSUPPORTED, EXIT_USAGE,
                      EXIT_WRITE, FORMATS, LEARNERS, METRICS, Unsupported, UsageError, exit_code)
from ._grid import parse_grid, parse_storage_options

__all__ = ["main", "build_parser", "parse_grid", "parse_storage_options", "progress_reporting", "exit_code",
           "check_model_out",
           "EXIT_CODES", "EXIT_OK", "EXIT_BUG", "EXIT_USAGE", "EXIT_NOT_FOUND", "EXIT_DATA", "EXIT_WRITE",
           "EXIT_UNSUPPORTED", "EXIT_QUARANTINED", "EXIT_SIGINT", "EXIT_SIGTERM"]


def __getattr__(name):
    # on first use: _progress imports streamrank.io (scipy.sparse), which --help and argument errors must not pay
    if name == "progress_reporting":
        from ._progress import progress_reporting

        return progress_reporting
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_model_out(path, *, overwrite: bool = False, storage_options=None) -> None:
    """Refuse to write a model at ``path`` over a store or another file, or over a model without ``overwrite``.

    What ``streamrank fit`` checks before any work (``--overwrite``, ``--storage-options`` for a URL); the
    pipelines call it so that every command refuses the same things the same way.
    """
    from . import _stores
    from ._atomic import _check_model_out

    _stores.STORAGE_OPTIONS = storage_options
    _check_model_out(path, overwrite=overwrite)


def _console():  # pragma: no cover - the installed script calls main() and exits
    sys.exit(main())

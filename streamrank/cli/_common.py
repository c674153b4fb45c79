"""Exit codes, option choices and exceptions shared by every ``streamrank`` subcommand."""
from __future__ import annotations

import errno
import logging

from .._defaults import DEFAULT_BLOCK_ROWS

#: The exit codes of ``streamrank`` and of the pipelines (``streamrank nightly|distributed``), public
#: as ``streamrank.cli.EXIT_*`` for scripts and schedulers that act on them; :data:`EXIT_CODES` says
#: each in words, and :func:`exit_code` maps an exception to its code.
EXIT_OK, EXIT_BUG, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_DATA, EXIT_WRITE, EXIT_UNSUPPORTED = 0, 1, 2, 3, 4, 5, 6
EXIT_SIGINT, EXIT_SIGTERM = 130, 143
#: ``streamrank nightly``: the night ran, but a new day failed the data checks and was quarantined
#: (ingested, excluded from training; :mod:`streamrank.pipelines._nightly_checks`).
EXIT_QUARANTINED = 7
EXIT_CODES = {
    0: "success", 1: "unexpected internal error", 2: "usage error", 3: "path not found",
    4: "invalid data or format", 5: "cannot write output / store locked", 6: "unsupported combination",
    7: "nightly: a day failed the data checks and was quarantined",
    130: "interrupted (SIGINT)", 143: "terminated (SIGTERM)",
}

LEARNERS = ("rankrls", "cg", "kernel", "sparse-kernel", "sgd-bilinear", "sgd-pairwise")
FORMATS = ("letor", "npz", "zarr", "parquet")
METRICS = ("ndcg@10", "disagreement", "map", "auc")
DEFAULT_MAX_ROWS = DEFAULT_BLOCK_ROWS

log = logging.getLogger("streamrank")


class UsageError(Exception):
    """A bad command-line value found after parsing (exit code 2)."""


class Unsupported(Exception):
    """A combination of options streamrank does not do (exit code 6)."""


def exit_code(exc: BaseException) -> int:
    """The exit code a command ends with when ``exc`` stops it (one table for the CLI and the pipelines).

    :class:`UsageError` 2; :class:`Unsupported`, ``NotImplementedError``, ``MemoryError`` 6; a missing
    path (``FileNotFoundError``) 3; an output that cannot be written (it exists, no permission, disk
    full or read-only, another writer holds the store: "one writer at a time") 5; bad data or format
    (``ValueError``, ``TypeError``, ``KeyError``, other ``OSError``) 4; anything else is unexpected: 1.

    >>> exit_code(FileNotFoundError("train.zarr")), exit_code(ValueError("not a store")), exit_code(ZeroDivisionError())
    (3, 4, 1)
    """
    # StoreFormatError and ModelFormatError are ValueErrors (exit 4 below): importing their modules here
    # would only make a usage error pay for scipy.sparse
    if isinstance(exc, UsageError):
        return EXIT_USAGE
    if isinstance(exc, Unsupported) or isinstance(exc, NotImplementedError) or isinstance(exc, MemoryError):
        return EXIT_UNSUPPORTED
    if isinstance(exc, FileNotFoundError):
        return EXIT_NOT_FOUND
    if isinstance(exc, (FileExistsError, PermissionError, IsADirectoryError)):
        return EXIT_WRITE
    if isinstance(exc, RuntimeError) and "one writer at a time" in str(exc):
        return EXIT_WRITE
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        return EXIT_WRITE  # disk full / read-only: the data is fine, the output cannot be written
    if isinstance(exc, (ValueError, TypeError, KeyError, OSError)):
        return EXIT_DATA
    return EXIT_BUG


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread like KeyboardInterrupt."""



def _progress(args, total=None, unit="rows", desc=None):
    from ._progress import Progress

    return Progress(total, unit=unit, desc=desc or args.command, quiet=args.quiet)



def _say(args, text: str) -> None:
    """A result line on stdout."""
    print(text, flush=True)

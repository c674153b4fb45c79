"""Exit codes, option choices and exceptions shared by every ``streamrank`` subcommand."""
from __future__ import annotations

import logging

from .._defaults import DEFAULT_BLOCK_ROWS

EXIT_OK, EXIT_BUG, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_DATA, EXIT_WRITE, EXIT_UNSUPPORTED = 0, 1, 2, 3, 4, 5, 6
EXIT_SIGINT, EXIT_SIGTERM = 130, 143
EXIT_CODES = {
    0: "success", 1: "unexpected internal error", 2: "usage error", 3: "path not found",
    4: "invalid data or format", 5: "cannot write output / store locked", 6: "unsupported combination",
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


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread like KeyboardInterrupt."""



def _progress(args, total=None, unit="rows", desc=None):
    from ._progress import Progress

    return Progress(total, unit=unit, desc=desc or args.command, quiet=args.quiet)



def _say(args, text: str) -> None:
    """A result line on stdout."""
    print(text, flush=True)

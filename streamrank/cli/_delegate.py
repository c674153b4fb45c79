"""Commands that ``streamrank`` hands to a module with its own parser: the pipelines and the data recipes.

``streamrank nightly ARGS`` is ``python -m streamrank.pipelines.nightly ARGS``,
``streamrank distributed ARGS`` is ``python -m streamrank.pipelines.distributed ARGS`` and
``streamrank recipe NAME ARGS`` is ``python -m streamrank.recipes.NAME ARGS``: the same
``main(argv)``, its options and its exit codes.  The module is imported only
when its command runs, so ``streamrank --help`` stays light (no numba, dask or
scipy).
"""
from __future__ import annotations

import importlib
import sys

__all__ = ["PIPELINES", "RECIPE_HELP", "run_delegated", "is_delegated"]

#: command -> (module, one-line help for ``streamrank --help``)
PIPELINES = {
    "nightly": ("streamrank.pipelines.nightly",
                "one night of retraining: ingest a day, update, validate, promote (streamrank nightly --help)"),
    "distributed": ("streamrank.pipelines.distributed",
                    "fit a learner on a dask cluster from a store on shared storage"),
}

#: recipe -> one-line description (the module docstring's first line says more)
RECIPE_HELP = {
    "synthetic": "LETOR-like graded groups or planted bilinear tuples, any number of rows",
    "letor": "LETOR / svmlight text (MQ2008, OHSUMED or your own) -> GroupStore or Parquet",
    "clicks": "simulated position-biased click logs on MQ2008 / OHSUMED -> GroupStore with click/position",
    "newsgroups": "20 Newsgroups -> tf-idf CSR, (q, d+, d-) TupleStore and held-out test tuples",
    "mnist": "MNIST -> normalised pixels and class tuples",
    "reuters": "Reuters-21578 ModApte -> tf-idf, topic relevance columns",
}


def is_delegated(argv) -> bool:
    return bool(argv) and argv[0] in ("recipe", *PIPELINES)


def _recipe_usage() -> str:
    width = max(map(len, RECIPE_HELP))
    lines = [f"  {name:<{width}}  {text}" for name, text in RECIPE_HELP.items()]
    return ("usage: streamrank recipe NAME [options]\n\nWrite a store from a dataset with bounded memory "
            "(the same as python -m streamrank.recipes.NAME).\n\nrecipes:\n" + "\n".join(lines)
            + "\n\nRun 'streamrank recipe NAME --help' for a recipe's options.\n")


def _call(module: str, argv) -> int:
    mod = importlib.import_module(module)
    try:
        return int(mod.main(list(argv)) or 0)
    except SystemExit as exc:  # argparse: --help (0) and usage errors (2)
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 2)


def run_delegated(argv) -> int:
    """Run ``streamrank nightly|distributed|recipe ...``; returns the exit code."""
    command, rest = argv[0], list(argv[1:])
    if command in PIPELINES:
        return _call(PIPELINES[command][0], rest)
    if not rest or rest[0] in ("-h", "--help"):
        sys.stdout.write(_recipe_usage())
        return 0
    name = rest[0]
    if name not in RECIPE_HELP:
        sys.stderr.write(f"streamrank recipe: error: unknown recipe {name!r}; one of: {', '.join(RECIPE_HELP)} "
                         "(see streamrank recipe --help)\n")
        return 2
    return _call(f"streamrank.recipes.{name}", rest[1:])

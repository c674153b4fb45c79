"""Where the real datasets live: one rule for recipes, tests and benchmarks.

The datasets are never copied into the repository.  They are looked up, in
order, in

1. the directory named by the environment variable ``STREAMRANK_DATA``;
2. ``../shared/data`` beside the repository checkout (the project's layout:
   a clone next to ``shared/``);
3. ``../shared/data`` relative to the current directory.

No absolute path of any machine is built in: elsewhere, set ``STREAMRANK_DATA``.

The first that exists wins; if none exists the first candidate is returned,
so error messages name a sensible place.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_dir", "data_path"]


def _candidates():
    env = os.environ.get("STREAMRANK_DATA")
    if env:
        yield Path(env)
    repo = Path(__file__).resolve().parents[2]
    yield repo.parent / "shared" / "data"
    yield Path.cwd().parent / "shared" / "data"


def data_dir() -> Path:
    """The directory holding ``letor/``, ``20newsgroups/``, ``mnist/``, ... (see module doc)."""
    cands = list(_candidates())
    for c in cands:
        if c.is_dir():
            return c
    return cands[0]


def data_path(*parts: str) -> Path:
    """``data_dir() / parts...`` — e.g. ``data_path("letor", "MQ2008_QueryLevelNorm.tar.gz")``."""
    return data_dir().joinpath(*parts)

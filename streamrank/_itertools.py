"""Small iteration helpers shared by ingest paths (CLI and nightly pipeline)."""
from __future__ import annotations

from typing import Iterable, Iterator, Tuple, TypeVar

T = TypeVar("T")

__all__ = ["with_last"]


def with_last(items: Iterable[T]) -> Iterator[Tuple[T, bool]]:
    """``(item, is_last)`` for each item of an iterable (one item of lookahead).

    >>> list(with_last("ab"))
    [('a', False), ('b', True)]
    """
    it = iter(items)
    try:
        prev = next(it)
    except StopIteration:
        return
    for item in it:
        yield prev, False
        prev = item
    yield prev, True

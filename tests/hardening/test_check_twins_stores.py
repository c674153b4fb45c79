"""Stores read with the read checks' numpy twins and with the kernels: the same blocks, the same error.

The chunk decoder decodes every chunk whole (numcodecs' blosc) and runs the
check on it, by numpy or by the kernels.  A bad value gets the same message
either way, in a full chunk and in the tail chunk.
"""
from __future__ import annotations

import numpy as np
import pytest

from streamrank._numba import twins
from streamrank.io.schema import StoreFormatError

from .store_edits import poke


# ------------------------------------------------------------- the chunk decoder: one decision per chunk
def _dense_store(tmp_path, rows=40_000, n=5, bad_row=None, chunk_rows=20_000):
    """A dense store of two full chunks of X (100k entries each, above NUMPY_BELOW) and a partly filled third."""
    import streamrank as sr

    rng = np.random.default_rng(3)
    X = rng.normal(size=(rows + 100, n)).astype(np.float32)
    y = rng.integers(0, 3, rows + 100).astype(np.float32)
    qid = np.repeat(np.arange((rows + 100) // 20), 20)
    path = str(tmp_path / "s.zarr")
    sr.GroupStore.create(path, n_features=n, chunk_rows=chunk_rows).append(X, y, qid)
    if bad_row is not None:                               # a NaN the writer would have refused, edited in
        poke(path, "X", (bad_row, 3), np.nan)
    return path


def _read_error(path):
    import streamrank as sr

    with pytest.raises(StoreFormatError) as err:
        for _ in sr.GroupStore.open(path).blocks(10_000):
            pass
    return str(err.value)


def test_chunk_check_twin_and_kernel_read_the_same_blocks(tmp_path):
    path = _dense_store(tmp_path)
    import streamrank as sr

    with twins(True):
        got_twin = [b.X.copy() for b in sr.GroupStore.open(path).blocks(10_000)]
    with twins(False):
        got_kernel = [b.X.copy() for b in sr.GroupStore.open(path).blocks(10_000)]
    assert all(np.array_equal(a, b) for a, b in zip(got_twin, got_kernel, strict=True))


@pytest.mark.parametrize("bad_row", [0, 12_345, 20_000, 39_999, 40_050])   # full chunks and the tail chunk
def test_chunk_check_same_message_either_way(tmp_path, bad_row):
    path = _dense_store(tmp_path, bad_row=bad_row)
    messages = set()
    for forced in (True, False):
        with twins(forced):
            messages.add(_read_error(path))
    assert len(messages) == 1
    assert f"row {bad_row}" in messages.pop()

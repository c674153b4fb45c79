"""A bad value in a chunk of a store is named by its row, in a full chunk and in the tail chunk."""
from __future__ import annotations

import numpy as np
import pytest

from streamrank.io.schema import StoreFormatError

from .store_edits import poke


def _dense_store(tmp_path, rows=40_000, n=5, bad_row=None, chunk_rows=20_000):
    """A dense store of two full chunks of X (100k entries each) and a partly filled third."""
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


@pytest.mark.parametrize("bad_row", [0, 12_345, 20_000, 39_999, 40_050])   # full chunks and the tail chunk
def test_chunk_check_names_the_row(tmp_path, bad_row):
    path = _dense_store(tmp_path, bad_row=bad_row)
    message = _read_error(path)
    assert f"row {bad_row}" in message and "holds nan" in message

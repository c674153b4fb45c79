"""RowChunkReader: any row range equals the zarr slice; a sequential pass decodes each chunk once."""
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamrank as sr
from streamrank.io._row_chunks import RowChunkReader


class CountingArray:
    """A zarr array that counts the chunks its slices touch (the chunks zarr decodes)."""

    def __init__(self, arr):
        self.arr = arr
        self.chunks, self.shape, self.dtype = arr.chunks, arr.shape, arr.dtype
        self.decoded = []

    def __getitem__(self, key):
        a, b, _ = key.indices(self.arr.shape[0])
        C = self.chunks[0]
        if b > a:
            self.decoded.extend(range(a // C, (b - 1) // C + 1))
        return self.arr[key]

    def read_into(self, a, b, out):             # the path CheckedArray offers: counted the same way
        out[...] = self[a:b]


@pytest.fixture
def arr(tmp_path):
    z = zarr.create_array(str(tmp_path / "a.zarr"), shape=(1000, 3), chunks=(64, 3), dtype="float32")
    z[:] = np.arange(3000, dtype=np.float32).reshape(1000, 3)
    return z


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(0, 1000), max_size=12), n_rows=st.integers(0, 1000))
def test_any_cutting_equals_the_zarr_slice_and_decodes_each_chunk_once(arr, cuts, n_rows):
    bounds = sorted({0, n_rows, *(c for c in cuts if c <= n_rows)})
    counting = CountingArray(arr)
    reader = RowChunkReader(counting)
    got = [reader.read(a, b, n_rows) for a, b in zip(bounds[:-1], bounds[1:])]
    whole = arr[:n_rows]
    if got:
        np.testing.assert_array_equal(np.concatenate(got), whole)
    assert sorted(counting.decoded) == sorted(set(counting.decoded))        # no chunk decoded twice
    assert set(counting.decoded) == set(range((n_rows + 63) // 64))


def test_returned_rows_are_fresh_copies(arr):
    reader = RowChunkReader(arr)
    a = reader.read(10, 20, 1000)
    a[:] = -1
    np.testing.assert_array_equal(reader.read(10, 20, 1000), arr[10:20])
    assert a.flags.writeable


def test_a_partly_filled_chunk_is_read_again_when_it_grows(arr):
    reader = RowChunkReader(arr)
    np.testing.assert_array_equal(reader.read(60, 70, 70), arr[60:70])   # chunk 1 cached up to row 70
    np.testing.assert_array_equal(reader.read(65, 100, 100), arr[65:100])


def test_rows_outside_the_committed_length_are_refused(arr):
    reader = RowChunkReader(arr)
    with pytest.raises(IndexError, match="outside the 50 committed rows"):
        reader.read(40, 60, 50)
    assert reader.read(5, 5, 50).shape == (0, 3)


def test_group_store_blocks_decode_each_chunk_once(tmp_path):
    """Small blocks against 4 MiB chunks (the kernel learners' case) read every chunk once per pass."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((5000, 4)).astype(np.float32)
    y = rng.standard_normal(5000)
    qid = np.repeat(np.arange(500), 10)
    store = sr.GroupStore.create(tmp_path / "s", n_features=4, chunk_rows=1000)
    store.append(X, y, qid)
    store = sr.GroupStore.open(tmp_path / "s")
    counting = CountingArray(store._X)
    store._X_rows = RowChunkReader(counting)
    blocks = list(store.blocks(max_rows=130))          # 13 rows short of a chunk boundary, every time
    np.testing.assert_array_equal(np.concatenate([b.X for b in blocks]), X)
    np.testing.assert_array_equal(np.concatenate([b.y for b in blocks]), y)
    assert sorted(counting.decoded) == list(range(5))

"""Block-wise blosc decode with the value check fused in (streamrank.io._blosc_block_kernels, _blosc_blocks).

The reference is numcodecs' own ``blosc.decompress`` of the whole frame plus
the plain-numpy first bad position: the kernels must give the same bytes,
leave the frame as it was, and report the first bad value of a block (the
only one planted) or hand the frame back (-2, -3) when they do not split it.
"""
from __future__ import annotations

import numpy as np
import pytest
from numcodecs import blosc

import streamrank as sr
from streamrank.io import _blosc_blocks as B
from streamrank.io.schema import StoreFormatError

pytestmark = pytest.mark.skipif(not B.available(), reason="this numcodecs' c-blosc has no usable blosc_decompress_ctx")


def kernels():
    return B._kernels()


def frame_of(a, blocksize_items=1 << 12, shuffle=blosc.SHUFFLE, cname=b"lz4", clevel=5):
    """A writable copy of the blosc frame of ``a`` (numcodecs' blocksize is in items of the type size)."""
    return np.frombuffer(blosc.compress(a, cname, clevel, shuffle, blocksize=blocksize_items), np.uint8).copy()


def ref_decode(frame, like):
    out = np.empty_like(like)
    blosc.decompress(frame, out)
    return out


def ref_first_nonfinite(a, n):
    hits = np.flatnonzero(~np.isfinite(a[:n]))
    return int(hits[0]) if hits.size else -1


def ref_first_out_of_range(a, n_check, n):
    hits = np.flatnonzero((a[:n_check] < 0) | (a[:n_check] >= n))
    return int(hits[0]) if hits.size else -1


SIZES = [65_536, 65_536 + 1, 131_072 - 7, 100_003]      # whole blocks, a 1-item leftover, short last blocks


def blocks_of(frame):
    """Blocks of a frame (1 if stored raw: nothing to split)."""
    if frame[2] & 0x02:
        return 1
    return -(-int.from_bytes(frame[4:8].tobytes(), "little") // int.from_bytes(frame[8:12].tobytes(), "little"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("shuffle", [blosc.SHUFFLE, blosc.NOSHUFFLE, blosc.BITSHUFFLE])
@pytest.mark.parametrize("cname", [b"lz4", b"zstd", b"blosclz"])
def test_finite_decode_equals_numcodecs_and_leaves_the_frame_as_it_was(dtype, size, shuffle, cname):
    rng = np.random.default_rng(size)
    a = (rng.standard_normal(size) * 3).astype(dtype)
    a[: size // 3] = np.round(a[: size // 3])                # compressible part too
    frame = frame_of(a, shuffle=shuffle, cname=cname)
    before = frame.copy()
    out = np.full_like(a, 7)
    r = kernels().decode_checked_finite(frame, out, size)
    np.testing.assert_array_equal(frame, before)
    if blocks_of(frame) < 2:
        assert r == -2
        return
    assert r == -1
    np.testing.assert_array_equal(out, ref_decode(before, a))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("where", ["first", "block_edge", "middle", "last"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_finite_check_finds_the_bad_value_as_numpy_does(size, where, bad, dtype):
    a = np.linspace(-5, 5, size).astype(dtype)
    per = int.from_bytes(frame_of(a)[8:12].tobytes(), "little") // a.itemsize       # items per block
    pos = {"first": 0, "block_edge": min(per, size - 1), "middle": size // 2, "last": size - 1}[where]
    a[pos] = bad
    frame = frame_of(a)
    assert blocks_of(frame) >= 2
    got = kernels().decode_checked_finite(frame.copy(), np.empty_like(a), size)
    assert got == ref_first_nonfinite(a, size) == pos
    # not among the checked values: decoded, nothing reported
    if pos > 0:
        out = np.empty_like(a)
        assert kernels().decode_checked_finite(frame.copy(), out, pos) == -1
        np.testing.assert_array_equal(out[:pos], a[:pos])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("bad", [None, "n", "negative", "int_min"])
def test_range_check_finds_the_first_index_outside_as_numpy_does(dtype, size, bad):
    n = 1000
    rng = np.random.default_rng(size)
    a = rng.integers(0, n, size).astype(dtype)
    pos = size - 3
    if bad == "n":
        a[pos] = n
    elif bad == "negative":
        a[pos] = -1
    elif bad == "int_min":
        a[pos] = np.iinfo(dtype).min
    frame = frame_of(a)
    assert blocks_of(frame) >= 2
    before = frame.copy()
    out = np.empty_like(a)
    got = kernels().decode_checked_in_range(frame, out.view(f"u{out.itemsize}"), size, n)
    assert got == ref_first_out_of_range(a, size, n)
    assert got == (-1 if bad is None else pos)
    np.testing.assert_array_equal(frame, before)
    if bad is None:
        np.testing.assert_array_equal(out, a)


def test_frames_it_does_not_split_are_handed_back_untouched():
    k = kernels()
    a = np.linspace(0, 1, 50_000).astype(np.float32)
    one_block = frame_of(a, blocksize_items=1 << 18)                  # a single block: nothing to gain
    assert blocks_of(one_block) == 1 and not one_block[2] & 0x02
    assert k.decode_checked_finite(one_block, np.empty_like(a), a.size) == -2
    memcpyed = frame_of(a, clevel=0)                                  # stored raw
    assert memcpyed[2] & 0x02
    assert k.decode_checked_finite(memcpyed, np.empty_like(a), a.size) == -2
    assert k.decode_checked_finite(frame_of(a), np.empty(a.size - 1, np.float32), a.size) == -2   # nbytes differ
    frame = frame_of(a)
    nblocks = -(-a.nbytes // int.from_bytes(frame[8:12].tobytes(), "little"))
    assert nblocks > 2
    for edit in ("start past the end", "start inside the offsets", "two blocks at one offset", "cbytes"):
        bad = frame.copy()
        if edit == "start past the end":
            bad[20:24] = np.frombuffer(np.uint32(bad.size).tobytes(), np.uint8)
        elif edit == "start inside the offsets":
            bad[20:24] = np.frombuffer(np.uint32(16).tobytes(), np.uint8)
        elif edit == "two blocks at one offset":
            bad[20:24] = bad[16:20]
        else:
            bad[12:16] = np.frombuffer(np.uint32(bad.size + 100).tobytes(), np.uint8)
        kept = bad.copy()
        assert k.decode_checked_finite(bad, np.empty_like(a), a.size) == -2, edit
        np.testing.assert_array_equal(bad, kept)


def test_a_block_c_blosc_refuses_is_handed_back_and_the_frame_restored():
    a = np.linspace(0, 1, 50_000).astype(np.float32)
    frame = frame_of(a)
    start = int.from_bytes(frame[20:24].tobytes(), "little")           # block 1's data
    frame[start : start + 4] = np.frombuffer(np.int32(-5).tobytes(), np.uint8)   # its first split's length
    kept = frame.copy()
    assert kernels().decode_checked_finite(frame, np.empty_like(a), a.size) == -3
    np.testing.assert_array_equal(frame, kept)


def test_decode_checked_says_true_only_when_all_was_decoded_and_good():
    a = np.linspace(0, 1, 50_000).astype(np.float32)
    out = np.empty_like(a)
    assert B.decode_checked(frame_of(a), out, "finite", 0, a.size) is True
    np.testing.assert_array_equal(out, a)
    a[123] = np.nan
    assert B.decode_checked(frame_of(a), out, "finite", 0, a.size) is None
    read_only = np.frombuffer(frame_of(a).tobytes(), np.uint8)
    assert B.decode_checked(read_only, out, "finite", 0, a.size) is None      # remote bytes: the whole-chunk path
    assert B.decode_checked(frame_of(a), out, "range", 10, a.size) is None    # not an integer array


def test_store_chunks_are_decoded_block_wise_and_bad_values_named_as_before(tmp_path, monkeypatch):
    """A real store: X's full chunks never go through numcodecs' whole-chunk decode; an inf planted in a
    chunk through zarr (bindings refreshed, as an attacker would) is still named by row and array."""
    import importlib.util
    from pathlib import Path

    import zarr

    spec = importlib.util.spec_from_file_location("store_edits", Path(__file__).parents[1] / "hardening" / "store_edits.py")
    edits = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(edits)

    rng = np.random.default_rng(0)
    X = rng.standard_normal((60_000, 40)).astype(np.float32)
    store = sr.GroupStore.create(tmp_path / "s", n_features=40)
    store.append(X, rng.standard_normal(60_000), np.repeat(np.arange(600), 100))
    calls = []
    real = blosc.decompress
    monkeypatch.setattr(blosc, "decompress", lambda src, dest=None: calls.append(dest.shape) or real(src, dest))
    got = np.concatenate([b.X for b in sr.GroupStore.open(tmp_path / "s").blocks(max_rows=25_000, prefetch=False)])
    np.testing.assert_array_equal(got, X)
    # X's two full chunks block-wise; only the last, partly filled one whole (its binding is checked first)
    assert [s for s in calls if len(s) == 2] == [(26214, 40)], calls
    monkeypatch.setattr(blosc, "decompress", real)
    arr = zarr.open_array(tmp_path / "s" / "X", mode="r+")
    arr[30_001, 7] = np.inf
    edits.rebind(tmp_path / "s")
    with pytest.raises(StoreFormatError, match=r"'X'.*inf.*row 30001"):
        for _ in sr.GroupStore.open(tmp_path / "s").blocks(max_rows=25_000, prefetch=False):
            pass


# --------------------------------------------------- blocks decoded on several threads (numcodecs' count)
@pytest.fixture
def threads(monkeypatch):
    """Set how many threads numcodecs would decode with (the block-wise decode follows it)."""
    def use(n):
        monkeypatch.setattr(B, "_numcodecs_threads", lambda: n)
    return use


def test_the_thread_count_is_numcodecs_own(monkeypatch):
    monkeypatch.setattr(blosc, "use_threads", False)
    assert B._numcodecs_threads() == 1
    monkeypatch.setattr(blosc, "use_threads", True)
    assert B._numcodecs_threads() == blosc.get_nthreads()
    got = []
    t = __import__("threading").Thread(target=lambda: got.append(B._numcodecs_threads()))
    monkeypatch.setattr(blosc, "use_threads", None)     # numcodecs: threads from the main thread only
    t.start()
    t.join()
    assert got == [1] and B._numcodecs_threads() == blosc.get_nthreads()


@pytest.mark.parametrize("n_threads", [2, 3, 8])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", [65_536 * 5 + 1, 100_003, 131_072 - 7])
def test_threaded_decode_equals_numcodecs_and_leaves_the_frame_as_it_was(threads, n_threads, dtype, size):
    threads(n_threads)
    rng = np.random.default_rng(size)
    a = (rng.standard_normal(size) * 3).astype(dtype)
    a[: size // 3] = np.round(a[: size // 3])
    frame = frame_of(a, blocksize_items=1 << 11)
    assert blocks_of(frame) >= 4
    before = frame.copy()
    out = np.full_like(a, 7)
    assert B.decode_checked(frame, out, "finite", 0, size) is True
    np.testing.assert_array_equal(frame, before)
    np.testing.assert_array_equal(out, ref_decode(before, a))


@pytest.mark.parametrize("n_threads", [2, 3])
@pytest.mark.parametrize("block", ["first", "run_end", "run_start", "last"])
def test_threaded_decode_finds_a_bad_value_in_any_block(threads, n_threads, block):
    """A NaN / an index n in the first block, the last block of a run (decoded after the others), the first
    block of a run, the last block: reported (None: the caller names it), the frame left as it was."""
    threads(n_threads)
    a = np.linspace(-5, 5, 100_003).astype(np.float32)
    idx = np.arange(100_003, dtype=np.int32) % 1000
    per = int.from_bytes(frame_of(a, blocksize_items=1 << 11)[8:12].tobytes(), "little") // 4
    nb = -(-a.size // per)
    t = min(n_threads, nb // 2)
    cut = nb * 1 // t                                   # first block of the second run
    pos = {"first": 3, "run_end": (cut - 1) * per + 5, "run_start": cut * per + 5, "last": a.size - 1}[block]
    a[pos] = np.nan
    idx[pos] = 1000
    for arr, kind in ((a, "finite"), (idx, "range")):
        frame = frame_of(arr, blocksize_items=1 << 11)
        before = frame.copy()
        assert B.decode_checked(frame, np.empty_like(arr), kind, 1000, arr.size) is None
        np.testing.assert_array_equal(frame, before)
        out = np.empty_like(arr)                        # outside the checked values: decoded, nothing reported
        assert B.decode_checked(frame, out, kind, 1000, pos) is True
        np.testing.assert_array_equal(out[:pos], arr[:pos])


def test_threaded_decode_hands_back_a_block_c_blosc_refuses(threads):
    threads(2)
    a = np.linspace(0, 1, 100_003).astype(np.float32)
    frame = frame_of(a, blocksize_items=1 << 11)
    nb = blocks_of(frame)
    j = nb - 1                                          # a block of the helper thread's run
    start = int.from_bytes(frame[16 + 4 * j : 20 + 4 * j].tobytes(), "little")
    frame[start : start + 4] = np.frombuffer(np.int32(-5).tobytes(), np.uint8)
    kept = frame.copy()
    assert B.decode_checked(frame, np.empty_like(a), "finite", 0, a.size) is None
    np.testing.assert_array_equal(frame, kept)
    assert B.decode_checked(frame_of(a, blocksize_items=1 << 11), np.empty_like(a), "finite", 0, a.size) is True

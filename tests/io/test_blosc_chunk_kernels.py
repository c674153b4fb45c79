"""One kernel call per checked chunk (issue 16): ``decode_chunk_finite`` / ``decode_chunk_in_range``.

What the chunk decoder runs when one thread decodes a chunk (the usual case:
zarr turns numcodecs' blosc threads off).  The reference is numcodecs' own
``blosc.decompress`` of the whole frame plus the plain-numpy first bad
position, as for the block-wise kernels (tests/io/test_blosc_block_kernels.py);
unlike those, a frame of a single block is decoded and checked here too
(``y``'s short 1-D chunks), not handed back.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest
from numcodecs import blosc

import streamrank as sr
from streamrank.io import _blosc_blocks as B
from streamrank.io.schema import StoreFormatError

pytestmark = pytest.mark.skipif(not B.available(), reason="this numcodecs' c-blosc has no usable blosc_decompress_ctx")


def kernels():
    return B._kernels()


def frame_of(a, blocksize=1 << 12, shuffle=blosc.SHUFFLE, cname=b"lz4", clevel=5):
    return np.frombuffer(blosc.compress(a, cname, clevel, shuffle, blocksize=blocksize), np.uint8).copy()


def blocks_of(frame):
    if frame[2] & 0x02:
        return 1
    return -(-int.from_bytes(frame[4:8].tobytes(), "little") // int.from_bytes(frame[8:12].tobytes(), "little"))


def ref_decode(frame, like):
    out = np.empty_like(like)
    blosc.decompress(frame, out)
    return out


def ref_first_bad(a, n, limit=None):
    bad = ~np.isfinite(a[:n]) if limit is None else (a[:n] < 0) | (a[:n] >= limit)
    hits = np.flatnonzero(bad)
    return int(hits[0]) if hits.size else -1


SIZES = [1, 7, 4_096, 20_971, 65_536 + 1, 100_003]
BLOCKS = [1 << 12, 1 << 22]          # several blocks (short last one) / one block


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("blocksize", BLOCKS)
@pytest.mark.parametrize("shuffle", [blosc.SHUFFLE, blosc.NOSHUFFLE, blosc.BITSHUFFLE])
def test_finite_chunk_decode_equals_numcodecs_one_block_included(dtype, size, blocksize, shuffle):
    rng = np.random.default_rng(size)
    a = (rng.standard_normal(size) * 3).astype(dtype)
    a[: size // 3] = np.round(a[: size // 3])
    frame = frame_of(a, blocksize, shuffle)
    before = frame.copy()
    out = np.full_like(a, 7)
    r = kernels().decode_chunk_finite(frame, out, size)
    np.testing.assert_array_equal(frame, before)
    if frame[2] & 0x02:                       # stored raw: not this kernel's
        assert r == -2
        return
    assert r == -1
    np.testing.assert_array_equal(out, ref_decode(before, a))


@pytest.mark.parametrize("blocksize", BLOCKS)
@pytest.mark.parametrize("where", ["first", "block_edge", "middle", "last"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_finite_chunk_check_finds_the_first_bad_value(blocksize, where, bad, dtype):
    size = 100_003
    a = np.linspace(-5, 5, size).astype(dtype)
    per = int.from_bytes(frame_of(a, blocksize)[8:12].tobytes(), "little") // a.itemsize
    pos = {"first": 0, "block_edge": min(per, size - 1), "middle": size // 2, "last": size - 1}[where]
    a[pos] = bad
    a[-1] = bad if where != "last" else a[-1]        # a later bad value too: the first one is reported
    frame = frame_of(a, blocksize)
    assert blocks_of(frame) == (1 if blocksize == BLOCKS[1] else blocks_of(frame))
    got = kernels().decode_chunk_finite(frame.copy(), np.empty_like(a), size)
    assert got == ref_first_bad(a, size) == pos
    if pos > 0:                               # not among the checked values: decoded, nothing reported
        out = np.empty_like(a)
        assert kernels().decode_chunk_finite(frame.copy(), out, pos) == -1
        np.testing.assert_array_equal(out[:pos], a[:pos])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("blocksize", BLOCKS)
@pytest.mark.parametrize("bad", [None, "n", "negative", "int_min"])
def test_range_chunk_check_finds_the_first_index_outside(dtype, blocksize, bad):
    n, size = 1000, 100_003
    a = np.random.default_rng(5).integers(0, n, size).astype(dtype)
    pos = size - 3
    a[pos] = {None: a[pos], "n": n, "negative": -1, "int_min": np.iinfo(dtype).min}[bad]
    frame = frame_of(a, blocksize)
    before = frame.copy()
    out = np.empty_like(a)
    got = kernels().decode_chunk_in_range(frame, out.view(f"u{out.itemsize}"), size, n)
    assert got == ref_first_bad(a, size, n) == (-1 if bad is None else pos)
    np.testing.assert_array_equal(frame, before)
    if bad is None:
        np.testing.assert_array_equal(out, a)


def test_chunk_kernels_hand_back_what_they_do_not_decode_and_restore_the_frame():
    k = kernels()
    a = np.linspace(0, 1, 50_000).astype(np.float32)
    memcpyed = frame_of(a, clevel=0)
    assert memcpyed[2] & 0x02
    assert k.decode_chunk_finite(memcpyed, np.empty_like(a), a.size) == -2
    assert k.decode_chunk_finite(frame_of(a), np.empty(a.size - 1, np.float32), a.size) == -2   # nbytes differ
    one = frame_of(a, 1 << 22)
    assert blocks_of(one) == 1
    for edit in ("start past the end", "start inside the header", "cbytes", "version"):
        bad = one.copy()
        if edit == "start past the end":
            bad[16:20] = np.frombuffer(np.uint32(bad.size).tobytes(), np.uint8)
        elif edit == "start inside the header":
            bad[16:20] = np.frombuffer(np.uint32(16).tobytes(), np.uint8)
        elif edit == "cbytes":
            bad[12:16] = np.frombuffer(np.uint32(bad.size + 100).tobytes(), np.uint8)
        else:
            bad[0] = 3
        kept = bad.copy()
        assert k.decode_chunk_finite(bad, np.empty_like(a), a.size) == -2, edit
        np.testing.assert_array_equal(bad, kept)
    refused = one.copy()                      # a block c-blosc refuses: -3, the frame as it was
    refused[20:24] = np.frombuffer(np.int32(-5).tobytes(), np.uint8)
    kept = refused.copy()
    assert k.decode_chunk_finite(refused, np.empty_like(a), a.size) == -3
    np.testing.assert_array_equal(refused, kept)


def test_decode_checked_on_one_thread_is_one_kernel_call(monkeypatch):
    """No plan handed back to Python (block_plan) and no run split (_run): one dispatch a chunk."""
    k = kernels()
    monkeypatch.setattr(B, "_numcodecs_threads", lambda: 1)
    monkeypatch.setattr(k, "block_plan", lambda *a: pytest.fail("block_plan called"))
    monkeypatch.setattr(B, "_run", lambda *a: pytest.fail("_run called"))
    for blocksize in BLOCKS:
        a = np.linspace(0, 1, 50_000)
        out = np.empty_like(a)
        assert B.decode_checked(frame_of(a, blocksize), out, "finite", 0, a.size) is True
        np.testing.assert_array_equal(out, a)
        a[-1] = np.nan
        assert B.decode_checked(frame_of(a, blocksize), out, "finite", 0, a.size) is None
        idx = np.arange(50_000, dtype=np.int64)
        assert B.decode_checked(frame_of(idx, blocksize), np.empty_like(idx), "range", 50_000, idx.size) is True
        assert B.decode_checked(frame_of(idx, blocksize), np.empty_like(idx), "range", 49_999, idx.size) is None


def test_max_threads_one_takes_the_one_call_too(monkeypatch):
    monkeypatch.setattr(B, "_numcodecs_threads", lambda: 4)
    monkeypatch.setattr(B, "MAX_THREADS", 1)
    monkeypatch.setattr(B, "_run", lambda *a: pytest.fail("_run called"))
    a = np.linspace(0, 1, 100_003).astype(np.float32)
    out = np.empty_like(a)
    assert B.decode_checked(frame_of(a, 1 << 11), out, "finite", 0, a.size) is True
    np.testing.assert_array_equal(out, a)


def test_kernels_are_decided_once_and_seen_by_every_thread(monkeypatch):
    """The lock-free look-up never sees a half-made decision: every thread gets the module, one self-test."""
    import time

    k = kernels()
    monkeypatch.setattr(B, "_state", {})
    runs = []
    real = B._self_test
    monkeypatch.setattr(B, "_self_test", lambda kern: runs.append(1) or time.sleep(0.2) or real(kern))
    got = []
    threads = [threading.Thread(target=lambda: got.append(B._kernels())) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert runs == [1] and got == [k] * 6


def test_self_test_failure_means_whole_chunk_decodes(monkeypatch):
    monkeypatch.setattr(B, "_state", {})
    monkeypatch.setattr(B, "_self_test", lambda kern: False)
    assert not B.available()
    a = np.linspace(0, 1, 50_000)
    assert B.decode_checked(frame_of(a), np.empty_like(a), "finite", 0, a.size) is None


# ------------------------------------------------------------------- a store's y: chunks of one block
def _store(tmp_path, rows=60_000, n=40):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((rows, n)).astype(np.float32)
    y = rng.integers(0, 5, rows).astype(np.float64)
    path = tmp_path / "s"
    sr.GroupStore.create(path, n_features=n).append(X, y, np.repeat(np.arange(rows // 100), 100))
    return path, X, y


def test_store_y_chunks_of_one_block_take_the_fused_check(tmp_path, monkeypatch):
    """y's full chunks (one blosc block each) are decoded and checked by one kernel call, not by numcodecs'
    whole-chunk decode and a separate check; the blocks read are the stored ones."""
    path, X, y = _store(tmp_path)
    full = int(sr.GroupStore.open(path)._y.chunks[0])
    first = np.fromfile(path / "y" / "c" / "0", np.uint8)
    assert blocks_of(first) == 1 and not first[2] & 0x02
    calls = []
    real = blosc.decompress
    monkeypatch.setattr(blosc, "decompress", lambda src, dest=None: calls.append(dest.shape) or real(src, dest))
    got = [(b.X.copy(), b.y.copy()) for b in sr.GroupStore.open(path).blocks(max_rows=25_000, prefetch=False)]
    assert -(-y.size // full) == 3
    assert calls.count((full,)) == 1, calls             # of y's 3 chunks only the partly filled last one whole
    np.testing.assert_array_equal(np.concatenate([g[1] for g in got]), y)
    np.testing.assert_array_equal(np.concatenate([g[0] for g in got]), X)


@pytest.mark.parametrize("bad_row", [0, 1_234, 26_213, 26_214, 59_999])
def test_store_bad_y_named_the_same_by_every_path(tmp_path, bad_row):
    """A NaN edited into y (bindings refreshed, as an attacker would): the same message with the fused
    one-call check and blosc's threads on (the plan-and-run path)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("store_edits", Path(__file__).parents[1] / "hardening" / "store_edits.py")
    edits = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(edits)
    path, _X, _y = _store(tmp_path)
    edits.poke(str(path), "y", (bad_row,), np.nan)
    messages = []
    for threads in (1, 2):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(B, "_numcodecs_threads", lambda t=threads: t)
            with pytest.raises(StoreFormatError) as err:
                for _ in sr.GroupStore.open(path).blocks(max_rows=25_000, prefetch=False):
                    pass
            messages.append(str(err.value))
    assert len(set(messages)) == 1, messages
    assert f"row {bad_row}" in messages[0] and "'y'" in messages[0]


def test_thread_count_answers_use_threads_false_without_asking_numcodecs(monkeypatch):
    """``use_threads = False`` (zarr's and the local store I/O's setting) is answered before numcodecs'
    ``_get_use_threads()`` (7-17 us a chunk with cold caches, issue 16); the other settings still ask it."""
    asked = []
    real = blosc._get_use_threads
    monkeypatch.setattr(blosc, "_get_use_threads", lambda: asked.append(1) or real())
    monkeypatch.setattr(blosc, "use_threads", False)
    assert B._numcodecs_threads() == 1 and asked == []
    monkeypatch.setattr(blosc, "use_threads", True)
    assert B._numcodecs_threads() == blosc.get_nthreads() and asked == [1]

"""The unshuffle kernels and the check on shuffled bytes (issue 16), against numpy and numcodecs.

References: blosc's byte shuffle of ``m`` values of ``t`` bytes is the
``(m, t)`` byte matrix transposed (stream ``k`` = byte ``k`` of every value),
so its inverse is ``s.reshape(t, m).T``; the first bad value is
``np.flatnonzero(~np.isfinite(x[:cnt]))[0]``.  ``decode_chunk_finite_streams``
is compared with numcodecs' ``blosc.decompress`` of the whole frame.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numcodecs import blosc

import streamrank as sr
from streamrank.io import _blosc_blocks as B
from streamrank.io import _unshuffle_kernels as U
from streamrank.io.schema import StoreFormatError

UINT = {4: np.uint32, 8: np.uint64}
FLOAT = {4: np.float32, 8: np.float64}


def shuffled(x):
    """blosc's byte shuffle of the values ``x``: their bytes, stream by stream (uint8)."""
    return np.ascontiguousarray(x.view(np.uint8).reshape(x.size, x.itemsize).T).reshape(-1)


def ref_first_bad(x, cnt):
    hits = np.flatnonzero(~np.isfinite(x[:cnt]))
    return int(hits[0]) if hits.size else -1


def first_bad_streams(s, m, cnt, itemsize):
    fn = U.first_nonfinite_f32_streams if itemsize == 4 else U.first_nonfinite_f64_streams
    return fn(s, m, cnt)


# ------------------------------------------------------------------------------------------ unshuffle
@pytest.mark.parametrize("itemsize", [4, 8])
@pytest.mark.parametrize("m", [0, 1, 7, 8, 9, 4_096, 4_097, 100_003])
def test_unshuffle_inverts_the_byte_shuffle(itemsize, m):
    x = np.random.default_rng(m).integers(0, 256, m * itemsize, dtype=np.uint8).view(UINT[itemsize])
    s = shuffled(x)
    s.flags.writeable = False                 # the kernels only read their input
    d = np.full(m, 7, UINT[itemsize])
    (U.unshuffle4 if itemsize == 4 else U.unshuffle8)(s, d)
    np.testing.assert_array_equal(d, x)
    np.testing.assert_array_equal(d, s.reshape(itemsize, m).T.copy().view(UINT[itemsize]).reshape(-1))


@pytest.mark.parametrize("itemsize", [4, 8])
def test_unshuffle_reads_streams_of_m_bytes_from_a_longer_scratch(itemsize):
    """The kernels get a scratch block bigger than the block (the last, shorter block of a chunk)."""
    m = 1_001
    x = np.arange(m, dtype=UINT[itemsize]) * UINT[itemsize](0x01010101)
    s = np.concatenate([shuffled(x), np.full(999, 255, np.uint8)])
    d = np.empty(m, UINT[itemsize])
    (U.unshuffle4 if itemsize == 4 else U.unshuffle8)(s, d)
    np.testing.assert_array_equal(d, x)


# ---------------------------------------------------------------------------- the check on the streams
def values(itemsize, m, seed=0):
    """Finite values of every kind the exponent test must pass: normal, tiny, subnormal, ±0, the largest
    finite (top seven exponent bits all ones: the fast scan flags its stride, the exact test clears it)."""
    rng = np.random.default_rng(seed)
    f = FLOAT[itemsize]
    x = (rng.standard_normal(m) * 10.0 ** rng.integers(-30, 30, m)).astype(f)
    fi = np.finfo(f)
    special = np.array([0.0, -0.0, fi.max, -fi.max, fi.tiny, fi.smallest_subnormal, fi.max / 2], f)
    x[rng.integers(0, m, min(m, 40))] = special[rng.integers(0, special.size, min(m, 40))]
    return x


BAD = {4: [np.float32(np.nan), np.float32(np.inf), np.float32(-np.inf), np.uint32(0x7F800001).view(np.float32),
           np.uint32(0xFFC00000).view(np.float32)],
       8: [np.nan, np.inf, -np.inf, np.uint64(0x7FF0000000000001).view(np.float64),
           np.uint64(0xFFF8000000000000).view(np.float64)]}


@pytest.mark.parametrize("itemsize", [4, 8])
@pytest.mark.parametrize("m", [1, 7, 8, 13, 4_095, 4_096, 4_097, 40_000 + 3])
@pytest.mark.parametrize("offset", [0, 1, 5])      # where the scratch starts against an 8-byte boundary
def test_stream_check_finds_the_first_bad_value(itemsize, m, offset):
    x = values(itemsize, m, seed=m)
    base = np.zeros(shuffled(x).size + 16, np.uint8)
    s = base[offset:offset + x.size * itemsize]
    s[:] = shuffled(x)
    assert first_bad_streams(s, m, m, itemsize) == ref_first_bad(x, m) == -1
    for k, pos in enumerate(sorted({0, m // 2, max(0, m - 1), min(m - 1, 4_096), min(m - 1, 4_103)})):
        y = x.copy()
        y[pos] = BAD[itemsize][k % len(BAD[itemsize])]
        if pos + 9 < m:
            y[pos + 9] = BAD[itemsize][0]          # a later bad value: the first one is reported
        s[:] = shuffled(y)
        assert first_bad_streams(s, m, m, itemsize) == ref_first_bad(y, m) == pos
        assert first_bad_streams(s, m, pos, itemsize) == -1          # not among the values checked
        assert first_bad_streams(s, m, 0, itemsize) == -1


@settings(max_examples=60, deadline=None)
@given(itemsize=st.sampled_from([4, 8]), m=st.integers(1, 20_000), cnt_frac=st.floats(0, 1),
       seed=st.integers(0, 2**31), n_bad=st.integers(0, 3))
def test_stream_check_agrees_with_isfinite_on_random_bits(itemsize, m, cnt_frac, seed, n_bad):
    """Random bit patterns, with exponents all ones planted: the first position numpy calls not finite."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, np.iinfo(UINT[itemsize]).max, m, dtype=UINT[itemsize], endpoint=True)
    exp = UINT[itemsize](0x7F800000 if itemsize == 4 else 0x7FF0000000000000)
    bits &= ~exp                                     # finite unless planted below (or all ones but one bit)
    near = rng.integers(0, m, min(m, 50))
    bits[near] |= exp ^ UINT[itemsize](1 << (23 if itemsize == 4 else 52))   # exponent all ones but its low bit
    bits[rng.integers(0, m, n_bad)] |= exp
    x = bits.view(FLOAT[itemsize])
    cnt = int(cnt_frac * m)
    assert first_bad_streams(shuffled(x), m, cnt, itemsize) == ref_first_bad(x, cnt)


# --------------------------------------------------------------------- the chunk kernel against numcodecs
pytestmark_kernels = pytest.mark.skipif(not B.available(), reason="this numcodecs' c-blosc has no usable "
                                                                  "blosc_decompress_ctx")


def kernels():
    return B._kernels()


def frame_of(a, blocksize=1 << 12, shuffle=blosc.SHUFFLE, cname=b"lz4", clevel=5):
    return np.frombuffer(blosc.compress(a, cname, clevel, shuffle, blocksize=blocksize), np.uint8).copy()


def sentinel_scratch(n=1 << 20):
    return np.full(n, 0xA5, np.uint8)


@pytestmark_kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", [1, 7, 4_096, 20_971, 65_537, 100_003])
@pytest.mark.parametrize("blocksize", [1 << 12, 3 << 12, 1 << 22])
@pytest.mark.parametrize("cname", [b"lz4", b"zstd", b"blosclz"])
def test_streams_decode_equals_numcodecs(dtype, size, blocksize, cname):
    a = values(np.dtype(dtype).itemsize, size, seed=size)
    a[: size // 3] = np.round(a[: size // 3])
    frame = frame_of(a, blocksize, cname=cname)
    before = frame.copy()
    out = np.full_like(a, 7)
    scratch = sentinel_scratch()
    r = kernels().decode_chunk_finite_streams(frame, out, size, scratch)
    np.testing.assert_array_equal(frame, before)
    if frame[2] & 0x02:                       # stored raw (incompressible): not a frame these kernels split
        assert r == -2
        return
    ref = np.empty_like(a)
    blosc.decompress(before, ref)
    assert r == -1
    np.testing.assert_array_equal(out.view(np.uint8), ref.view(np.uint8))
    assert size * a.itemsize < 256 or (scratch != 0xA5).any()          # the streams path ran (not a fall-back)


@pytestmark_kernels
@pytest.mark.parametrize("shuffle", [blosc.NOSHUFFLE, blosc.BITSHUFFLE])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_frames_not_byte_shuffled_take_the_fused_kernel(shuffle, dtype):
    a = np.repeat(np.linspace(-3, 3, 1_001), 50)[:50_001].astype(dtype)     # compresses unshuffled too
    frame = frame_of(a, 1 << 13, shuffle)
    assert not frame[2] & 0x02
    out = np.empty_like(a)
    scratch = sentinel_scratch()
    assert kernels().decode_chunk_finite_streams(frame, out, a.size, scratch) == -4
    assert (scratch == 0xA5).all()
    assert B.decode_checked(frame, out, "finite", 0, a.size) is True      # the fused kernel decodes it
    np.testing.assert_array_equal(out, a)
    a[777] = np.nan
    assert B.decode_checked(frame_of(a, 1 << 13, shuffle), out, "finite", 0, a.size) is None


@pytestmark_kernels
def test_type_size_other_than_the_values_takes_the_fused_kernel():
    a = np.repeat(np.linspace(-3, 3, 1_001), 50)[:50_001].astype(np.float32)
    frame = np.frombuffer(blosc.compress(a.view(np.uint8), b"lz4", 5, blosc.SHUFFLE, 1 << 13), np.uint8).copy()
    assert frame[3] == 1 and not frame[2] & 0x02
    out, scratch = np.empty_like(a), sentinel_scratch()
    assert kernels().decode_chunk_finite_streams(frame, out, a.size, scratch) == -4
    assert (scratch == 0xA5).all()
    assert B.decode_checked(frame, out, "finite", 0, a.size) is True
    np.testing.assert_array_equal(out, a)


@pytestmark_kernels
def test_a_scratch_smaller_than_a_block_is_not_the_kernels():
    a = np.linspace(-3, 3, 50_001).astype(np.float32)
    frame = frame_of(a, 1 << 14)
    out, scratch = np.empty_like(a), sentinel_scratch((1 << 14) - 4)
    assert kernels().decode_chunk_finite_streams(frame, out, a.size, scratch) == -4
    assert (scratch == 0xA5).all()


@pytestmark_kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("blocksize", [1 << 12, 1 << 22])
@pytest.mark.parametrize("where", ["first", "block_edge", "middle", "last"])
def test_streams_decode_finds_the_first_bad_value(dtype, blocksize, where):
    size = 100_003
    a = np.linspace(-5, 5, size).astype(dtype)
    per = int.from_bytes(frame_of(a, blocksize)[8:12].tobytes(), "little") // a.itemsize
    pos = {"first": 0, "block_edge": min(per, size - 1), "middle": size // 2, "last": size - 1}[where]
    a[pos] = np.inf
    a[-1] = np.nan if where != "last" else a[-1]
    frame = frame_of(a, blocksize)
    before = frame.copy()
    assert kernels().decode_chunk_finite_streams(frame, np.empty_like(a), size, sentinel_scratch()) == pos
    np.testing.assert_array_equal(frame, before)
    if pos > 0:
        out = np.empty_like(a)
        assert kernels().decode_chunk_finite_streams(frame, out, pos, sentinel_scratch()) == -1
        np.testing.assert_array_equal(out[:pos], a[:pos])


@pytestmark_kernels
def test_streams_decode_hands_back_what_it_does_not_decode_and_restores_the_frame():
    k = kernels()
    a = np.linspace(0, 1, 50_000).astype(np.float32)
    memcpyed = frame_of(a, clevel=0)
    assert memcpyed[2] & 0x02
    assert k.decode_chunk_finite_streams(memcpyed, np.empty_like(a), a.size, sentinel_scratch()) == -2
    assert k.decode_chunk_finite_streams(frame_of(a), np.empty(a.size - 1, np.float32), a.size,
                                         sentinel_scratch()) == -2          # nbytes differ
    refused = frame_of(a, 1 << 22)
    refused[20:24] = np.frombuffer(np.int32(-5).tobytes(), np.uint8)
    kept = refused.copy()
    assert k.decode_chunk_finite_streams(refused, np.empty_like(a), a.size, sentinel_scratch()) == -3
    np.testing.assert_array_equal(refused, kept)
    assert k.decode_chunk_finite_streams(np.zeros(8, np.uint8), np.empty_like(a), a.size, sentinel_scratch()) == -4
    assert k.decode_chunk_finite(np.zeros(8, np.uint8), np.empty_like(a), a.size) == -2      # what -4 leads to


# -------------------------------------------------------------------------------- the chunk decoder's choice
@pytestmark_kernels
def test_decode_checked_runs_the_streams_kernel_for_floats(monkeypatch):
    k = kernels()
    assert B._state.get("streams") is True
    monkeypatch.setattr(B, "_numcodecs_threads", lambda: 1)
    monkeypatch.setattr(k, "decode_chunk_finite", lambda *a: pytest.fail("decode_chunk_finite called"))
    for dtype in (np.float32, np.float64):
        a = np.linspace(0, 1, 50_000).astype(dtype)
        out = np.empty_like(a)
        assert B.decode_checked(frame_of(a, 1 << 14), out, "finite", 0, a.size) is True
        np.testing.assert_array_equal(out, a)
        a[-7] = np.nan
        assert B.decode_checked(frame_of(a, 1 << 14), out, "finite", 0, a.size) is None
    idx = np.arange(50_000, dtype=np.int32)           # indices: the range kernel, as before
    assert B.decode_checked(frame_of(idx, 1 << 14), np.empty_like(idx), "range", 50_000, idx.size) is True


@pytestmark_kernels
@pytest.mark.parametrize("why", ["self-test fails", "self-test raises", "big endian"])
def test_without_the_streams_kernel_floats_take_the_fused_kernel(monkeypatch, why):
    import types

    monkeypatch.setattr(B, "_state", {})
    if why == "big endian":
        monkeypatch.setattr(B, "sys", types.SimpleNamespace(byteorder="big", modules=B.sys.modules))
    else:
        def broken(kern):
            if why == "self-test raises":
                raise RuntimeError("no")
            return False
        monkeypatch.setattr(B, "_self_test_streams", broken)
    k = B._kernels()
    assert k is not None and B._state["streams"] is False
    monkeypatch.setattr(B, "_numcodecs_threads", lambda: 1)
    monkeypatch.setattr(k, "decode_chunk_finite_streams", lambda *a: pytest.fail("streams kernel called"))
    a = np.linspace(0, 1, 50_000)
    out = np.empty_like(a)
    assert B.decode_checked(frame_of(a), out, "finite", 0, a.size) is True
    np.testing.assert_array_equal(out, a)


@pytestmark_kernels
def test_blocks_above_the_scratch_limit_take_the_fused_kernel(monkeypatch):
    k = kernels()
    monkeypatch.setattr(B, "_numcodecs_threads", lambda: 1)
    monkeypatch.setattr(B, "SCRATCH_MAX", 1 << 12)
    monkeypatch.setattr(B, "_local", type(B._local)())          # this thread's scratch: none yet
    monkeypatch.setattr(k, "decode_chunk_finite_streams", lambda *a: pytest.fail("streams kernel called"))
    a = np.linspace(0, 1, 50_000).astype(np.float32)
    out = np.empty_like(a)
    assert B.decode_checked(frame_of(a, 1 << 14), out, "finite", 0, a.size) is True
    np.testing.assert_array_equal(out, a)


@pytestmark_kernels
def test_each_thread_has_its_own_scratch():
    import threading

    got = {}

    def grab(name):
        got[name] = B._scratch(frame_of(np.zeros(70_000, np.float32), 1 << 16))

    threads = [threading.Thread(target=grab, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(v) for v in got.values()}) == 3 and all(v.size >= 1 << 16 for v in got.values())


# ------------------------------------------------------------------------------------ through a store
@pytestmark_kernels
@pytest.mark.parametrize("bad_row", [0, 26_213, 59_999])
def test_store_bad_X_named_the_same_by_every_path(tmp_path, bad_row):
    """A NaN edited into X (bindings refreshed): the same message from the streams kernel and the fused kernel;
    a clean store reads the same blocks every way."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("store_edits", Path(__file__).parents[1] / "hardening" / "store_edits.py")
    edits = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(edits)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60_000, 40)).astype(np.float32)
    y = rng.integers(0, 5, 60_000).astype(np.float64)
    path = tmp_path / "s"
    sr.GroupStore.create(path, n_features=40).append(X, y, np.repeat(np.arange(600), 100))
    got = [b.X.copy() for b in sr.GroupStore.open(path).blocks(max_rows=25_000, prefetch=False)]
    np.testing.assert_array_equal(np.concatenate(got), X)
    edits.poke(str(path), "X", (bad_row, 3), np.nan)
    messages = []
    for streams in (True, False):
        with pytest.MonkeyPatch.context() as mp:
            B._kernels()
            mp.setitem(B._state, "streams", streams)
            with pytest.raises(StoreFormatError) as err:
                for _ in sr.GroupStore.open(path).blocks(max_rows=25_000, prefetch=False):
                    pass
            messages.append(str(err.value))
    assert len(set(messages)) == 1, messages
    assert f"row {bad_row}" in messages[0] and "'X'" in messages[0]


@pytestmark_kernels
def test_streams_self_test_passes_here_and_fails_on_a_kernel_that_does_not_decode(monkeypatch):
    """Where the block-wise decode is available, so is the streams kernel (else float chunks would silently take
    the slower path); a kernel that hands every frame back (-4) or decodes wrongly fails the self-test."""
    k = kernels()
    assert B._self_test_streams(k) is True and B._streams_ok(k) is True
    real = k.decode_chunk_finite_streams
    monkeypatch.setattr(k, "decode_chunk_finite_streams", lambda *a: -4)
    assert B._self_test_streams(k) is False

    def off_by_one(frame, a, n, scratch):
        r = real(frame, a, n, scratch)
        a[0] += 1
        return r
    monkeypatch.setattr(k, "decode_chunk_finite_streams", off_by_one)
    assert B._self_test_streams(k) is False

"""Decode a blosc chunk block by block with its value check fused in, when this process's c-blosc allows it.

The kernels (:mod:`streamrank.io._blosc_block_kernels`) call c-blosc's
``blosc_decompress_ctx``.  This module finds that function in the c-blosc
numcodecs uses (its extension module bundles it, or links a shared
``libblosc``), registers its address for the kernels, and checks once per
process, on a chunk it compresses itself (several blocks and a shorter last
one, shuffled), that the block-wise decode gives exactly what
``numcodecs.blosc.decompress`` gives.  If any of that fails — another blosc
build, a numcodecs without c-blosc 1.x — :func:`decode_checked` answers
``None`` and the caller decodes the chunk whole and checks it afterwards, as
before: slower by the checks' cache misses, never different.

A chunk's blocks are decoded on as many threads as numcodecs'
``blosc.decompress`` would decode the whole chunk with (``blosc.use_threads``
and ``blosc.get_nthreads()``), so that a checked read uses the same
parallelism as an unchecked one: this thread and daemon helper threads each
take a run of consecutive blocks (:func:`_run`).  That is one thread unless
the user turns blosc's threads back on: zarr sets
``numcodecs.blosc.use_threads = False`` when it is imported (and numcodecs
itself uses threads only from the main thread), and a local store's chunks
are decoded without numcodecs, on one thread (:mod:`streamrank.io._blosc_lib`,
whose library this module takes c-blosc's address from, so that a checked
read imports no numcodecs either).  :data:`MAX_THREADS` caps
the count.  On one thread a chunk costs one kernel call
(``decode_chunk_finite`` / ``decode_chunk_in_range``), a chunk of a single
block included (issue 16: what the checked path pays per chunk beyond the
check itself).

A float chunk whose blocks are byte-shuffled with the value's own size (every
float array streamrank writes: X, y, CSR data) takes
``decode_chunk_finite_streams`` instead: c-blosc decodes each block without
its unshuffle into this thread's scratch block, the check reads the
exponent stream there while it is in cache, and the unshuffle is done by
:mod:`streamrank.io._unshuffle_kernels` -- the check then reads no decoded
byte back, and a checked chunk costs what an unchecked one does, within a
few per cent (``benchmarks/stream_throughput.py`` section 6).  That kernel
has its own self-test (:func:`_self_test_streams`); where it fails, or on a
big-endian machine, the chunks take ``decode_chunk_finite`` as before.
"""
from __future__ import annotations

import logging
import os
import sys
import threading

import numpy as np

__all__ = ["MAX_THREADS", "available", "decode_checked"]

#: at most this many threads decode one chunk's blocks (None: as many as numcodecs' ``blosc.decompress``
#: would use for the whole chunk, see :func:`_run`; 1: this thread only)
MAX_THREADS = None

_state: dict = {}
_lock = threading.Lock()
_SHUFFLE = 1             # blosc's byte shuffle (numcodecs.blosc.SHUFFLE)
#: largest blosc block (bytes) the streams kernel gets a scratch block for; a frame of bigger blocks (not one
#: streamrank writes: its chunks are ~4 MiB with 512 KiB blocks) takes the fused kernel instead
SCRATCH_MAX = 4 << 20
_local = threading.local()             # .scratch: this thread's scratch block for the streams kernel


def _find_decompress_ctx() -> int | None:
    """Address of ``blosc_decompress_ctx`` in numcodecs' c-blosc, or None.

    Taken from the library :mod:`streamrank.io._blosc_lib` loads (numcodecs'
    own extension module, opened without importing numcodecs), so that a
    checked read of a local store imports no numcodecs either (issue 22) and
    keeps numcodecs' thread setting out of it (:func:`_numcodecs_threads`);
    numcodecs itself only where that library cannot be loaded.
    """
    import ctypes

    from . import _blosc_lib

    try:
        lib = _blosc_lib.library()
        if lib is None:
            from numcodecs import blosc
            lib = ctypes.CDLL(blosc.__file__)
        return ctypes.cast(lib.blosc_decompress_ctx, ctypes.c_void_p).value
    except (ImportError, OSError, AttributeError):
        return None


def _self_test(kernels) -> bool:
    """The block-wise decode equals numcodecs' decode: a chunk of several shuffled blocks and a short last one,
    and a chunk of a single block (what :func:`decode_checked` runs on one thread, the usual case).

    The frames are compressed as streamrank writes chunks (:func:`streamrank.io._blosc_lib.compress`: numcodecs'
    c-blosc without threads, numcodecs not imported).
    """
    from ._blosc_lib import compress

    def frame_of(a, blocksize):
        return np.frombuffer(compress(a, b"lz4", 5, _SHUFFLE, blocksize, a.itemsize), np.uint8).copy()

    x = np.arange(300_001, dtype=np.float32) * np.float32(0.25)
    x[::7] = -x[::7]
    frame = frame_of(x, 1 << 14)
    before = frame.copy()
    out = np.empty_like(x)
    ok = kernels.decode_chunk_finite(frame, out, out.size) == -1
    idx = np.arange(300_001, dtype=np.int32)
    frame2 = frame_of(idx, 1 << 14)
    out2 = np.empty_like(idx)
    ok = ok and kernels.decode_chunk_in_range(frame2, out2.view(np.uint32), out2.size, 300_000) == 300_000
    one = x[:20_001] * np.float32(3)
    frame3 = frame_of(one, 1 << 20)
    out3 = np.empty_like(one)
    ok = ok and kernels.decode_chunk_finite(frame3, out3, out3.size) == -1
    return bool(ok and np.array_equal(out, x) and np.array_equal(out2, idx) and np.array_equal(frame, before)
                and np.array_equal(out3, one))


def _self_test_streams(kernels) -> bool:
    """``decode_chunk_finite_streams`` equals c-blosc's decode (numcodecs'): float32 and float64 chunks of several
    shuffled blocks and a short last one (whose streams start off an 8-byte boundary), and of one block."""
    from ._blosc_lib import compress

    ok = True
    for dtype, n, blocksize in ((np.float32, 300_001, 1 << 14), (np.float64, 150_003, 1 << 14),
                                (np.float32, 20_001, 1 << 20), (np.float64, 9_999, 1 << 20)):
        x = np.arange(n, dtype=dtype) * dtype(0.25) - dtype(n // 3)
        frame = np.frombuffer(compress(x, b"lz4", 5, _SHUFFLE, blocksize, x.itemsize), np.uint8).copy()
        before = frame.copy()
        out = np.empty_like(x)
        scratch = np.empty(int.from_bytes(frame[8:12].tobytes(), "little"), np.uint8)    # the frame's block size
        ok = ok and kernels.decode_chunk_finite_streams(frame, out, n, scratch) == -1 \
            and np.array_equal(out.view(np.uint8), x.view(np.uint8)) and np.array_equal(frame, before)
        x[n - 2] = np.inf
        frame = np.frombuffer(compress(x, b"lz4", 5, _SHUFFLE, blocksize, x.itemsize), np.uint8).copy()
        ok = ok and kernels.decode_chunk_finite_streams(frame, out, n, scratch) == n - 2
    return bool(ok)


def _streams_ok(kernels) -> bool:
    """Whether ``decode_chunk_finite_streams`` may be used here (little endian, its self-test passed)."""
    if sys.byteorder != "little":
        return False
    try:
        good = _self_test_streams(kernels)
    except Exception:
        logging.getLogger(__name__).debug("the streams decode's self-test raised", exc_info=True)
        good = False
    if not good:
        logging.getLogger(__name__).debug("streams decode unavailable in this process (its self-test failed): "
                                          "float chunks are checked after c-blosc's own unshuffle")
    return good


def _scratch(frame: np.ndarray):
    """This thread's scratch block, at least the frame's block size (header bytes 8-12); None when that is above
    :data:`SCRATCH_MAX` (the kernel checks the header itself: this only sizes the buffer)."""
    need = int.from_bytes(frame[8:12].tobytes(), "little") if frame.size >= 16 else 0
    buf = getattr(_local, "scratch", None)
    if buf is not None and buf.size >= need:
        return buf
    if need > SCRATCH_MAX:
        return None
    _local.scratch = buf = np.empty(max(need, 1 << 19), np.uint8)
    return buf


def _kernels():
    """The kernel module once its c-blosc symbol is registered and the self-test passed; None otherwise."""
    k = _state.get("kernels", _state)
    if k is not _state:               # decided already (every checked chunk asks: no lock then)
        return k
    with _lock:
        if "kernels" not in _state:
            found = None
            try:
                addr = _find_decompress_ctx()
                if addr:
                    import llvmlite.binding as ll

                    from . import _blosc_block_kernels as kernels

                    ll.add_symbol(kernels.DECOMPRESS_SYMBOL, addr)
                    try:
                        good = _self_test(kernels)
                    except Exception:     # a blosc the kernels do not understand: decode whole chunks instead
                        logging.getLogger(__name__).debug("block-wise decode's self-test raised", exc_info=True)
                        good = False
                    if not good:          # correct but slower reads: say so where --verbose / debug logs look
                        logging.getLogger(__name__).debug("block-wise decode unavailable in this process (its "
                                                          "self-test failed): chunks are decoded whole, then checked")
                    found = kernels if good else None
                    _state["streams"] = good and _streams_ok(kernels)
            finally:                      # published once decided, for the lock-free look-up above
                _state["kernels"] = found
        return _state["kernels"]


def available() -> bool:
    """Whether chunks can be decoded block by block with the check fused in (this process's c-blosc)."""
    return _kernels() is not None


class _Helper:
    """A daemon thread that runs one kernel call at a time for :func:`_run` (the kernels release the GIL)."""

    def __init__(self):
        self._go = threading.Lock()
        self._go.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self._job = self._result = None
        threading.Thread(target=self._serve, name="streamrank-blosc-block", daemon=True).start()

    def _serve(self):
        while True:
            self._go.acquire()
            fn, args = self._job
            try:
                self._result = fn(*args)
            except BaseException as exc:      # handed to the caller
                self._result = exc
            self._job = None
            self._done.release()

    def start(self, fn, args):
        self._job = (fn, args)
        self._go.release()

    def wait(self):
        """The call's answer, or the exception it raised (returned, not raised)."""
        self._done.acquire()
        r, self._result = self._result, None
        return r


_numcodecs_blosc: list = [None]        # numcodecs.blosc once imported (asked once a chunk)
_helpers: list = []
_helpers_lock = threading.Lock()      # held by the one call that uses the helpers


def _forget_helpers():
    """In a forked child the helper threads are gone: start new ones when needed."""
    global _helpers_lock
    _helpers.clear()
    _helpers_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helpers)


def _numcodecs_threads() -> int:
    """Threads an unchecked chunk would be decoded with, called from here (1: no threads).

    numcodecs not imported: one (:mod:`streamrank.io._blosc_lib` decodes a
    local store's chunks with ``blosc_decompress_ctx(..., 1)`` then; asking
    numcodecs would import it, whose default is threads from the main
    thread).  ``use_threads = False`` (what importing zarr, or streamrank's
    local store I/O, sets) is answered before numcodecs'
    ``_get_use_threads()``, which gives the same answer then: that call
    (``multiprocessing.current_process()`` and more) cost 7-17 us a chunk
    between two 4 MiB decodes, with the interpreter's caches cold (issue 16,
    measured).  Otherwise numcodecs' own rule.
    """
    blosc = _numcodecs_blosc[0]
    if blosc is None:
        blosc = sys.modules.get("numcodecs.blosc")
        if blosc is None:
            return 1
        _numcodecs_blosc[0] = blosc
    if blosc.use_threads is False:
        return 1
    use = getattr(blosc, "_get_use_threads", None)
    if use is not None:
        threaded = use()
    else:                                 # pragma: no cover - numcodecs' rule: threads from the main thread only
        threaded = blosc.use_threads if blosc.use_threads in (True, False) else \
            threading.current_thread() is threading.main_thread()
    return max(1, int(blosc.get_nthreads())) if threaded else 1


def _run(fn, args, nblocks: int) -> int:
    """``fn(*args, k0, k1)`` over blocks ``0..nblocks`` by offset, on as many threads as numcodecs would use.

    The blocks are cut into ``T`` runs of consecutive blocks (at least 2
    each), decoded at once, one per thread, except the last block of each
    run but the final one: the first block of the next run overwrites that
    block's last 20 bytes while it is decoded (:mod:`._blosc_block_kernels`),
    so these ``T - 1`` blocks are decoded afterwards, on this thread.
    Returns -1 if every call did, else the first other answer.
    """
    t = min(_numcodecs_threads(), nblocks // 2, MAX_THREADS or nblocks)
    if t < 2 or not _helpers_lock.acquire(blocking=False):
        return fn(*args, 0, nblocks)
    try:
        while len(_helpers) < t - 1:
            _helpers.append(_Helper())
        cuts = [nblocks * i // t for i in range(t + 1)]
        for i in range(1, t):
            _helpers[i - 1].start(fn, args + (cuts[i], cuts[i + 1] - (1 if i < t - 1 else 0)))
        results = []
        try:
            results.append(fn(*args, 0, cuts[1] - 1))
        finally:
            try:
                for i in range(1, t):     # never go on while a helper still writes into the frame
                    results.append(_helpers[i - 1].wait())
            except BaseException:         # interrupted while waiting: these helpers may still be busy
                _helpers.clear()
                raise
        for r in results:
            if isinstance(r, BaseException):
                raise r
        for i in range(1, t):
            if results[0] != -1:
                break
            results[0] = fn(*args, cuts[i] - 1, cuts[i])
        return next((r for r in results if r != -1), -1)
    finally:
        _helpers_lock.release()


def decode_checked(frame: np.ndarray, out: np.ndarray, kind: str, limit: int, n_check: int) -> bool | None:
    """Decode the blosc ``frame`` (a writable uint8 copy of a chunk) into ``out`` and check ``out[:n_check]``.

    ``kind``: ``"finite"`` (no NaN/±inf; float ``out``) or ``"range"``
    (signed integer ``out`` within ``[0, limit)``), flat positions.  Returns
    True when every block was decoded and every checked value is good; None
    when the caller must decode the chunk whole and run its plain check
    (no block-wise decode here, a frame this does not split, a block c-blosc
    refused, or a bad value: the plain path names it exactly as before).
    The blocks are decoded on as many threads as numcodecs' ``blosc.decompress``
    would use for the whole chunk (:func:`_run`).
    """
    kernels = _kernels()
    if kernels is None or not frame.flags.writeable or not out.flags.c_contiguous:
        return None
    flat = out.reshape(-1)
    finite = kind == "finite" and flat.dtype.kind == "f"
    if not finite and not (kind == "range" and flat.dtype.kind == "i"):
        return None
    head = (flat, int(n_check)) if finite else (flat.view(f"u{flat.dtype.itemsize}"), int(n_check), int(limit))
    if MAX_THREADS == 1 or _numcodecs_threads() < 2:     # one kernel call, a frame of one block too (issue 16)
        if finite and _state.get("streams"):
            scratch = _scratch(frame)
            if scratch is not None:
                r = kernels.decode_chunk_finite_streams(frame, *head, scratch)
                if r != -4:                   # -4: not a byte-shuffled frame of this type size
                    return True if r == -1 else None
        fn = kernels.decode_chunk_finite if finite else kernels.decode_chunk_in_range
        return True if fn(frame, *head) == -1 else None
    fn = kernels.decode_blocks_finite if finite else kernels.decode_blocks_in_range
    bs, starts, order = kernels.block_plan(frame, flat.nbytes, flat.itemsize)
    if bs < 0:
        return None
    return True if _run(fn, (frame, *head, bs, starts, order), order.shape[0]) == -1 else None

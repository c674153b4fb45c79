"""Numba kernels that decode a blosc chunk one block at a time and check each block while it is in cache.

A streamrank chunk is a blosc (format 2, c-blosc 1.x) frame of about 4 MiB
cut into blocks of 512 KiB (blosc's own choice for lz4 at level 5): a
16-byte header (version, compressor version, flags, type size, ``nbytes``,
``blocksize``, ``cbytes``), one 4-byte offset per block (``bstarts``), then
each block's compressed bytes.  Decoding the chunk whole and checking it
afterwards reads 4 MiB back from beyond the 512 KiB L2 cache: the checks ran
at 15-20 GB/s there instead of the ~70 GB/s they reach in cache (measured,
``benchmarks/stream_throughput.py`` section 6 and the note of issue 16).

The kernels decode block ``j`` with c-blosc's own ``blosc_decompress_ctx`` (one thread a call) straight
into its place in the destination and run the value check
(:mod:`streamrank.io._check_kernels`) on it at once, while it is in L2.
c-blosc has no call that decodes one block into the caller's buffer
(``blosc_getitem`` decodes into a scratch block and copies it: measured
about as slow as checking afterwards), so each block is handed to it as a
one-block frame: the 20 bytes in front of the block's data (the previous
block's data in file order, already decoded, or the chunk's own header) are
saved, overwritten with a header describing that block alone (offset 20,
``cbytes`` = the rest of the buffer, so c-blosc's bounds checks stay within
it), and restored right after the call.  The last, shorter block gets
``blocksize = nbytes`` and the no-split flag (0x10): c-blosc never splits a
leftover block, so the bytes decode the same.  The frame is the caller's
writable copy of the chunk file; it is left as it was.

:func:`block_plan` reads the block table once; :func:`decode_blocks_finite`
and :func:`decode_blocks_in_range` decode and check a run ``order[k0:k1]``
of the blocks (by offset), so that several threads can share a chunk
(:mod:`streamrank.io._blosc_blocks` runs them on as many threads as
numcodecs would decode the chunk with): two runs may be decoded at once as
long as no block of one is the block right after one of the other, whose
last 20 bytes it borrows.  :func:`decode_checked_finite` and
:func:`decode_checked_in_range` are the whole frame on the calling thread.
:func:`decode_chunk_finite` and :func:`decode_chunk_in_range` are the same
in one kernel call (plan, decode and check: one dispatch a chunk), and they
also take a frame of a single block (its own header is the one-block
header): what the chunk decoder runs on one thread, the usual case
(issue 16: the checked path's fixed cost per chunk was a plan handed back
to Python, a second dispatch and, for a chunk of one block such as ``y``'s,
a whole-chunk decode by numcodecs plus a separate check).
:func:`decode_chunk_finite_streams` is :func:`decode_chunk_finite` for the
byte-shuffled float chunks streamrank writes, with the check moved before
the unshuffle: c-blosc decodes each block with the shuffle flag cleared into
a scratch block, the exponent stream is checked there, in cache, and
:mod:`streamrank.io._unshuffle_kernels` unshuffles it into place (the check
after c-blosc's own unshuffle re-read each 512 KiB block from beyond L2:
+100-140 us a 4 MiB chunk against +6-35 us, measured).

Every kernel returns ``-1`` (decoded, all checked values good), the first
bad position it met (``>= 0``; other blocks may be left undecoded), ``-2``
(the frame is not one this kernel splits: memcpy-ed, a single block (but
for the ``decode_chunk_*`` kernels), block
offsets out of order by less than 20 bytes or outside the frame...) or
``-3`` (c-blosc refused a block); :func:`decode_chunk_finite_streams` also
``-4`` (not its frame: :func:`decode_chunk_finite` decodes it).  Anything else but ``-1`` sends the caller
(:mod:`streamrank.io._blosc_blocks`) back to the whole-chunk decode and the
plain check, which give the same result and error messages as before.  The
run kernels trust their plan: call them only with what :func:`block_plan`
returned for the same frame and a block size ``> 0``.

``blosc_decompress_ctx`` is called through the symbol
:data:`DECOMPRESS_SYMBOL`, which :mod:`streamrank.io._blosc_blocks`
registers (the address of the function in numcodecs' c-blosc) before any of
these kernels runs; the machine code refers to the name, so it caches.
"""
from __future__ import annotations

import functools

import numpy as np

from .._numba import jit
from ._check_kernels import first_nonfinite, first_out_of_range
from ._unshuffle_kernels import first_bad_exponent, unshuffle4, unshuffle8

__all__ = ["DECOMPRESS_SYMBOL", "block_size", "block_order", "block_plan", "decode_blocks_finite",
           "decode_blocks_in_range", "decode_checked_finite", "decode_checked_in_range", "decode_chunk_finite",
           "decode_chunk_in_range", "decode_chunk_finite_streams", "decode_streams_finite"]

#: name under which c-blosc's ``int blosc_decompress_ctx(const void*, void*, size_t, int)`` is registered
DECOMPRESS_SYMBOL = "streamrank_blosc_decompress_ctx"
_decompress = None   # c-blosc's function, typed when a kernel here is first made (numba import)


@functools.cache
def _numba_globals():
    """The numba-only names this module's kernels use (:func:`streamrank._numba._bind_globals`)."""
    from numba import types

    # pointers passed as intp: the same register on every 64-bit ABI numba targets
    return {"_decompress": types.ExternalFunction(DECOMPRESS_SYMBOL, types.int32(types.intp, types.intp,
                                                                                  types.uintp, types.int32))}

_HEADER = 16
_ONE_BLOCK = 20          # header + one block offset
_SHUFFLE = 0x01
_MEMCPYED = 0x02
_BITSHUFFLE = 0x04
_FUTURE = 0x08
_DONT_SPLIT = 0x10


@jit
def _get32(a, o):
    return np.int64(a[o]) | (np.int64(a[o + 1]) << 8) | (np.int64(a[o + 2]) << 16) | (np.int64(a[o + 3]) << 24)


@jit
def _put32(a, o, v):
    a[o] = v & 255
    a[o + 1] = (v >> 8) & 255
    a[o + 2] = (v >> 16) & 255
    a[o + 3] = (v >> 24) & 255


@jit
def block_size(frame, nbytes, itemsize):
    """Block size of a frame of ``nbytes`` decoded bytes that :func:`block_order` may split; -2 if not split here."""
    return _block_size(frame, nbytes, itemsize, 2)


@jit
def _block_size(frame, nbytes, itemsize, min_blocks):
    """:func:`block_size` of a frame of at least ``min_blocks`` blocks (1: a frame of one block is taken too)."""
    m = frame.shape[0]
    if m < _HEADER or frame[0] != 2 or (frame[2] & (_MEMCPYED | _FUTURE)) != 0:
        return -2
    if _get32(frame, 4) != nbytes or _get32(frame, 12) != m:
        return -2
    bs = _get32(frame, 8)
    if bs <= 0 or bs > nbytes or bs % itemsize != 0:
        return -2
    nblocks = (nbytes + bs - 1) // bs
    if nblocks < min_blocks or _HEADER + 4 * nblocks > m:
        return -2
    return bs


@jit
def block_order(frame, starts, order):
    """Fill ``starts[j]`` (offset of block ``j``'s data) and ``order`` (blocks by offset); False if not split here.

    Blocks are decoded by offset, so that the 20 bytes in front of each are
    already decoded; offsets must lie after the block table, inside the
    frame, at least 20 bytes apart.
    """
    nblocks = starts.shape[0]
    first = _HEADER + 4 * nblocks
    for j in range(nblocks):
        s = _get32(frame, _HEADER + 4 * j)
        if s < first or s >= frame.shape[0]:
            return False
        starts[j] = s
        order[j] = j
    for k in range(1, nblocks):       # insertion sort: a few blocks, usually in order already
        j = order[k]
        i = k - 1
        while i >= 0 and starts[order[i]] > starts[j]:
            order[i + 1] = order[i]
            i -= 1
        order[i + 1] = j
    for k in range(1, nblocks):
        if starts[order[k]] - starts[order[k - 1]] < _ONE_BLOCK:
            return False
    return True


@jit
def _decode_block(frame, start, j, bs, nbytes, dest):
    """Decode block ``j`` (data at ``start``) to ``dest + j * bs`` as a one-block frame; True if c-blosc did."""
    return _decode_block_as(frame, start, j, bs, nbytes, dest + j * bs, 0)


@jit
def _decode_block_as(frame, start, j, bs, nbytes, to, clear):
    """Block ``j`` as a one-block frame whose flags lose the bits ``clear``, decoded to the address ``to``.

    ``clear = _SHUFFLE``: c-blosc leaves the block's bytes shuffled (its
    streams, :mod:`streamrank.io._unshuffle_kernels`); the codec and the
    split into streams do not depend on that flag.
    """
    n = min(bs, nbytes - j * bs)
    h = start - _ONE_BLOCK
    s0, s1, s2, s3, s4 = _get32(frame, h), _get32(frame, h + 4), _get32(frame, h + 8), _get32(frame, h + 12), \
        _get32(frame, h + 16)
    head = _get32(frame, 0) & ~(clear << 16)    # version, compressor version, flags, type size
    if n < bs:                        # the leftover block: its own block size, never split (as c-blosc decodes it)
        head |= _DONT_SPLIT << 16
    _put32(frame, h, head)
    _put32(frame, h + 4, n)
    _put32(frame, h + 8, n if n < bs else bs)
    _put32(frame, h + 12, frame.shape[0] - h)
    _put32(frame, h + 16, _ONE_BLOCK)
    got = _decompress(frame.ctypes.data + h, to, n, 1)
    _put32(frame, h, s0)
    _put32(frame, h + 4, s1)
    _put32(frame, h + 8, s2)
    _put32(frame, h + 12, s3)
    _put32(frame, h + 16, s4)
    return got == n


@jit
def block_plan(frame, nbytes, itemsize):
    """``(block size, starts, order)`` of a frame of ``nbytes`` decoded bytes; block size -2 if not split here.

    ``starts[j]``: offset of block ``j``'s data; ``order``: blocks by offset
    (:func:`block_order`).  Decode blocks in this order: :func:`decode_blocks_finite`,
    :func:`decode_blocks_in_range`, given ``order[k0:k1]``.
    """
    return _plan(frame, nbytes, itemsize, 2)


@jit
def _plan(frame, nbytes, itemsize, min_blocks):
    """:func:`block_plan` of a frame of at least ``min_blocks`` blocks (:func:`_block_size`)."""
    bs = _block_size(frame, nbytes, itemsize, min_blocks)
    nblocks = (nbytes + bs - 1) // bs if bs > 0 else 0
    starts = np.empty(nblocks, np.int64)
    order = np.empty(nblocks, np.int64)
    if bs > 0 and not block_order(frame, starts, order):
        bs = -2
    return bs, starts, order


@jit
def decode_blocks_finite(frame, a, n_check, bs, starts, order, k0, k1):
    """Decode blocks ``order[k0:k1]`` of ``frame`` into the float array ``a``; the first NaN/±inf among ``a[:n_check]``.

    Returns -1 (all good), the first bad position met or -3 (see the module
    doc).  Two calls may run at once (``nogil``) on the same frame when no
    block of one lies right after a block of the other in ``order``: a
    block's one-block header overwrites the 20 bytes in front of its data
    (the end of the block before it), so a block and the one before it must
    not be decoded at the same time (:mod:`streamrank.io._blosc_blocks`).
    """
    per = bs // a.itemsize
    for k in range(k0, k1):
        j = order[k]
        if not _decode_block(frame, starts[j], j, bs, a.nbytes, a.ctypes.data):
            return -3
        lo = j * per
        hi = min(lo + per, n_check)
        if hi > lo:
            i = first_nonfinite(a[lo:hi])
            if i >= 0:
                return lo + i
    return -1


@jit
def decode_blocks_in_range(frame, u, n_check, n, bs, starts, order, k0, k1):
    """As :func:`decode_blocks_finite` for the unsigned view ``u`` of indices: the first ``u[i] >= n``."""
    per = bs // u.itemsize
    for k in range(k0, k1):
        j = order[k]
        if not _decode_block(frame, starts[j], j, bs, u.nbytes, u.ctypes.data):
            return -3
        lo = j * per
        hi = min(lo + per, n_check)
        if hi > lo:
            i = first_out_of_range(u[lo:hi], n)
            if i >= 0:
                return lo + i
    return -1


def decode_checked_finite(frame, a, n_check):
    """Decode all of ``frame`` into the float array ``a`` on this thread; the first NaN/±inf among ``a[:n_check]``.

    Returns -1 (all good), the first bad position met, -2 or -3 (see the module doc).
    """
    bs, starts, order = block_plan(frame, a.nbytes, a.itemsize)
    if bs < 0:
        return -2
    return decode_blocks_finite(frame, a, n_check, bs, starts, order, 0, order.shape[0])


def decode_checked_in_range(frame, u, n_check, n):
    """As :func:`decode_checked_finite` for the unsigned view ``u`` of indices: the first ``u[i] >= n``."""
    bs, starts, order = block_plan(frame, u.nbytes, u.itemsize)
    if bs < 0:
        return -2
    return decode_blocks_in_range(frame, u, n_check, n, bs, starts, order, 0, order.shape[0])


@jit
def decode_chunk_finite(frame, a, n_check):
    """:func:`decode_checked_finite` in one kernel call, a frame of a single block included.

    What the chunk decoder runs when one thread decodes a chunk (the usual
    case, :mod:`streamrank.io._blosc_blocks`): the plan, the decode and the
    check cost one dispatch instead of a plan returned to Python and a
    second call (issue 16: a fixed cost per chunk, paid by checked reads
    only).  A frame of one block (a short 1-D chunk such as ``y``'s) is
    decoded whole by c-blosc here, with its own header, and checked right
    after, while in cache, instead of being handed back (-2) to a whole-chunk
    decode and a separate check.  Returns what :func:`decode_checked_finite`
    returns.
    """
    bs, starts, order = _plan(frame, a.nbytes, a.itemsize, 1)
    if bs < 0:
        return -2
    return decode_blocks_finite(frame, a, n_check, bs, starts, order, 0, order.shape[0])


@jit
def decode_chunk_in_range(frame, u, n_check, n):
    """As :func:`decode_chunk_finite` for the unsigned view ``u`` of indices: the first ``u[i] >= n``."""
    bs, starts, order = _plan(frame, u.nbytes, u.itemsize, 1)
    if bs < 0:
        return -2
    return decode_blocks_in_range(frame, u, n_check, n, bs, starts, order, 0, order.shape[0])


def decode_chunk_finite_streams(frame, a, n_check, scratch):
    """:func:`decode_chunk_finite` with the check run on each block's shuffled bytes and the unshuffle done here.

    For a frame whose blocks are byte-shuffled with the type size of ``a``
    (4 or 8: float32, float64), each block is decoded by c-blosc with the
    shuffle flag cleared into a scratch block (its streams), checked there
    (:func:`~streamrank.io._unshuffle_kernels.first_nonfinite_f32_streams`:
    the exponent streams, a quarter or an eighth of the bytes, read while in
    cache) and unshuffled into its place in ``a``
    (:mod:`streamrank.io._unshuffle_kernels`): the check reads no byte of the
    output back (issue 16: those reads, from beyond the L2 cache, were most
    of the check's cost).  Returns what :func:`decode_chunk_finite` returns,
    or ``-4`` for a frame that is not this kernel's (not shuffled,
    bit-shuffled, another type size, a block larger than ``scratch``):
    call :func:`decode_chunk_finite` for it (kept out of this kernel, whose
    compile would otherwise include that one's).  The decoded bytes are c-blosc's
    (:mod:`streamrank.io._blosc_blocks` checks that once per process before
    using this kernel).
    """
    if not a.flags.c_contiguous:
        raise ValueError("decode_chunk_finite_streams decodes into a C-contiguous array")
    return decode_streams_finite(frame, a.reshape(-1).view(np.uint8), a.itemsize, n_check, scratch)


@jit
def decode_streams_finite(frame, b, t, n_check, scratch):
    """:func:`decode_chunk_finite_streams` of the float array whose bytes are ``b`` (uint8) and type size ``t``.

    One compile for float32 and float64 (the bytes' type is the same).
    """
    nbytes = b.shape[0]
    if frame.shape[0] < _HEADER or (frame[2] & (_SHUFFLE | _BITSHUFFLE)) != _SHUFFLE or frame[3] != t \
            or (t != 4 and t != 8):
        return -4
    bs, starts, order = _plan(frame, nbytes, t, 1)
    if bs < 0:
        return -2
    if scratch.shape[0] < bs:
        return -4
    per = bs // t
    low_mask = 0x80 if t == 4 else 0xF0      # the exponent's bits in the second stream from the top
    for k in range(order.shape[0]):
        j = order[k]
        if not _decode_block_as(frame, starts[j], j, bs, nbytes, scratch.ctypes.data, _SHUFFLE):
            return -3
        n = min(bs, nbytes - j * bs)
        m = n // t
        lo = j * per
        cnt = min(m, n_check - lo)
        if cnt > 0:                          # the exponent: streams t-2 and t-1 (first_nonfinite_f32_streams)
            i = first_bad_exponent(scratch, (t - 2) * m, (t - 1) * m, cnt, low_mask)
            if i >= 0:
                return lo + i
        if t == 4:
            unshuffle4(scratch, b[j * bs:j * bs + n].view(np.uint32))
        else:
            unshuffle8(scratch, b[j * bs:j * bs + n].view(np.uint64))
    return -1

"""Numba kernels that undo blosc's byte shuffle, and find NaN/±inf in shuffled bytes before they are undone.

Why (issue 16: reading a block must cost at most 5 % more with its checks
than without).  c-blosc decodes a shuffled block in two steps: its codec
writes the block's *streams* into a scratch buffer (for a type of ``t``
bytes, stream ``k`` holds byte ``k`` of every value: ``s[k*m + i]`` is byte
``k`` of value ``i``, ``m`` values), then its unshuffle interleaves them into
the destination (byte ``k`` of value ``i`` goes to ``d[i*t + k]``).  Checking
the values after that read 512 KiB blocks back from beyond the L2 cache (the
scratch, the compressed block and the output do not fit in it together): the
check's own reads were most of its cost (NOTE12, issue 16).

Here the codec's step is left to c-blosc (the shuffle flag cleared, see
:mod:`streamrank.io._blosc_block_kernels`), the check runs on the streams
while they are in cache, and the unshuffle is done by these kernels:

* whether a float is NaN or ±inf depends on its exponent bits only, which
  lie in the two top streams: bits 0-6 of byte 3 and bit 7 of byte 2 for a
  float32 (value ``i`` is bad when ``s3[i] & 0x7F == 0x7F`` and
  ``s2[i] & 0x80``); bits 0-6 of byte 7 and bits 4-7 of byte 6 for a
  float64.  :func:`first_nonfinite_f32_streams` and
  :func:`first_nonfinite_f64_streams` test eight values at a time in a
  64-bit word (SWAR, no carry crosses a byte: ``(b & 0x7F) + 1`` has bit 7
  set exactly when ``b & 0x7F == 0x7F``; ``((b & 0xF0) >> 1) + 0x08`` exactly
  when ``b & 0xF0 == 0xF0``) and OR the verdicts over strides of 4 KiB: a
  quarter (float32) or an eighth (float64) of the block's bytes, read once;
* :func:`unshuffle4` and :func:`unshuffle8` write value ``i`` as the OR of
  its bytes shifted into place, a loop LLVM vectorises (measured as fast as
  c-blosc's own SIMD unshuffle, ``benchmarks/stream_throughput.py``
  section 6).

The result is c-blosc's decode byte for byte (``tests/io/test_unshuffle_kernels.py``
compares them; :mod:`streamrank.io._blosc_blocks` checks it once per process
before using it).  Values are built little endian: a big-endian machine
would need the shifts reversed, so :mod:`streamrank.io._blosc_blocks` uses
these kernels only where ``sys.byteorder == "little"``.
"""
from __future__ import annotations

import numpy as np

from .._numba import jit

__all__ = ["unshuffle4", "unshuffle8", "first_bad_exponent", "first_nonfinite_f32_streams",
           "first_nonfinite_f64_streams"]

_STRIDE = 512                     # 64-bit words a verdict is ORed over (4 KiB of a stream)
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_ONES = np.uint64(0x0101010101010101)
_HIGH = np.uint64(0x8080808080808080)


@jit
def unshuffle4(s, d):
    """``d[i]`` = bytes ``s[i], s[m+i], s[2m+i], s[3m+i]`` (little endian) for the ``m = d.size`` uint32 values.

    ``s``: uint8, at least ``4 m`` bytes (blosc's four streams of a block of ``m`` values of 4 bytes).
    """
    m = d.shape[0]
    s0 = s[:m]
    s1 = s[m:2 * m]
    s2 = s[2 * m:3 * m]
    s3 = s[3 * m:4 * m]
    for i in range(m):
        d[i] = np.uint32(s0[i]) | (np.uint32(s1[i]) << 8) | (np.uint32(s2[i]) << 16) | (np.uint32(s3[i]) << 24)


@jit
def unshuffle8(s, d):
    """``d[i]`` = bytes ``s[k m + i]``, ``k = 0..7`` (little endian) for the ``m = d.size`` uint64 values."""
    m = d.shape[0]
    s0 = s[:m]
    s1 = s[m:2 * m]
    s2 = s[2 * m:3 * m]
    s3 = s[3 * m:4 * m]
    s4 = s[4 * m:5 * m]
    s5 = s[5 * m:6 * m]
    s6 = s[6 * m:7 * m]
    s7 = s[7 * m:8 * m]
    for i in range(m):
        d[i] = (np.uint64(s0[i]) | (np.uint64(s1[i]) << 8) | (np.uint64(s2[i]) << 16) | (np.uint64(s3[i]) << 24)
                | (np.uint64(s4[i]) << 32) | (np.uint64(s5[i]) << 40) | (np.uint64(s6[i]) << 48)
                | (np.uint64(s7[i]) << 56))


@jit
def first_bad_exponent(s, lo, hi, cnt, low_mask):
    """First ``i < cnt`` with ``s[hi + i] & 0x7F == 0x7F`` and ``s[lo + i] & low_mask == low_mask``; -1 if none.

    The high stream alone is scanned eight bytes a word (a value whose top
    seven exponent bits are not all ones is finite: almost every value), in
    strides of 4 KiB; only a stride where some byte has them all set is
    looked at value by value, with its low stream.  Bytes before the first
    8-byte boundary of the high stream and after its last are looked at one
    by one (a block's streams are 8-byte aligned only when its value count
    is a multiple of 8).  A stride is scanned through its own view, indexed
    from 0: indexing the whole array over ``range(a, b)`` compiled to gathers
    (see :mod:`streamrank.io._check_kernels`), 4.6 times slower on an AMD Zen 4.
    """
    head = (8 - (s.ctypes.data + hi) % 8) % 8
    head = head if head < cnt else cnt
    for i in range(head):
        if (s[hi + i] & 0x7F) == 0x7F and (s[lo + i] & low_mask) == low_mask:
            return i
    nw = (cnt - head) // 8
    w = s[hi + head:hi + head + 8 * nw].view(np.uint64)
    for a in range(0, nw, _STRIDE):
        ws = w[a:a + _STRIDE]
        acc = np.uint64(0)
        for k in range(ws.shape[0]):
            acc |= (ws[k] & _LOW7) + _ONES
        if (acc & _HIGH) != 0:
            for i in range(head + 8 * a, head + 8 * (a + ws.shape[0])):
                if (s[hi + i] & 0x7F) == 0x7F and (s[lo + i] & low_mask) == low_mask:
                    return i
    for i in range(head + 8 * nw, cnt):
        if (s[hi + i] & 0x7F) == 0x7F and (s[lo + i] & low_mask) == low_mask:
            return i
    return -1


@jit
def first_nonfinite_f32_streams(s, m, cnt):
    """First ``i < cnt`` whose float32 (four streams of ``m`` bytes in ``s``) is NaN or ±inf; -1 if none.

    Exponent all ones: bits 0-6 of byte 3 (``s[3m + i]``) and bit 7 of byte 2 (``s[2m + i]``).
    """
    return first_bad_exponent(s, 2 * m, 3 * m, cnt, 0x80)


@jit
def first_nonfinite_f64_streams(s, m, cnt):
    """First ``i < cnt`` whose float64 (eight streams of ``m`` bytes in ``s``) is NaN or ±inf; -1 if none.

    Exponent all ones: bits 0-6 of byte 7 (``s[7m + i]``) and bits 4-7 of byte 6 (``s[6m + i]``).
    """
    return first_bad_exponent(s, 6 * m, 7 * m, cnt, 0xF0)

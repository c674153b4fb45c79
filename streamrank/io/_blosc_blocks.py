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
"""
from __future__ import annotations

import threading

import numpy as np

__all__ = ["available", "decode_checked"]

_state: dict = {}
_lock = threading.Lock()


def _find_decompress_ctx() -> int | None:
    """Address of ``blosc_decompress_ctx`` in numcodecs' c-blosc, or None."""
    import ctypes

    try:
        from numcodecs import blosc
        lib = ctypes.CDLL(blosc.__file__)
        return ctypes.cast(lib.blosc_decompress_ctx, ctypes.c_void_p).value
    except (ImportError, OSError, AttributeError):
        return None


def _self_test(kernels) -> bool:
    """The block-wise decode of a chunk of several shuffled blocks and a short last one equals numcodecs' decode."""
    from numcodecs import blosc

    x = np.arange(300_001, dtype=np.float32) * np.float32(0.25)
    x[::7] = -x[::7]
    frame = np.frombuffer(blosc.compress(x, b"lz4", 5, blosc.SHUFFLE, blocksize=1 << 14), np.uint8).copy()
    before = frame.copy()
    out = np.empty_like(x)
    ok = kernels.decode_checked_finite(frame, out, out.size) == -1
    idx = np.arange(300_001, dtype=np.int32)
    frame2 = np.frombuffer(blosc.compress(idx, b"lz4", 5, blosc.SHUFFLE, blocksize=1 << 14), np.uint8).copy()
    out2 = np.empty_like(idx)
    ok = ok and kernels.decode_checked_in_range(frame2, out2.view(np.uint32), out2.size, 300_000) == 300_000
    return bool(ok and np.array_equal(out, x) and np.array_equal(out2, idx) and np.array_equal(frame, before))


def _kernels():
    """The kernel module once its c-blosc symbol is registered and the self-test passed; None otherwise."""
    with _lock:
        if "kernels" not in _state:
            _state["kernels"] = None
            addr = _find_decompress_ctx()
            if addr:
                import llvmlite.binding as ll

                from . import _blosc_block_kernels as kernels

                ll.add_symbol(kernels.DECOMPRESS_SYMBOL, addr)
                try:
                    good = _self_test(kernels)
                except Exception:     # a blosc the kernels do not understand: decode whole chunks instead
                    good = False
                _state["kernels"] = kernels if good else None
        return _state["kernels"]


def available() -> bool:
    """Whether chunks can be decoded block by block with the check fused in (this process's c-blosc)."""
    return _kernels() is not None


def decode_checked(frame: np.ndarray, out: np.ndarray, kind: str, limit: int, n_check: int) -> bool | None:
    """Decode the blosc ``frame`` (a writable uint8 copy of a chunk) into ``out`` and check ``out[:n_check]``.

    ``kind``: ``"finite"`` (no NaN/±inf; float ``out``) or ``"range"``
    (signed integer ``out`` within ``[0, limit)``), flat positions.  Returns
    True when every block was decoded and every checked value is good; None
    when the caller must decode the chunk whole and run its plain check
    (no block-wise decode here, a frame this does not split, a block c-blosc
    refused, or a bad value: the plain path names it exactly as before).
    """
    kernels = _kernels()
    if kernels is None or not frame.flags.writeable or not out.flags.c_contiguous:
        return None
    flat = out.reshape(-1)
    if kind == "finite" and flat.dtype.kind == "f":
        r = kernels.decode_checked_finite(frame, flat, int(n_check))
    elif kind == "range" and flat.dtype.kind == "i":
        r = kernels.decode_checked_in_range(frame, flat.view(f"u{flat.dtype.itemsize}"), int(n_check),
                                            int(limit))
    else:
        return None
    return True if r == -1 else None

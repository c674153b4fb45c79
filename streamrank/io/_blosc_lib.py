"""c-blosc called through ctypes: numcodecs' own library, without importing numcodecs (issue 22).

Why: ``import numcodecs`` costs 65-80 CPU-ms on this machine (its codec
registry reads every installed distribution's entry points with
``importlib.metadata``, and it imports msgpack, multiprocessing and a dozen
codecs), against ~10 ms to write or read the chunks of a 6 MB ingest.  A
local store is written and read without zarr (:mod:`streamrank.io._local_zarr`),
so blosc was the one reason left to import it there.

What: the c-blosc 1.x library numcodecs bundles in its ``blosc`` extension
module, found beside numcodecs' package (``importlib.util.find_spec``, which
does not run the package) and loaded with ``ctypes`` (``dlopen``: the
module's Python initialisation does not run).  The two calls numcodecs makes
when blosc's threads are off -- the setting zarr gives it on import, which is
how every chunk of a streamrank store has been written and read -- are made
with the same arguments:

* :func:`compress`: ``blosc_compress_ctx(clevel, shuffle, typesize, nbytes,
  src, dest, nbytes + 16, cname, blocksize, 1)``, so the frame is byte for
  byte numcodecs' (``tests/io/test_local_zarr.py`` compares them);
* :func:`decompress`: ``blosc_decompress_ctx(src, dest, nbytes, 1)`` after
  ``blosc_cbuffer_validate`` has checked the frame's header against its
  length (a chunk file is untrusted) and the destination's size.

In a process that has imported numcodecs already (zarr, a model), decoding
goes through ``numcodecs.blosc.decompress`` as before, so its ``use_threads``
setting still applies; and where the library cannot be found or loaded (a
numcodecs built against a shared ``libblosc``, another platform) both calls
fall back to numcodecs itself.
"""
from __future__ import annotations

import ctypes
import sys
import threading

from ._numcodecs_lib import load_once

__all__ = ["compress", "decompress", "library"]

MAX_OVERHEAD = 16              # BLOSC_MAX_OVERHEAD of c-blosc 1.x: a frame's header
_state: dict = {}
_lock = threading.Lock()
_size_t, _vp = ctypes.c_size_t, ctypes.c_void_p
_PROTOTYPES = {
    "blosc_compress_ctx": ([ctypes.c_int, ctypes.c_int, _size_t, _size_t, _vp, _vp, _size_t, ctypes.c_char_p,
                            _size_t, ctypes.c_int], ctypes.c_int),
    "blosc_decompress_ctx": ([_vp, _vp, _size_t, ctypes.c_int], ctypes.c_int),
    "blosc_cbuffer_validate": ([_vp, _size_t, ctypes.POINTER(_size_t)], ctypes.c_int),
}


def library():
    """numcodecs' c-blosc as a ``ctypes.CDLL`` with the prototypes used here, or None if it cannot be loaded."""
    return load_once("blosc", _PROTOTYPES, _state)


def _address(a) -> int:
    return a.__array_interface__["data"][0]


def compress(raw, cname: bytes, clevel: int, shuffle: int, blocksize: int, typesize: int) -> bytes:
    """The blosc frame of the C-contiguous numpy array ``raw`` (numcodecs' ``compress`` without threads)."""
    lib = library()
    if lib is None:
        from numcodecs import blosc

        with _lock:
            threads, blosc.use_threads = blosc.use_threads, False
            try:
                return blosc.compress(raw, cname, clevel, shuffle, blocksize, typesize)
            finally:
                blosc.use_threads = threads
    if not raw.flags.c_contiguous:
        raise ValueError("blosc compresses a C-contiguous buffer")
    nbytes = int(raw.nbytes)
    dest = ctypes.create_string_buffer(nbytes + MAX_OVERHEAD)
    got = lib.blosc_compress_ctx(int(clevel), int(shuffle), int(typesize), nbytes, _address(raw), dest,
                                 nbytes + MAX_OVERHEAD, bytes(cname), int(blocksize), 1)
    if got <= 0:
        raise RuntimeError(f"error during blosc compression: {got}")
    return dest.raw[:got]


def decompress(src, out) -> None:
    """Decode the blosc frame ``src`` (a numpy uint8 array) into the C-contiguous numpy array ``out``.

    ValueError for a frame whose header does not fit its length or whose size is not ``out``'s;
    RuntimeError when c-blosc fails (numcodecs' errors).
    """
    if "numcodecs.blosc" in sys.modules or library() is None:
        from numcodecs import blosc

        blosc.decompress(src, out)
        return
    if not (src.flags.c_contiguous and out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("blosc decodes a C-contiguous buffer into a writable C-contiguous one")
    nbytes = ctypes.c_size_t(0)
    lib = library()
    if int(src.nbytes) < MAX_OVERHEAD or lib.blosc_cbuffer_validate(_address(src), int(src.nbytes),
                                                                    ctypes.byref(nbytes)) != 0:
        raise ValueError("not a blosc frame (its header does not fit its length)")
    if nbytes.value != out.nbytes:
        raise ValueError(f"destination buffer has wrong size; expected {nbytes.value}, got {out.nbytes}")
    got = lib.blosc_decompress_ctx(_address(src), _address(out), int(out.nbytes), 1)
    if got <= 0:
        raise RuntimeError(f"error during blosc decompression: {got}")

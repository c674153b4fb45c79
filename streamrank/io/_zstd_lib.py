"""zstd called through ctypes: numcodecs' own library, without importing numcodecs or zarr (issue 22).

Why: a saved model's arrays are zstd-compressed (zarr's ``ZstdCodec``, which
is ``numcodecs.zstd``).  Importing zarr and numcodecs to read or write the
few chunks of a model cost 0.29-0.33 CPU-s of a warm ``streamrank fit`` or
``evaluate`` (about a third of each), so local models are read and written
without them (:mod:`streamrank._model_files`), and zstd is the one codec left.

What: the libzstd numcodecs bundles in its ``zstd`` extension module, found
beside numcodecs' package (``importlib.util.find_spec``, which does not run
the package) and loaded with ``ctypes`` (its Python initialisation does not
run), as :mod:`streamrank.io._blosc_lib` does for c-blosc.  The calls are
numcodecs' own (``numcodecs/zstd.pyx``, 0.13 and later):

* :func:`compress`: ``ZSTD_createCCtx``, ``ZSTD_c_compressionLevel`` and
  ``ZSTD_c_checksumFlag`` set, ``ZSTD_compress2`` into
  ``ZSTD_compressBound(n)`` bytes -- one frame whose header holds the content
  size, byte for byte numcodecs' (``tests/io/test_zstd_lib.py`` compares them);
* :func:`content_size`: the decoded size the frames of a chunk file declare
  (the sum over concatenated frames, as numcodecs computes it), read from
  their headers *before* anything is allocated: the caller compares it with
  the size the array's metadata gives the chunk (a chunk file is untrusted);
* :func:`decompress_into`: ``ZSTD_decompress`` into a buffer of exactly that
  size; anything else decoded is an error.

Where the library cannot be found or loaded (a numcodecs linked against a
shared libzstd, another platform), numcodecs' own ``compress`` /
``decompress`` do the same work.
"""
from __future__ import annotations

import ctypes

from ._numcodecs_lib import load_once

__all__ = ["compress", "content_size", "decompress_into", "library", "UNKNOWN"]

#: ``content_size`` of frames that do not declare their size (written by a streaming compressor)
UNKNOWN = -1
_CONTENTSIZE_UNKNOWN = (1 << 64) - 1          # ZSTD_CONTENTSIZE_UNKNOWN
_CONTENTSIZE_ERROR = (1 << 64) - 2            # ZSTD_CONTENTSIZE_ERROR
_C_COMPRESSION_LEVEL, _C_CHECKSUM_FLAG = 100, 201
_state: dict = {}
_size_t, _vp, _ull = ctypes.c_size_t, ctypes.c_void_p, ctypes.c_ulonglong
_PROTOTYPES = {"ZSTD_createCCtx": ([], _vp), "ZSTD_freeCCtx": ([_vp], _size_t),
               "ZSTD_CCtx_setParameter": ([_vp, ctypes.c_int, ctypes.c_int], _size_t),
               "ZSTD_compress2": ([_vp, _vp, _size_t, _vp, _size_t], _size_t),
               "ZSTD_compressBound": ([_size_t], _size_t), "ZSTD_maxCLevel": ([], ctypes.c_int),
               "ZSTD_decompress": ([_vp, _size_t, _vp, _size_t], _size_t),
               "ZSTD_findFrameCompressedSize": ([_vp, _size_t], _size_t),
               "ZSTD_getFrameContentSize": ([_vp, _size_t], _ull),
               "ZSTD_isError": ([_size_t], ctypes.c_uint), "ZSTD_getErrorName": ([_size_t], ctypes.c_char_p)}


def library():
    """numcodecs' libzstd as a ``ctypes.CDLL`` with the prototypes used here, or None if it cannot be loaded."""
    return load_once("zstd", _PROTOTYPES, _state)


def _error(lib, code) -> str | None:
    return lib.ZSTD_getErrorName(code).decode("ascii", "replace") if lib.ZSTD_isError(code) else None


def compress(raw: bytes, level: int = 0, checksum: bool = False) -> bytes:
    """The zstd frame of the bytes ``raw``: ``numcodecs.zstd.compress(raw, level, checksum)``, byte for byte."""
    lib = library()
    if lib is None:
        from numcodecs import zstd

        return zstd.compress(raw, level, checksum)
    raw = bytes(raw)
    level = min(int(level), lib.ZSTD_maxCLevel())
    cctx = lib.ZSTD_createCCtx()
    if not cctx:
        raise MemoryError("ZSTD_createCCtx failed")
    try:
        for param, value in ((_C_COMPRESSION_LEVEL, level), (_C_CHECKSUM_FLAG, 1 if checksum else 0)):
            err = _error(lib, lib.ZSTD_CCtx_setParameter(cctx, param, value))
            if err:
                raise RuntimeError(f"Could not set zstd parameter {param}: {err}")
        cap = lib.ZSTD_compressBound(len(raw))
        dest = ctypes.create_string_buffer(cap)
        got = lib.ZSTD_compress2(cctx, dest, cap, raw, len(raw))
    finally:
        lib.ZSTD_freeCCtx(cctx)
    err = _error(lib, got)
    if err:
        raise RuntimeError(f"Zstd compression error: {err}")
    return dest.raw[:got]


def content_size(src: bytes) -> int:
    """The decoded size the zstd frames in ``src`` declare (their sum), or :data:`UNKNOWN`; nothing is decoded.

    RuntimeError ("invalid input data", numcodecs' words) when ``src`` is not a sequence of whole zstd frames.
    """
    lib = library()
    if lib is None:
        return UNKNOWN                      # numcodecs' decompress checks the size against the buffer it is given
    total, offset, n = 0, 0, len(src)
    base = ctypes.c_char_p(src)
    addr = ctypes.cast(base, ctypes.c_void_p).value or 0
    if n == 0:
        raise RuntimeError("Zstd decompression error: invalid input data")
    while offset < n:
        frame = lib.ZSTD_findFrameCompressedSize(addr + offset, n - offset)
        if _error(lib, frame):
            raise RuntimeError("Zstd decompression error: invalid input data")
        size = lib.ZSTD_getFrameContentSize(addr + offset, frame)
        if size == _CONTENTSIZE_ERROR:
            raise RuntimeError("Zstd decompression error: invalid input data")
        if size == _CONTENTSIZE_UNKNOWN:
            return UNKNOWN
        total += size
        offset += frame
    return total


def decompress_into(src: bytes, out) -> None:
    """Decode the zstd frames ``src`` into the writable C-contiguous numpy array ``out``, which they must fill.

    Call :func:`content_size` first and allocate ``out`` only when the size is
    the one expected.  RuntimeError when zstd fails or decodes another size.
    """
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("zstd decodes into a writable C-contiguous buffer")
    lib = library()
    if lib is None:
        from numcodecs import zstd

        got = zstd.decompress(src)          # as zarr calls it: numcodecs allocates what the frames declare
        if len(got) != out.nbytes:
            raise RuntimeError(f"Zstd decompression error: expected to decompress {out.nbytes}, got {len(got)}")
        out.reshape(-1).view("u1")[:] = memoryview(got).cast("B")
        return
    got = lib.ZSTD_decompress(out.__array_interface__["data"][0], out.nbytes, src, len(src))
    err = _error(lib, got)
    if err:
        raise RuntimeError(f"Zstd decompression error: {err}")
    if got != out.nbytes:
        raise RuntimeError(f"Zstd decompression error: expected to decompress {out.nbytes}, got {got}")

"""io/_zstd_lib: numcodecs' libzstd through ctypes gives numcodecs' frames and values, and refuses bad frames."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from numcodecs import zstd as nz

from streamrank.io import _zstd_lib

ROOT = Path(__file__).resolve().parents[2]


def _inputs():
    rng = np.random.default_rng(5)
    yield b""
    yield b"\x00"
    yield rng.integers(0, 255, 1000, dtype=np.uint8).tobytes()
    x = rng.normal(size=(3000, 7))
    x[x < 0.3] = 0
    yield x.tobytes()
    yield np.arange(600_000, dtype=np.int64).tobytes()           # several zstd blocks
    yield rng.random(150_001).tobytes()                          # incompressible


def test_library_is_found():
    assert _zstd_lib.library() is not None


@pytest.mark.parametrize("level,checksum", [(0, False), (0, True), (1, False), (-5, False), (9, True), (99, False)])
def test_frames_and_values_are_numcodecs(level, checksum):
    for raw in _inputs():
        if level > 3 and len(raw) > 100_000:      # the slow levels on the small inputs only (the suite's clock)
            continue
        mine = _zstd_lib.compress(raw, level, checksum)
        assert mine == nz.compress(raw, level, checksum)
        if not raw:
            continue
        assert _zstd_lib.content_size(mine) == len(raw)
        out = np.empty(len(raw), np.uint8)
        _zstd_lib.decompress_into(mine, out)
        assert out.tobytes() == raw


def test_concatenated_frames_and_a_frame_without_its_size():
    a, b = np.arange(100.0).tobytes(), np.ones(50).tobytes()
    two = _zstd_lib.compress(a) + _zstd_lib.compress(b)
    assert _zstd_lib.content_size(two) == len(a) + len(b)        # as numcodecs sums them
    out = np.empty(150)
    _zstd_lib.decompress_into(two, out)
    assert out.tobytes() == a + b
    # a frame of a streaming compressor: no content size in its header (FHD 0x00, window descriptor, raw block)
    stream = b"\x28\xb5\x2f\xfd\x00\x48" + bytes([(len(a) << 3 | 1) & 0xFF, (len(a) << 3) >> 8 & 0xFF, 0]) + a
    assert _zstd_lib.content_size(stream) == _zstd_lib.UNKNOWN
    out = np.empty(100)
    _zstd_lib.decompress_into(stream, out)
    assert out.tobytes() == a
    with pytest.raises(RuntimeError, match="Zstd decompression error"):
        _zstd_lib.decompress_into(stream, np.empty(99))          # it does not fit: an error, no write past


def test_bad_frames_are_errors_not_reads_past_the_buffer():
    raw = np.arange(50_000, dtype=np.int64).tobytes()
    frame = _zstd_lib.compress(raw)
    for bad in (b"", frame[:3], frame[:-10], b"\x00" * 20, b"garbage" + frame):
        with pytest.raises(RuntimeError, match="invalid input data"):
            _zstd_lib.content_size(bad)
    with pytest.raises(RuntimeError, match="expected to decompress"):
        _zstd_lib.decompress_into(frame, np.empty(len(raw) + 8, np.uint8))   # shorter than the buffer
    with pytest.raises(RuntimeError, match="Zstd decompression error"):
        _zstd_lib.decompress_into(frame, np.empty(len(raw) - 8, np.uint8))   # longer: stops at the buffer's end
    garbled = bytearray(frame)
    garbled[20:60] = b"\xa5" * 40
    with pytest.raises(RuntimeError):
        _zstd_lib.decompress_into(bytes(garbled), np.empty(len(raw), np.uint8))
    with pytest.raises(ValueError, match="writable C-contiguous"):
        _zstd_lib.decompress_into(frame, np.empty(2 * len(raw), np.uint8)[::2])


def test_without_the_library_numcodecs_does_the_same(monkeypatch):
    raw = np.arange(10_000, dtype=np.float32).tobytes()
    want = _zstd_lib.compress(raw)
    monkeypatch.setitem(_zstd_lib._state, "lib", None)
    assert _zstd_lib.compress(raw) == want
    assert _zstd_lib.content_size(want) == _zstd_lib.UNKNOWN     # numcodecs checks the size itself
    out = np.empty(10_000, np.float32)
    _zstd_lib.decompress_into(want, out)
    assert out.tobytes() == raw
    with pytest.raises(RuntimeError, match="expected to decompress"):
        _zstd_lib.decompress_into(want, np.empty(10_001, np.float32))


def test_a_fresh_interpreter_compresses_without_importing_numcodecs():
    code = textwrap.dedent("""
        import sys
        from streamrank.io import _zstd_lib
        import numpy as np
        f = _zstd_lib.compress(np.arange(1000.0).tobytes())
        out = np.empty(1000)
        _zstd_lib.decompress_into(f, out)
        assert out[999] == 999.0
        print(f.hex(), "numcodecs" in sys.modules)
    """)
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert got.returncode == 0, got.stderr
    frame, imported = got.stdout.split()
    assert imported == "False" and bytes.fromhex(frame) == nz.compress(np.arange(1000.0).tobytes())

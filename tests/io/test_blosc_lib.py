"""io/_blosc_lib: numcodecs' c-blosc through ctypes gives numcodecs' frames and values, and refuses bad frames."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from numcodecs import blosc as nc

from streamrank.io import _blosc_lib

ROOT = Path(__file__).resolve().parents[2]


def _numcodecs_compress(raw, *args):
    old, nc.use_threads = nc.use_threads, False          # how zarr has numcodecs write every chunk
    try:
        return nc.compress(raw, *args)
    finally:
        nc.use_threads = old


def _inputs():
    rng = np.random.default_rng(5)
    yield np.zeros(1, np.uint8), 1
    yield rng.integers(0, 255, 1000, dtype=np.uint8), 1
    x = rng.normal(size=(3000, 7)).astype(np.float32)
    x[x < 0.3] = 0
    yield x.reshape(-1).view(np.uint8), 4
    yield np.arange(600_000, dtype=np.int64).view(np.uint8), 8     # several blosc blocks
    yield rng.random(150_001).view(np.uint8), 8                    # incompressible, a short last block


def test_library_is_found():
    assert _blosc_lib.library() is not None


@pytest.mark.parametrize("shuffle", [0, 1, 2])
def test_frames_and_values_are_numcodecs(shuffle):
    for raw, typesize in _inputs():
        mine = _blosc_lib.compress(raw, b"lz4", 5, shuffle, 0, typesize)
        assert mine == _numcodecs_compress(raw, b"lz4", 5, shuffle, 0, typesize)
        frame = np.frombuffer(mine, np.uint8)
        out = np.empty_like(raw)
        _blosc_lib.decompress(frame, out)
        np.testing.assert_array_equal(out, raw)


def test_bad_frames_are_errors_not_reads_past_the_buffer(monkeypatch):
    raw = np.arange(50_000, dtype=np.int64).view(np.uint8)
    frame = np.frombuffer(_blosc_lib.compress(raw, b"lz4", 5, 1, 0, 8), np.uint8)
    out = np.empty_like(raw)
    monkeypatch.delitem(sys.modules, "numcodecs.blosc")   # the ctypes path (numcodecs is imported by this test)
    with pytest.raises(ValueError, match="header"):
        _blosc_lib.decompress(frame[:-10], out)          # truncated: shorter than its header says
    with pytest.raises(ValueError, match="header"):
        _blosc_lib.decompress(frame[:8], out)
    with pytest.raises(ValueError, match="wrong size"):
        _blosc_lib.decompress(frame, np.empty(raw.size - 8, np.uint8))
    bad = frame.copy()
    bad[16:] ^= 0x5A                                      # a valid header over garbage
    with pytest.raises((RuntimeError, ValueError)):
        _blosc_lib.decompress(bad, out)
    _blosc_lib.decompress(frame, out)
    np.testing.assert_array_equal(out, raw)


def test_without_the_library_numcodecs_does_the_same(monkeypatch):
    raw = np.arange(10_000, dtype=np.float32).view(np.uint8)
    want = _blosc_lib.compress(raw, b"lz4", 5, 1, 0, 4)
    monkeypatch.setitem(_blosc_lib._state, "lib", None)
    assert _blosc_lib.compress(raw, b"lz4", 5, 1, 0, 4) == want
    out = np.empty_like(raw)
    _blosc_lib.decompress(np.frombuffer(want, np.uint8), out)
    np.testing.assert_array_equal(out, raw)
    assert nc.use_threads is None or nc.use_threads in (True, False)    # restored, whatever it was


def test_local_ingest_and_read_import_no_numcodecs(tmp_path):
    lines = [f"{i % 3} qid:{i // 4} 1:{i * 0.5} 2:{1 - i * 0.25}" for i in range(30)]
    (tmp_path / "a.txt").write_text("\n".join(lines) + "\n")
    code = textwrap.dedent("""
        import sys
        from streamrank.cli._app import main
        assert main(["ingest", "a.txt", "--store", "s.zarr", "-q"]) == 0
        assert main(["ingest", "a.txt", "--store", "s.zarr", "-q", "--batch-id", "again"]) == 0
        import streamrank as sr
        s = sr.GroupStore.open("s.zarr")
        assert sum(b.n_rows for b in s.blocks(max_rows=7, shuffle=False)) == 60 and s.verify() == 2
        print("numcodecs" in sys.modules, "zarr" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ["False", "False"]

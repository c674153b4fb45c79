"""The block-wise decode's self-test passes wherever numcodecs' c-blosc exports ``blosc_decompress_ctx``.

The kernels' tests skip when :func:`streamrank.io._blosc_blocks.available`
is False, and a failed self-test only sends every chunk back to the
whole-chunk decode (slower, never different).  So a kernel change that broke
the self-test would pass unseen: this test fails instead (issue 16).
"""
from __future__ import annotations

import pytest

from streamrank.io import _blosc_blocks as B


def test_self_test_passes_where_c_blosc_allows_the_block_wise_decode():
    if B._find_decompress_ctx() is None:
        pytest.skip("this numcodecs' c-blosc exports no blosc_decompress_ctx")
    import llvmlite.binding as ll

    from streamrank.io import _blosc_block_kernels as kernels

    ll.add_symbol(kernels.DECOMPRESS_SYMBOL, B._find_decompress_ctx())
    assert B._self_test(kernels) is True
    assert B.available()


def test_checked_read_of_a_local_store_imports_no_numcodecs_and_decodes_on_one_thread(tmp_path):
    """Fresh interpreter: a local store's chunks are decoded without numcodecs (streamrank.io._blosc_lib), so
    the fused check finds c-blosc there too and counts one thread, as the unchecked decode uses.  Before,
    _blosc_blocks imported numcodecs (its default: blosc threads from the main thread) and the checked read
    took the threaded path while unchecked chunks were decoded on one thread."""
    import os
    import subprocess
    import sys

    import numpy as np

    import streamrank as sr

    if B._find_decompress_ctx() is None:
        pytest.skip("this numcodecs' c-blosc exports no blosc_decompress_ctx")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60_000, 20)).astype(np.float32)
    y = rng.integers(0, 4, 60_000).astype(np.float64)
    sr.GroupStore.create(tmp_path / "s", n_features=20).append(X, y, np.repeat(np.arange(600), 100))
    np.save(tmp_path / "X.npy", X)
    code = f"""
import sys, numpy as np
import streamrank as sr
from streamrank.io import _blosc_blocks as B
calls = []
real = B.decode_checked
B.decode_checked = lambda *a: calls.append(real(*a)) or calls[-1]
got = np.concatenate([b.X for b in sr.GroupStore.open({str(tmp_path / 's')!r}).blocks(25_000, prefetch=False)])
assert np.array_equal(got, np.load({str(tmp_path / 'X.npy')!r}))
assert calls and all(c is True for c in calls), calls
assert B.available() and B._numcodecs_threads() == 1
assert "numcodecs" not in sys.modules and "zarr" not in sys.modules, sorted(m for m in sys.modules if "codecs" in m)
print("ok", len(calls))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ),
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith("ok")

@pytest.mark.parametrize("failure", ["False", "raises"])
def test_a_failed_self_test_is_logged_for_the_debug_log(failure, monkeypatch, caplog):
    """A process whose self-test fails reads correctly but slower; its debug log says why (the cause, if raised)."""
    if B._find_decompress_ctx() is None:
        pytest.skip("this numcodecs' c-blosc exports no blosc_decompress_ctx")

    def self_test(kernels):
        if failure == "raises":
            raise RuntimeError("decoded other bytes")
        return False

    monkeypatch.setattr(B, "_state", {})
    monkeypatch.setattr(B, "_self_test", self_test)
    with caplog.at_level("DEBUG", logger=B.__name__):
        assert not B.available()
    assert "block-wise decode unavailable in this process" in caplog.text
    assert ("decoded other bytes" in caplog.text) == (failure == "raises")

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

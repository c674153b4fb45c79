"""Stores on az:// through the same Icechunk engine, against Azurite on loopback (tests/_azurite.py).

Skipped where Azurite is not installed (an npm package: ``npm install azurite``,
``azurite-blob`` on PATH or in ``STREAMRANK_AZURITE``).  gs:// is configured
(tests/io/test_remote.py) but not exercised: fake-gcs-server (1.x, the PyPI
wrapper's binary) answers Icechunk's XML-API object PUTs with 400 "invalid
uploadType", and no other emulator takes Icechunk's GCS client.
"""
from __future__ import annotations

import numpy as np
import pytest

import streamrank as sr
from streamrank.io._icechunk_repo import CommitConflict

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def azurite():
    from _azurite import Azurite, azurite_binary

    binary = azurite_binary()
    if binary is None:
        pytest.skip("Azurite is not installed (npm install azurite; azurite-blob on PATH or STREAMRANK_AZURITE)")
    server = Azurite(binary)
    yield server
    server.stop()


def test_a_group_store_on_az_appends_commits_and_refuses_an_overlapping_writer(azurite):
    so = azurite.storage_options
    url = azurite.new_container() + "/train.zarr"
    rng = np.random.default_rng(0)
    X, y, q = rng.normal(size=(300, 4)).astype(np.float32), rng.random(300), np.repeat(np.arange(30), 10)
    s = sr.GroupStore.create(url, 4, storage_options=so, chunk_rows=64)
    assert s.append(X[:150], y[:150], q[:150], batch_id="a")
    assert not s.append(X[:150], y[:150], q[:150], batch_id="a")
    a = sr.GroupStore.open(url, "a", storage_options=so)
    b = sr.GroupStore.open(url, "a", storage_options=so)
    real = a._write

    def b_commits_meanwhile(*args, **kw):
        assert b.append(X[150:], y[150:], q[150:] + 100, batch_id="b")
        return real(*args, **kw)

    a._write = b_commits_meanwhile
    with pytest.raises(CommitConflict, match="append batch 'b'"):
        a.append(X[150:], y[150:], q[150:] + 200, batch_id="c")
    r = sr.GroupStore.open(url, storage_options=so)
    assert [e["batch_id"] for e in r.batches] == ["a", "b"] and r.verify() == 2
    assert np.array_equal(np.vstack([blk.X for blk in r.blocks(shuffle=False)]), X)

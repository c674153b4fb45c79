"""Crash safety of GroupStore.append: a real writer process killed with SIGKILL.

The child appends deterministic batches ``b0, b1, ...`` in a loop; the parent
kills it after a random delay.  Afterwards the store must open, hold exactly a
prefix of the batches (checked against regenerated data and against the
logged checksums), be repaired by the next append, and re-running the same
batch ids must skip the committed ones.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import streamrank as sr
from streamrank.io.blocks import vstack_X

CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    import numpy as np, streamrank as sr
    from tests_io_crash_data import batch
    path, sparse, first, last = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4])
    store = sr.GroupStore.open(path, mode="a")
    print("ready", flush=True)
    for i in range(first, last):
        store.append(*batch(i, sparse), batch_id=f"b{{i}}")
    print("done", flush=True)
    """
)

DATA = textwrap.dedent(
    """
    import numpy as np, scipy.sparse as sp

    def batch(i, sparse):
        rng = np.random.default_rng(1000 + i)
        n_groups = 40
        sizes = rng.integers(30, 90, n_groups)
        qid = np.repeat(np.arange(i * n_groups, (i + 1) * n_groups), sizes)
        m = len(qid)
        if sparse:
            X = sp.random(m, 64, density=0.2, format="csr", random_state=rng)
        else:
            X = rng.normal(size=(m, 24)).astype(np.float32)
        y = rng.integers(0, 5, m).astype(float)
        return X, y, qid
    """
)


def _load_data_module(tmp_path):
    (tmp_path / "tests_io_crash_data.py").write_text(DATA)
    sys.path.insert(0, str(tmp_path))
    try:
        import importlib

        import tests_io_crash_data

        return importlib.reload(tests_io_crash_data)
    finally:
        sys.path.remove(str(tmp_path))


def _run_child(fork_server, tmp_path, path, sparse, first, last, kill_after=None):
    """The writer as a real process (forked from the pre-imported fork server, tests/_forked.py)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(root=root))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    proc = fork_server.popen([str(script), str(path), "1" if sparse else "0", str(first), str(last)],
                             stdout=subprocess.PIPE, env=env)
    assert proc.stdout.readline().strip() == "ready"
    if kill_after is None:
        out = proc.communicate(timeout=120)[0]
        assert proc.returncode == 0 and "done" in out
        return False
    time.sleep(kill_after)
    finished = proc.poll() is not None
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    return not finished


def _expected(data, n_batches, sparse):
    parts = [data.batch(i, sparse) for i in range(n_batches)]
    X = vstack_X([p[0] for p in parts]) if parts else None
    return X, np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts])


def _check_prefix(path, data, sparse):
    store = sr.GroupStore.open(path)
    k = len(store.batches)
    assert [e["batch_id"] for e in store.batches] == [f"b{i}" for i in range(k)]
    assert store.verify() == k
    if k:
        Xe, ye, qe = _expected(data, k, sparse)
        blocks = list(store.blocks(max_rows=5000))
        X = vstack_X([b.X for b in blocks])
        if sparse:
            X, Xe = X.toarray(), Xe.toarray()
        np.testing.assert_array_equal(X, np.asarray(Xe, dtype=np.float32))
        np.testing.assert_array_equal(np.concatenate([b.y for b in blocks]), ye)
        np.testing.assert_array_equal(np.concatenate([b.row_qid() for b in blocks]), qe)
    return k


def _torn(path, k_rows):
    import zarr

    lens = [zarr.open_array(os.path.join(path, "y"), mode="r").shape[0]]
    partial = any(f.endswith(".partial") for _r, _d, fs in os.walk(path) for f in fs)
    return lens[0] > k_rows or partial


@pytest.mark.slow
@pytest.mark.parametrize("sparse", [False, True])
def test_sigkill_mid_append(tmp_path, sparse, fork_server):
    data = _load_data_module(tmp_path)
    path = str(tmp_path / "store.zarr")
    n_features = 64 if sparse else 24
    sr.GroupStore.create(path, n_features, sparse=sparse, chunk_rows=2048)
    rng = np.random.default_rng(7)
    killed_mid = 0
    delays = rng.uniform(0.05, 0.4, size=1 if sparse else 3)  # several kills; fewer for CSR
    for delay in delays:
        _run_child(fork_server, tmp_path, path, sparse, 0, 10_000, kill_after=float(delay))
        k = _check_prefix(path, data, sparse)
        killed_mid += _torn(path, sr.GroupStore.open(path).n_rows)
        # the next append repairs the torn tail, re-running committed ids is a no-op
        store = sr.GroupStore.open(path, mode="a")
        assert [store.append(*data.batch(i, sparse), batch_id=f"b{i}") for i in range(k + 2)] == \
            [False] * k + [True, True]
        assert not any(f.endswith(".partial") for _r, _d, fs in os.walk(path) for f in fs)
        assert _check_prefix(path, data, sparse) == k + 2
    if sparse:
        return
    # a clean, complete re-run of an overlapping range in a separate process is idempotent
    k = sr.GroupStore.open(path).n_groups // 40
    _run_child(fork_server, tmp_path, path, sparse, 0, k + 1)
    assert _check_prefix(path, data, sparse) == k + 1
    # not asserted (timing-dependent), but recorded: how often the kill tore an append
    print(f"kills that left a torn tail: {killed_mid} of {len(delays)}")


TUPLE_CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    import numpy as np, scipy.sparse as sp, streamrank as sr

    def batch(i):
        rng = np.random.default_rng(2000 + i)
        Q = sp.random(200, 50, density=0.1, format="csr", random_state=rng)
        D = sp.random(400, 60, density=0.1, format="csr", random_state=rng)
        t = np.c_[rng.integers(0, 200, 20_000), rng.integers(0, 400, 20_000), rng.integers(0, 400, 20_000)]
        return Q, D, t, rng.uniform(0.5, 2.0, 20_000)

    if __name__ == "__main__":
        ts = sr.TupleStore.open(sys.argv[1], mode="a")
        print("ready", flush=True)
        for i in range(int(sys.argv[2]), int(sys.argv[3])):
            Q, D, t, m = batch(i)
            ts.append(Q, D, t, magnitudes=m, batch_id=f"b{{i}}")
        print("done", flush=True)
    """
)


@pytest.mark.slow
def test_sigkill_mid_tuple_append(tmp_path, fork_server):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = tmp_path / "tuple_child.py"
    script.write_text(TUPLE_CHILD.format(root=root))
    sys.path.insert(0, str(tmp_path))
    try:
        import importlib

        import tuple_child

        child = importlib.reload(tuple_child)
    finally:
        sys.path.remove(str(tmp_path))
    path = str(tmp_path / "t.zarr")
    sr.TupleStore.create(path, 50, 60)
    proc = fork_server.popen([str(script), path, "0", "10000"], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(float(np.random.default_rng(11).uniform(0.1, 0.4)))
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()

    ts = sr.TupleStore.open(path)
    k = len(ts.log)
    assert [e["batch_id"] for e in ts.log] == [f"b{i}" for i in range(k)]
    assert ts.verify() == k and ts.n_tuples == 20_000 * k
    w = sr.TupleStore.open(path, mode="a")
    done = []
    for i in range(k + 1):
        Q, D, t, m = child.batch(i)
        done.append(w.append(Q, D, t, magnitudes=m, batch_id=f"b{i}"))
    assert done == [False] * k + [True]
    ts = sr.TupleStore.open(path)
    assert ts.verify() == k + 1
    Q, D, t, m = child.batch(k)
    b = ts.take(20_000 * k, 20_000 * (k + 1))
    np.testing.assert_array_equal(b.tuples, t + [200 * k, 400 * k, 400 * k])
    np.testing.assert_array_equal(b.magnitude, m)
    np.testing.assert_array_equal(b.D_pos.toarray(), D[t[:, 1]].toarray().astype(np.float32))

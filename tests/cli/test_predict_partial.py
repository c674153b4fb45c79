"""A killed ``streamrank predict --out scores.npy`` (issue 16): its full-size ``.partial`` is swept by the
next run — only leftovers of dead processes, never a concurrent predict's."""
from __future__ import annotations

import os
import signal
import textwrap

import numpy as np

import streamrank as sr
from streamrank.cli import main

KILLED = textwrap.dedent("""
    import os, signal, sys
    import streamrank as sr
    from streamrank.cli import main
    from streamrank.rankrls import linear

    real = linear.RankRLS.predict
    calls = []

    def predict(self, X, *a, **k):          # die (kill -9) after the first block was written
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(self, X, *a, **k)

    linear.RankRLS.predict = predict
    sys.exit(main(sys.argv[1:]))
""")


def test_killed_predict_partial_is_swept_by_the_next_run(tmp_path, fork_server):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 5))
    y = X @ np.arange(5.0)
    qid = np.repeat(np.arange(40), 10)
    store = sr.GroupStore.create(tmp_path / "s.zarr", n_features=5)
    store.append(X, y, qid)
    sr.save(sr.RankRLS(alpha=1.0).fit(X, y, qid=qid), tmp_path / "m.zarr")
    out = tmp_path / "scores.npy"
    argv = ["predict", "--model", str(tmp_path / "m.zarr"), "--store", str(tmp_path / "s.zarr"),
            "--out", str(out), "--max-rows", "100", "-q"]
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    # a real process, SIGKILLed mid-write: forked from the pre-imported fork server (tests/_forked.py)
    proc = fork_server.run([str(script), *argv], timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    left = list(tmp_path.glob(".scores.*.partial.npy"))
    assert len(left) == 1 and left[0].stat().st_size >= 400 * 8 and not out.exists()
    # a concurrent predict's partial (a live pid) must survive the sweep
    live = tmp_path / f".scores.{os.getpid()}-0abc.partial.npy"
    live.write_bytes(b"being written")
    assert main(argv) == 0
    assert not left[0].exists()
    assert live.read_bytes() == b"being written"
    np.testing.assert_allclose(np.load(out), sr.load(tmp_path / "m.zarr").predict(X.astype(np.float32)), rtol=1e-9)

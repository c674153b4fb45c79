"""Races between real writer processes on one s3:// store, against moto's S3 server (tests/_s3_server.py).

The attacks of issue 39 on the previous lease protocol, rerun on the Icechunk
repository (streamrank/io/_icechunk_repo.py): a writer stopped with SIGSTOP in
the middle of its append while another commits, a writer whose clock runs an
hour ahead, a writer in another PID namespace, a writer SIGKILLed before its
commit, and the "deleted lock" (there is no lock object left to delete).  What
must hold each time: every batch a writer reported committed is in the store,
its rows are the rows that writer appended and ``verify()`` passes; the other
writer gets a clear error (:class:`CommitConflict` naming the winner's commit)
and nothing of its batch is visible.
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
from streamrank.io._icechunk_repo import RepoLocation

pytestmark = pytest.mark.slow      # real writer processes against a real S3 server

_WRITER = textwrap.dedent('''
    import os, sys, time
    import numpy as np
    url, batch, seed, n, pause, flag, go, skew = sys.argv[1:9]
    if float(skew):                       # this writer's clock runs `skew` seconds ahead (every Python clock)
        import datetime as _dt
        _real = time.time
        time.time = lambda: _real() + float(skew)
        class _Skewed(_dt.datetime):
            @classmethod
            def now(cls, tz=None):
                return _dt.datetime.fromtimestamp(time.time(), tz)
        _dt.datetime = _Skewed
    import streamrank as sr
    store = sr.GroupStore.open(url, "a")
    def wait_for_go():
        open(flag, "w").close()
        while not os.path.exists(go):
            time.sleep(0.02)
    real_write = store._write
    def paused_write(*a, **k):
        if pause == "before-write":       # the transaction began: its base is the tip it saw
            wait_for_go()
        out = real_write(*a, **k)
        if pause == "before-commit":      # every chunk of the batch written, the commit not yet made
            wait_for_go()
        return out
    store._write = paused_write
    rng = np.random.default_rng(int(seed)); n = int(n)
    X = rng.normal(size=(n, 4)).astype(np.float32)
    y = rng.integers(0, 4, size=n).astype(np.float64)
    q = np.repeat(np.arange(n // 10), 10) + int(seed) * 1_000_000
    try:
        done = store.append(X, y, q, batch_id=batch)
    except Exception as exc:
        print("REFUSED", type(exc).__name__, exc, flush=True)
        sys.exit(3)
    print("COMMITTED" if done else "SKIPPED", batch, store._loc.snapshot_id, flush=True)
''')


def _batch(seed, n):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4)).astype(np.float32)
    return X, rng.integers(0, 4, size=n).astype(np.float64)


class _Writer:
    def __init__(self, fork_server, s3_server, url, tmp, batch, seed, n, pause="-", skew=0.0, pid_namespace=False):
        self.batch, self.seed, self.n = batch, seed, n
        self.flag, self.go = tmp / f"{batch}-{seed}.in", tmp / f"{batch}-{seed}.go"
        args = [url, batch, str(seed), str(n), pause, str(self.flag), str(self.go), str(skew)]
        env = {**os.environ, **s3_server.env}
        if pid_namespace:      # a fresh interpreter in a new user + PID namespace (its pid there is small)
            self.proc = subprocess.Popen(["unshare", "--user", "--map-root-user", "--pid", "--fork",
                                          sys.executable, "-c", _WRITER, *args], env=env, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)
        else:
            self.proc = fork_server.popen(["-c", _WRITER, *args], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE)

    def wait_paused(self, timeout=180):
        t0 = time.monotonic()
        while not self.flag.exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"writer {self.batch} exited early: {self.proc.communicate()}")
            assert time.monotonic() - t0 < timeout, f"writer {self.batch} never reached its pause"
            time.sleep(0.05)

    def release(self):
        self.go.touch()

    def result(self, timeout=300):
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out.strip(), err


def _check_store(url, so, committed):
    """Every committed batch is there with the rows its writer appended; verify() passes; nothing else is."""
    r = sr.GroupStore.open(url, storage_options=so)
    assert r.verify() == len(r.batches)
    assert sorted(e["batch_id"] for e in r.batches) == sorted(committed)
    Xall = np.vstack([b.X for b in r.blocks(shuffle=False)])
    yall = np.concatenate([b.y for b in r.blocks(shuffle=False)])
    for e in r.batches:
        a, b = e["rows"]
        X, y = _batch(*committed[e["batch_id"]])
        assert np.array_equal(Xall[a:b], X) and np.array_equal(yall[a:b], y), e["batch_id"]
    return r


def _winner_named(msg, url, so, batch):
    """The refusal names the winner's commit: its snapshot id and its message."""
    repo = RepoLocation(url, so).repo
    snap = next(s for s in repo.ancestry(branch="main") if s.message.startswith(f"append batch {batch!r}"))
    assert "CommitConflict" in msg and snap.id in msg and f"append batch {batch!r}" in msg, msg
    assert "nothing of this transaction was committed" in msg


def _new_store(s3_server, s3_url, name):
    so = s3_server.storage_options
    url = f"{s3_url}/{name}.zarr"
    s = sr.GroupStore.create(url, 4, storage_options=so, chunk_rows=4096)
    X, y = _batch(0, 1500)
    assert s.append(X, y, np.repeat(np.arange(150), 10), batch_id="base")
    return url, so


def test_a_stalled_writer_resuming_after_another_commit_is_refused_and_loses_nothing(
        s3_server, s3_url, tmp_path, fork_server):
    """Issue 39's attack: A is SIGSTOPped mid-append, B appends 60,000 rows and commits, A resumes and writes
    every chunk of its batch — to new objects: B's chunks are untouched — then its commit is refused."""
    url, so = _new_store(s3_server, s3_url, "stalled")
    a = _Writer(fork_server, s3_server, url, tmp_path, "A", 1, 20_000, pause="before-write")
    a.wait_paused()
    a.proc.send_signal(signal.SIGSTOP)
    try:
        b = _Writer(fork_server, s3_server, url, tmp_path, "B", 2, 60_000)
        code_b, out_b, err_b = b.result()
        assert code_b == 0 and out_b.startswith("COMMITTED B"), (out_b, err_b)
    finally:
        a.proc.send_signal(signal.SIGCONT)
    a.release()
    code_a, out_a, err_a = a.result()
    assert code_a == 3, (out_a, err_a)
    _winner_named(out_a, url, so, "B")
    r = _check_store(url, so, {"base": (0, 1500), "B": (2, 60_000)})
    assert r.n_rows == 61_500 and [e["rows"] for e in r.batches][1] == [1500, 61_500]


@pytest.mark.parametrize("attack", ["clock-ahead-1h", "pid-namespace"])
def test_a_second_writer_cannot_take_a_live_writers_place(s3_server, s3_url, tmp_path, fork_server, attack):
    """The clock-skew and PID-namespace attacks: B (clock an hour ahead, or in another PID namespace on this
    host) starts while A is live mid-append.  Nothing is taken over: A commits, B's commit is refused."""
    if attack == "pid-namespace" and subprocess.run(["unshare", "--user", "--map-root-user", "--pid", "--fork",
                                                      "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare --user --pid is not permitted here")
    url, so = _new_store(s3_server, s3_url, attack)
    a = _Writer(fork_server, s3_server, url, tmp_path, "A", 1, 20_000, pause="before-commit")
    a.wait_paused()
    b = _Writer(fork_server, s3_server, url, tmp_path, "B", 2, 30_000, pause="before-write",
                skew=3600.0 if attack == "clock-ahead-1h" else 0.0, pid_namespace=attack == "pid-namespace")
    b.wait_paused()
    a.release()
    code_a, out_a, err_a = a.result()
    assert code_a == 0 and out_a.startswith("COMMITTED A"), (out_a, err_a)
    b.release()
    code_b, out_b, err_b = b.result()
    assert code_b == 3, (out_b, err_b)
    _winner_named(out_b, url, so, "A")
    _check_store(url, so, {"base": (0, 1500), "A": (1, 20_000)})


def test_a_writer_killed_before_its_commit_leaves_nothing_and_its_rerun_appends_once(
        s3_server, s3_url, tmp_path, fork_server):
    url, so = _new_store(s3_server, s3_url, "killed")
    a = _Writer(fork_server, s3_server, url, tmp_path, "A", 1, 20_000, pause="before-commit")
    a.wait_paused()                                    # every chunk of A's batch is written
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait(30)
    _check_store(url, so, {"base": (0, 1500)})        # readers: the last commit, nothing of A
    b = _Writer(fork_server, s3_server, url, tmp_path, "B", 2, 5_000)
    assert b.result()[1].startswith("COMMITTED B")     # no lease left behind: another writer appends at once
    again = _Writer(fork_server, s3_server, url, tmp_path, "A", 1, 20_000)
    assert again.result()[1].startswith("COMMITTED A")
    once_more = _Writer(fork_server, s3_server, url, tmp_path, "A", 1, 20_000)
    assert once_more.result()[1].startswith("SKIPPED A")
    _check_store(url, so, {"base": (0, 1500), "B": (2, 5_000), "A": (1, 20_000)})


def test_there_is_no_lock_to_delete_and_overlapping_writers_still_resolve(s3_server, s3_url, tmp_path, fork_server):
    """The deleted-lock attack: the previous protocol's lease object could be deleted under a live writer.
    A repository has no lock object (only Icechunk's immutable objects and its branch reference, moved by a
    conditional write); two overlapping writers resolve as always: the first commit wins."""
    url, so = _new_store(s3_server, s3_url, "nolock")
    a = _Writer(fork_server, s3_server, url, tmp_path, "A", 1, 10_000, pause="before-commit")
    a.wait_paused()
    from streamrank.io._remote import Remote

    keys = Remote(url, so).list()
    assert keys and not [k for k in keys if "lock" in k.lower() or k.startswith(".streamrank")], keys
    assert {k.split("/")[0] for k in keys} <= {"chunks", "manifests", "snapshots", "transactions", "refs",
                                               "config.yaml", "repo", "overwritten"}, keys
    b = _Writer(fork_server, s3_server, url, tmp_path, "B", 2, 10_000)
    assert b.result()[1].startswith("COMMITTED B")
    a.release()
    code_a, out_a, _ = a.result()
    assert code_a == 3
    _winner_named(out_a, url, so, "B")
    _check_store(url, so, {"base": (0, 1500), "B": (2, 10_000)})

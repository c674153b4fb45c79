"""Crash safety with real processes, really killed; damaged files; a full disk.

* ``sr.save`` killed (SIGKILL) at random moments while it replaces a model
  again and again: the model at the path always loads and is one of the two
  complete models — never absent, never a mixture.
* The nightly pipeline killed at random moments of a night, several times:
  the store opens and verifies (committed rows checksummed), the previous
  model still loads, and the next run completes the night exactly once (one
  batch per day, one new version, the model equal to a fit from scratch).
* A damaged chunk, truncated metadata, a missing array: opening or reading
  raises ``StoreFormatError`` naming the file; an append never overwrites a
  damaged chunk silently.
* A full disk (a 3 MiB tmpfs) during append and during save: a clear
  ``OSError`` (ENOSPC), the store stays at its last commit and the previous
  model still loads; once space is back the same append completes.
"""
from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from _cli_inproc import run_cli

import streamrank as sr
from streamrank.io.schema import StoreFormatError
from streamrank.persistence import ModelFormatError

ROOT = Path(__file__).resolve().parents[2]


def _spawn(fork_server, code, *args, env=None):
    """``python child.py *args`` as a real process, forked from the pre-imported fork server (tests/_forked.py)."""
    script = Path(args[0]).parent / f"child_{abs(hash(code)) % 10**8}.py"
    script.write_text(textwrap.dedent(code).replace("{root}", repr(str(ROOT))))
    return fork_server.popen([str(script), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=env)


def _kill_after(proc, delay):
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


def _day(d, n_groups=12, n_features=6):
    rng = np.random.default_rng(d)
    sizes = rng.integers(2, 12, n_groups)
    qid = np.repeat(np.arange(d * 1000, d * 1000 + n_groups), sizes)
    X = rng.normal(size=(len(qid), n_features)).astype(np.float32)
    y = np.round(X @ np.linspace(-1, 1, n_features) + 0.5 * rng.normal(size=len(qid)))
    return X, y, qid


# ------------------------------------------------------------------ model save
SAVER = """
import sys, time
sys.path.insert(0, {root})
import numpy as np, streamrank as sr
path = sys.argv[1]
X = np.random.default_rng(0).normal(size=(200, 40)); y = X[:, 0]; q = np.repeat(np.arange(20), 10)
a = sr.RankRLS(alpha=1.0).fit(X, y, q); b = sr.RankRLS(alpha=100.0).fit(X, y, q)
sr.save(a, path)
print("ready", flush=True)
i, stop = 0, time.monotonic() + float(sys.argv[2]) if len(sys.argv) > 2 else float("inf")
while time.monotonic() < stop:
    sr.save(b if i % 2 == 0 else a, path)
    i += 1
print(i, flush=True)
"""


def test_model_save_killed_at_random_moments_leaves_a_loadable_model(tmp_path, fork_server):
    X = np.random.default_rng(0).normal(size=(200, 40))
    y, q = X[:, 0], np.repeat(np.arange(20), 10)
    coefs = [sr.RankRLS(alpha=a).fit(X, y, q).coef_ for a in (1.0, 100.0)]
    path = tmp_path / "model"
    rng = np.random.default_rng(3)
    for delay in rng.uniform(0.05, 0.6, size=5):
        proc = _spawn(fork_server, SAVER, path)
        assert proc.stdout.readline().strip() == "ready"
        _kill_after(proc, float(delay))
        m = sr.load(path)  # never absent, never half-written
        assert any(np.array_equal(m.coef_, c) for c in coefs)
        assert m.stats_.G.shape == (40, 40)


FALLBACK = """
import os, signal, sys
sys.path.insert(0, {root})
import numpy as np, streamrank as sr, streamrank.persistence as P
X = np.random.default_rng(0).normal(size=(50, 3)); q = np.repeat(np.arange(5), 10)
sr.save(sr.RankRLS(alpha=1.0).fit(X, X[:, 0], q), sys.argv[1])
real = os.replace
def replace(a, b):
    real(a, b)
    if os.fspath(a) == sys.argv[1]:         # old model moved aside, new one not yet in place
        os.kill(os.getpid(), signal.SIGKILL)
P.os.replace = replace
sr.save(sr.RankRLS(alpha=5.0).fit(X, X[:, 0], q), sys.argv[1])
"""


def test_model_save_killed_between_the_two_renames_still_loads(tmp_path, fork_server):
    proc = _spawn(fork_server, FALLBACK, tmp_path / "model")
    proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
    assert not (tmp_path / "model").exists()
    assert sr.load(tmp_path / "model").alpha == 1.0  # the previous model, from its .old copy


# ------------------------------------------------------------------ nightly
def _write_day(tmp, d):
    p = tmp / f"day{d}.npz"
    X, y, qid = _day(d)
    np.savez(p, X=X, y=y, qid=qid)
    return p


def _nightly_argv(store, models, day):
    return ["-m", "streamrank.pipelines.nightly", "--store", str(store), "--new", str(day),
            "--models", str(models), "--alphas", "2^-2:2^2", "--tolerance", "1.0", "--no-plot"]


def _nightly(fork_server, store, models, day):
    t = time.perf_counter()
    out = fork_server.run(_nightly_argv(store, models, day), timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return time.perf_counter() - t


def _check_after_kill(store, models, days_done, prev_version):
    from streamrank.pipelines import nightly

    s = sr.GroupStore.open(store)
    assert s.verify() == len(s.batches)                       # committed rows intact
    ids = [b["batch_id"] for b in s.batches]
    assert len(ids) == len(set(ids)) and len(ids) in (days_done, days_done + 1)
    cur = nightly.current_version(models)
    assert cur is not None
    sr.load(models / "current")                               # a model always loads
    if cur != prev_version:                                   # promoted before the kill: complete
        assert nightly.read_version(models, cur)["data"]["groups"][1] == s.n_groups


def test_nightly_killed_at_random_moments_completes_exactly_once(tmp_path, fork_server):
    """Real night processes (forked from the pre-imported fork server, so the swept moments fall in the night's
    work rather than in Python's start-up), killed with SIGKILL."""
    sys.path.insert(0, str(ROOT))
    from streamrank.pipelines import nightly

    store, models = tmp_path / "logs.zarr", tmp_path / "models"
    days = [_write_day(tmp_path, d) for d in (1, 2)]
    t_night = _nightly(fork_server, store, models, days[0])
    v1 = nightly.current_version(models)
    rng = np.random.default_rng(11)
    for delay in rng.uniform(0.15, 0.95, size=3) * t_night:
        proc = fork_server.popen(_nightly_argv(store, models, days[1]), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        _kill_after(proc, float(delay))
        _check_after_kill(store, models, 1, v1)
    _nightly(fork_server, store, models, days[1])             # the next run completes the work
    _nightly(fork_server, store, models, days[1])             # and a repeat changes nothing
    s = sr.GroupStore.open(store)
    assert s.verify() == 2 and s.n_groups == 24
    versions = nightly.list_versions(models)
    assert len(versions) == 2 and nightly.current_version(models) == versions[-1]
    final = sr.load(models / "current")
    scratch = sr.RankRLS(alpha=final.alpha, solver="primal").fit(s)
    np.testing.assert_allclose(final.coef_, scratch.coef_, rtol=1e-8, atol=1e-12)


# ------------------------------------------------------------ damaged files
def _store(tmp_path, sparse=False):
    import scipy.sparse as sps

    path = tmp_path / ("csr.zarr" if sparse else "dense.zarr")
    s = sr.GroupStore.create(path, 6, sparse=sparse, chunk_rows=1024)
    for d in (1, 2, 3, 4, 5, 6, 7, 8):
        X, y, q = _day(d, n_groups=40)
        s.append(sps.csr_matrix(X) if sparse else X, y, q, batch_id=f"d{d}")
    return path


def _chunk(path, array, k=0):
    return path / array / "c" / (f"{k}/0" if array == "X" else str(k))


def _read_all(path):
    s = sr.GroupStore.open(path)
    for _ in s.blocks(max_rows=500):
        pass


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("damage", ["flip_bytes", "truncate", "empty"])
def test_damaged_chunk_is_named_on_read_and_by_verify(tmp_path, sparse, damage):
    path = _store(tmp_path, sparse)
    array = "X/data" if sparse else "X"
    f = _chunk(path, array)
    b = bytearray(f.read_bytes())
    if damage == "flip_bytes":
        b[len(b) // 2 : len(b) // 2 + 8] = bytes(x ^ 0xFF for x in b[len(b) // 2 : len(b) // 2 + 8])
    elif damage == "truncate":
        b = b[: len(b) // 3]
    else:
        b = b""
    f.write_bytes(bytes(b))
    sr.GroupStore.open(path)                     # the commit record is fine: opening works
    with pytest.raises(StoreFormatError, match=str(f)):
        _read_all(path)
    with pytest.raises(StoreFormatError, match=str(f)):
        sr.GroupStore.open(path).verify()


def test_append_never_overwrites_a_damaged_chunk(tmp_path):
    path = _store(tmp_path)
    s = sr.GroupStore.open(path)
    last = (s.n_rows - 1) // 1024                # the partly filled chunk the next append rewrites
    f = _chunk(path, "X", last)
    f.write_bytes(f.read_bytes()[:-7])
    before = f.read_bytes()
    with pytest.raises(StoreFormatError, match=str(f)):
        sr.GroupStore.open(path, mode="a").append(*_day(9, n_groups=40), batch_id="d9")
    assert f.read_bytes() == before
    assert sr.GroupStore.open(path).n_rows == s.n_rows


def test_missing_chunk_file_is_found_by_verify(tmp_path):
    # zarr reads an absent chunk as its fill value; the logged checksums catch it
    path = _store(tmp_path)
    _chunk(path, "y", 1).unlink()
    with pytest.raises(StoreFormatError, match=r"batch 'd\d' \(rows \d+:\d+\) does not match its checksum"):
        sr.GroupStore.open(path).verify()


@pytest.mark.parametrize("target", ["zarr.json", "X/zarr.json", "qid/zarr.json", "tuples/zarr.json"])
def test_truncated_metadata_is_named(tmp_path, target):
    if target.startswith("tuples"):
        import scipy.sparse as sps

        path = tmp_path / "t.zarr"
        ts = sr.TupleStore.create(path, 3, 3)
        ts.append(sps.eye(2, 3, format="csr"), sps.eye(3, 3, format="csr"), [[0, 1, 2], [1, 0, 2]])
        opener = sr.TupleStore.open
    else:
        path, opener = _store(tmp_path), sr.GroupStore.open
    meta = path / target
    meta.write_text(meta.read_text()[: len(meta.read_text()) // 2])
    with pytest.raises(StoreFormatError, match=str(meta)):
        opener(path)


@pytest.mark.parametrize("array", ["X", "y", "group_ptr"])
def test_missing_array_is_named(tmp_path, array):
    path = _store(tmp_path)
    shutil.rmtree(path / array)
    with pytest.raises(StoreFormatError, match=rf"array '{array}' is missing"):
        sr.GroupStore.open(path)


def _model(tmp_path):
    X = np.random.default_rng(0).normal(size=(60, 5))
    m = sr.RankRLS(alpha=1.0).fit(X, X[:, 0], np.repeat(np.arange(6), 10))
    sr.save(m, tmp_path / "model")
    return tmp_path / "model", m


@pytest.mark.parametrize("damage", ["truncate_meta", "remove_array", "truncate_chunk", "empty_chunk",
                                    "flip_bytes"])
def test_damaged_model_is_refused_naming_it(tmp_path, damage):
    path, m = _model(tmp_path)
    if damage == "truncate_meta":
        meta = path / "zarr.json"
        meta.write_text(meta.read_text()[:40])
    elif damage == "remove_array":
        shutil.rmtree(path / "coef_")
    else:
        chunk = next(p for p in (path / "stats_G").rglob("*") if p.is_file() and p.name != "zarr.json")
        b = bytearray(chunk.read_bytes())
        if damage == "flip_bytes":
            b[len(b) // 2] ^= 0x01
        chunk.write_bytes(bytes(b[:3]) if damage == "truncate_chunk" else b"" if damage == "empty_chunk"
                          else bytes(b))
    with pytest.raises(ModelFormatError, match=str(path)):
        sr.load(path)


# --------------------------------------------------------------- disk full
@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_disk_full_during_append_keeps_the_last_commit(small_disk, tmp_path):
    path = small_disk / "s.zarr"
    store = sr.GroupStore.create(path, 64, chunk_rows=2048)
    rng = np.random.default_rng(0)
    batches, err = [], None
    for i in range(100):                     # incompressible rows until the disk is full
        X = rng.normal(size=(2000, 64)).astype(np.float32)
        b = (X, rng.normal(size=2000), np.repeat(np.arange(i * 100, i * 100 + 100), 20))
        try:
            store.append(*b, batch_id=f"b{i}")
        except OSError as exc:
            err = exc
            break
        batches.append(b)
    assert err is not None and err.errno == errno.ENOSPC, err
    s = sr.GroupStore.open(path)
    assert s.n_rows == 2000 * len(batches) and s.verify() == len(batches)
    X0 = np.concatenate([b.X for b in s.blocks(max_rows=10_000)])
    np.testing.assert_array_equal(X0, np.concatenate([b[0] for b in batches]))
    # space comes back: the same append repairs the torn tail and completes, exactly once
    shutil.copytree(path, tmp_path / "moved.zarr")
    s2 = sr.GroupStore.open(tmp_path / "moved.zarr", mode="a")
    i = len(batches)
    rng2 = np.random.default_rng(0)
    for j in range(i + 1):
        b = (rng2.normal(size=(2000, 64)).astype(np.float32), rng2.normal(size=2000),
             np.repeat(np.arange(j * 100, j * 100 + 100), 20))
        s2.append(*b, batch_id=f"b{j}")      # committed ids are skipped
    assert s2.n_rows == 2000 * (i + 1) and sr.GroupStore.open(tmp_path / "moved.zarr").verify() == i + 1


def test_disk_full_during_model_save_keeps_the_previous_model(small_disk):
    X = np.random.default_rng(0).normal(size=(60, 5))
    q = np.repeat(np.arange(6), 10)
    small = sr.RankRLS(alpha=1.0).fit(X, X[:, 0], q)
    sr.save(small, small_disk / "model")
    filler = small_disk / "filler"
    with open(filler, "wb") as fh:            # leave almost nothing free
        try:
            while True:
                fh.write(os.urandom(1 << 16))
                fh.flush()
        except OSError:
            pass
    big = sr.RankRLS(alpha=2.0).fit(np.c_[X, X, X, X], X[:, 0], q)
    with pytest.raises(OSError) as info:
        sr.save(big, small_disk / "model")
    assert info.value.errno == errno.ENOSPC
    m = sr.load(small_disk / "model")
    assert m.alpha == 1.0 and np.array_equal(m.coef_, small.coef_)
    assert not [p for p in small_disk.iterdir() if p.name.endswith(".partial")]


def test_cli_ingest_on_a_full_disk_exits_cannot_write(small_disk, tmp_path):
    rng = np.random.default_rng(0)
    day = tmp_path / "day.npz"   # incompressible, larger than the 3 MiB disk
    np.savez(day, X=rng.normal(size=(20000, 64)), y=rng.normal(size=20000), qid=np.repeat(np.arange(2000), 10))
    code, _, err = run_cli("ingest", day, "--store", small_disk / "s.zarr", "--quiet", "--max-rows", "4000")
    assert code == 5, err                        # "cannot write", not "invalid data"
    assert "No space left" in err
    s = sr.GroupStore.open(small_disk / "s.zarr")
    assert s.verify() == len(s.batches)


def test_next_save_removes_what_killed_saves_left(tmp_path, fork_server):
    """A save killed between its renames leaves an ``.old`` copy; the next good save sweeps it away."""
    proc = _spawn(fork_server, FALLBACK, tmp_path / "model")
    proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    left = [p.name for p in tmp_path.iterdir() if p.is_dir() and p.name != "model"]
    assert any(n.endswith(".old") for n in left), left
    live = tmp_path / f".model.{os.getpid()}-feed.partial"  # a save running right now in this process
    live.mkdir()
    X = np.random.default_rng(1).normal(size=(30, 3))
    sr.save(sr.RankRLS(alpha=7.0).fit(X, X[:, 0], np.repeat(np.arange(3), 10)), tmp_path / "model")
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == sorted(["model", live.name])
    assert sr.load(tmp_path / "model").alpha == 7.0


AFTER_SECOND_RENAME = """
import os, shutil, signal, sys
sys.path.insert(0, {root})
import numpy as np, streamrank as sr, streamrank.persistence as P
X = np.random.default_rng(0).normal(size=(50, 3)); q = np.repeat(np.arange(5), 10)
sr.save(sr.RankRLS(alpha=1.0).fit(X, X[:, 0], q), sys.argv[1])
def rmtree(p, *a, **k):
    if p.name.endswith(".old"):               # new model in place, the old copy not yet removed
        os.kill(os.getpid(), signal.SIGKILL)
P.shutil.rmtree = rmtree
sr.save(sr.RankRLS(alpha=5.0).fit(X, X[:, 0], q), sys.argv[1])
"""


def test_model_save_killed_after_its_second_rename_loads_the_new_model(tmp_path, fork_server):
    """The other moment between a save's steps: the new model is in place, the ``.old`` copy of the previous
    one not yet removed -- the new model loads, and the next save sweeps the copy."""
    proc = _spawn(fork_server, AFTER_SECOND_RENAME, tmp_path / "model")
    proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
    assert [p.name.endswith(".old") for p in tmp_path.iterdir() if p.name.startswith(".model.")] == [True]
    assert sr.load(tmp_path / "model").alpha == 5.0
    X = np.random.default_rng(1).normal(size=(30, 3))
    sr.save(sr.RankRLS(alpha=7.0).fit(X, X[:, 0], np.repeat(np.arange(3), 10)), tmp_path / "model")
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["model"]
    assert sr.load(tmp_path / "model").alpha == 7.0


def _load_while_it_runs(proc, path):
    """``sr.load(path)`` again and again while ``proc`` (printed "ready", then the count of its writes) runs:
    each load is one of the two models the writers save (alpha 1 or 100), complete.  Returns (writes, loads)."""
    X = np.random.default_rng(0).normal(size=(200, 40))
    y, q = X[:, 0], np.repeat(np.arange(20), 10)
    coefs = {a: sr.RankRLS(alpha=a).fit(X, y, q).coef_ for a in (1.0, 100.0)}
    try:
        assert proc.stdout.readline().strip() == "ready"
        loads = 0
        while proc.poll() is None:
            m = sr.load(path)
            assert np.array_equal(m.coef_, coefs[m.alpha]) and m.stats_.G.shape == (40, 40)
            loads += 1
        writes = int(proc.stdout.readline())
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
    assert proc.returncode == 0, proc.stderr.read()
    return writes, loads


def test_a_load_racing_saves_gets_the_old_or_the_new_model_whole(tmp_path, fork_server):
    """Another process replaces the model again and again (two renames each, the old copy removed after):
    every ``sr.load`` of the path meanwhile returns one of the two models, complete -- never a missing
    model, a half-removed ``.old`` copy or a mixture of both."""
    path = tmp_path / "model"
    saves, loads = _load_while_it_runs(_spawn(fork_server, SAVER, path, 3.0), path)
    assert saves > 10 and loads > 10, (saves, loads)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["model"]


RACING_NIGHTLY = """
import os, shutil, sys, time
sys.path.insert(0, {root})
import numpy as np, streamrank as sr
models = sys.argv[1]
X = np.random.default_rng(0).normal(size=(200, 40)); y = X[:, 0]; q = np.repeat(np.arange(20), 10)
fitted = [sr.RankRLS(alpha=1.0).fit(X, y, q), sr.RankRLS(alpha=100.0).fit(X, y, q)]
def promote(i):                 # as the nightly pipeline does: a new version, the pointer moved, old ones pruned
    sr.save(fitted[i % 2], os.path.join(models, f"v{i}"))
    tmp = os.path.join(models, f".current.{i}")
    with open(tmp, "w") as f:
        f.write(f"v{i}")
    os.replace(tmp, os.path.join(models, "current"))
    shutil.rmtree(os.path.join(models, f"v{i - 1}"), ignore_errors=True)
promote(0)
print("ready", flush=True)
i, stop = 1, time.monotonic() + float(sys.argv[2])
while time.monotonic() < stop:
    promote(i)
    i += 1
print(i, flush=True)
"""


def test_a_load_of_current_racing_promotions_gets_a_whole_version(tmp_path, fork_server):
    """``sr.load(models/current)`` while another process promotes versions and prunes the previous one: the
    version being read can vanish under the read; the load reads the version promoted since, whole."""
    models = tmp_path / "models"
    models.mkdir()
    promotions, loads = _load_while_it_runs(_spawn(fork_server, RACING_NIGHTLY, models, 3.0), models / "current")
    assert promotions > 10 and loads > 10, (promotions, loads)

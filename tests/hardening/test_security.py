"""Loading a model or a store never executes code; CLI paths never meet a shell; no surprise scheduler.

* Model directories crafted to name a non-streamrank class, to carry
  "code" in their parameters, or to hold pickled / object / string arrays
  are refused with ``ModelFormatError`` (or load as inert data) — and the
  sentinel file their payload would create never appears.
* A store whose arrays are of the wrong dtype (strings, objects) is refused
  before any chunk is decoded.
* The package source holds no pickle, eval/exec, ``shell=True``,
  ``os.system`` or ``allow_pickle=True``.
* The command line takes paths with shell metacharacters literally.
* With ``DASK_SCHEDULER_ADDRESS`` pointing at a socket we listen on, fits on
  dask arrays, the CLI and the nightly pipeline never connect to it.
"""
from __future__ import annotations

import json
import os
import pickle
import re
import socket
import threading
from pathlib import Path

import numpy as np
import pytest

import streamrank as sr
from streamrank.io.schema import StoreFormatError
from streamrank.persistence import ModelFormatError

ROOT = Path(__file__).resolve().parents[2]


class _Payload:
    """Unpickling this creates the sentinel file (what an attacker's model would do)."""

    def __init__(self, sentinel):
        self.sentinel = str(sentinel)

    def __reduce__(self):
        return (os.system, (f"touch {self.sentinel}",))


def _saved_model(tmp_path):
    X = np.random.default_rng(0).normal(size=(40, 3))
    path = tmp_path / "model"
    sr.save(sr.RankRLS(alpha=1.0).fit(X, X[:, 0], np.repeat(np.arange(4), 10)), path)
    return path


def _set_attrs(path, **changes):
    meta = path / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"].update(changes)
    meta.write_text(json.dumps(doc))


@pytest.mark.parametrize("cls", ["os.system", "subprocess.Popen", "builtins.eval", "Path", "BaseRanker",
                                 "__import__('os').system('touch {s}')", ""])
def test_model_naming_another_class_is_refused(tmp_path, cls):
    sentinel = tmp_path / "PWNED"
    path = _saved_model(tmp_path)
    _set_attrs(path, **{"class": cls.format(s=sentinel)})
    with pytest.raises(ModelFormatError, match="unknown model class"):
        sr.load(path)
    assert not sentinel.exists()


def test_code_in_parameters_or_state_is_never_evaluated(tmp_path):
    sentinel = tmp_path / "PWNED"
    code = f"__import__('os').system('touch {sentinel}')"
    path = _saved_model(tmp_path)
    _set_attrs(path, params={"alpha": code, "solver": code}, state={"n_features_in_": code})
    try:
        sr.load(path)
    except ModelFormatError:
        pass
    assert not sentinel.exists()


def test_pickled_object_array_is_refused_without_unpickling(tmp_path):
    sentinel = tmp_path / "PWNED"
    path = _saved_model(tmp_path)
    # replace coef_ by a zarr v2 object array whose chunk is a pickle (numcodecs' Pickle codec)
    import shutil

    shutil.rmtree(path / "coef_")
    (path / "coef_").mkdir()
    (path / "coef_" / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [1], "chunks": [1], "dtype": "|O", "compressor": None,
        "filters": [{"id": "pickle", "protocol": 5}], "fill_value": None, "order": "C"}))
    payload = np.empty(1, dtype=object)
    payload[0] = _Payload(sentinel)
    (path / "coef_" / "0").write_bytes(pickle.dumps(payload, protocol=5))
    with pytest.raises(ModelFormatError, match="coef_"):
        sr.load(path)
    assert not sentinel.exists()


def test_string_array_in_a_model_is_refused(tmp_path):
    import zarr

    path = _saved_model(tmp_path)
    g = zarr.open_group(str(path), mode="a")
    del g["coef_"]
    a = g.create_array("coef_", shape=(2,), dtype=str)
    a[:] = np.array(["import os", "x"])
    with pytest.raises(ModelFormatError, match="not numeric"):
        sr.load(path)


@pytest.mark.parametrize("dtype", [str, "float64"])
def test_store_with_foreign_array_dtype_is_refused(tmp_path, dtype):
    import zarr

    path = tmp_path / "s.zarr"
    s = sr.GroupStore.create(path, 3)
    s.append(np.ones((4, 3)), np.arange(4.0), [1, 1, 2, 2])
    g = zarr.open_group(str(path), mode="a")
    del g["X"]
    g.create_array("X", shape=(4, 3), dtype=dtype)
    with pytest.raises(StoreFormatError, match="'X' has dtype"):
        sr.GroupStore.open(path)


def test_source_holds_no_pickle_eval_or_shell():
    bad = re.compile(r"\bpickle\.(loads?|Unpickler)\b|(?<![\w.])(eval|exec)\(|shell\s*=\s*True|os\.system\(|"
                     r"os\.popen\(|allow_pickle\s*=\s*True|yaml\.load\(|marshal\.loads")
    hits = []
    for base in ("streamrank",):
        for f in (ROOT / base).rglob("*.py"):
            for i, line in enumerate(f.read_text().splitlines(), 1):
                if bad.search(line.split("#")[0]):
                    hits.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not hits, hits


def _letor(path, n_queries=4):
    rng = np.random.default_rng(0)
    with open(path, "w") as fh:
        for q in range(n_queries):
            for _ in range(5):
                fh.write(f"{rng.integers(0, 3)} qid:{q} " + " ".join(f"{j + 1}:{rng.normal():.4f}" for j in range(4)) + "\n")


def test_cli_takes_shell_metacharacters_in_paths_literally(tmp_path, fork_server):
    """Real ``python -m streamrank.cli`` processes (forked from the pre-imported fork server, tests/_forked.py),
    given argv lists: no shell anywhere between the argument and the file it names."""
    sentinel = tmp_path / "PWNED"       # what a shell would create (the commands run in tmp_path)
    weird = tmp_path / "day $(touch PWNED); `touch PWNED` | x.txt"
    _letor(weird)
    store = tmp_path / "store;touch PWNED.zarr"
    model = tmp_path / "model && touch PWNED"
    cli = ["-m", "streamrank.cli"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for argv in (["ingest", str(weird), "--store", str(store), "--format", "letor", "--quiet"],
                 ["fit", "--store", str(store), "--model", str(model), "--learner", "rankrls", "--quiet"],
                 ["info", str(model)],
                 ["ingest", str(tmp_path / "missing $(touch PWNED)"), "--store", str(store), "--quiet"]):
        r = fork_server.run([*cli, *argv], env=env, cwd=tmp_path, timeout=300)
        assert r.returncode in (0, 3), r.stderr
    assert sr.GroupStore.open(store).n_rows == 20 and sr.load(model).coef_.shape == (4,)
    assert not sentinel.exists()


class _Listener:
    """A TCP socket posing as a dask scheduler; counts connections."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.connections = 0
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @property
    def address(self):
        return f"tcp://127.0.0.1:{self.sock.getsockname()[1]}"

    def _run(self):
        while not self._stop:
            try:
                c, _ = self.sock.accept()
                self.connections += 1
                c.close()
            except OSError:
                pass

    def close(self):
        self._stop = True
        self.thread.join()
        self.sock.close()


CHILD = """
import sys
sys.path.insert(0, {root!r})
import numpy as np, dask.array as da, streamrank as sr
rng = np.random.default_rng(0)
X = rng.normal(size=(200, 4)); y = X[:, 0]; q = np.repeat(np.arange(20), 10)
dX, dy, dq = da.from_array(X, chunks=30), da.from_array(y, chunks=30), da.from_array(q, chunks=30)
sr.RankRLS().fit(dX, dy, dq).predict(dX).compute()
sr.KernelRankRLS(n_basis=20).fit(dX, dy, dq)
sr.PairwiseSGDRanker().fit(dX, dy, dq)
print("ok")
"""


def test_no_scheduler_is_contacted_unless_given(tmp_path, fork_server):
    """Real processes (forked from the fork server, which never imports dask: the child's dask reads the
    scheduler address from its environment as a fresh interpreter would)."""
    lst = _Listener()
    try:
        env = dict(os.environ, DASK_SCHEDULER_ADDRESS=lst.address, DASK_DISTRIBUTED__SCHEDULER_ADDRESS=lst.address,
                   PYTHONPATH=str(ROOT))
        script = tmp_path / "child.py"
        script.write_text(CHILD.format(root=str(ROOT)))
        r = fork_server.run([str(script)], env=env, timeout=300)
        assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]
        day = tmp_path / "day.txt"
        _letor(day)
        r = fork_server.run(["-m", "streamrank.pipelines.nightly", "--store", str(tmp_path / "s.zarr"),
                             "--new", str(day), "--models", str(tmp_path / "m"), "--alphas", "1,10", "--no-plot"],
                            env=env, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert lst.connections == 0
    finally:
        lst.close()

"""Dense data imports no scipy; sparse data is served as before (issue 22, :mod:`streamrank._sparse`).

What a process imports is checked in fresh interpreters (this test process
imported scipy long ago): one runs the dense paths one after the other and
reports which scipy modules it holds after each step; another imports
scipy.sparse only after streamrank and fits CSR arrays and matrices, whose
coefficients must be the bytes this process (scipy imported first) gets.
"""
from __future__ import annotations

import ast
import json
import re
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from streamrank import _sparse

PACKAGE = Path(sr.__file__).resolve().parent


def _child(code: str, cwd, env=None) -> dict:
    """Run ``code`` in a fresh interpreter in ``cwd``; its last stdout line is a JSON object, returned."""
    full = dict(os.environ, **(env or {}))
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=cwd,
                         env=full)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def _letor_text(rng, n_groups, n_features=6, rows=8) -> str:
    lines = [f"{int(rng.integers(0, 3))} qid:{q} " + " ".join(f"{j}:{rng.normal():.4f}" for j in range(1, n_features + 1))
             for q in range(1, n_groups + 1) for _ in range(rows)]
    return "\n".join(lines) + "\n"


DENSE_CHILD = """
import contextlib, io, json, sys
import numpy as np

def scipy_mods():
    return sorted(m for m in sys.modules if m == "scipy" or m.startswith("scipy."))

out = {}
import streamrank as sr
out["import"] = scipy_mods()
rng = np.random.default_rng(0)
y, s, q = rng.integers(0, 3, 300).astype(float), rng.normal(size=300), np.repeat(np.arange(30), 10)
out["ndcg_value"] = float(sr.metrics.ndcg(y, s, q, k=10))
out["ndcg"] = scipy_mods()

from streamrank.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    assert main(["ingest", "train.txt", "--store", "cli.zarr", "-q"]) == 0
out["cli_ingest"] = scipy_mods()

X, y, q = sr.read_svmlight("train.txt", dense=True)
chunks = list(sr.iter_svmlight("train.txt", chunk_bytes=2000))
store = sr.GroupStore.create("api.zarr", n_features=X.shape[1])
store.append(X, y, q, batch_id="a")
store.append(np.concatenate([c.X for c in chunks]), y, q + 1000, batch_id="b")
blocks = list(sr.GroupStore.open("api.zarr").blocks(max_rows=64))
assert sum(b.n_rows for b in blocks) == 2 * len(y) and all(isinstance(b.X, np.ndarray) for b in blocks)
out["api_store"] = scipy_mods()

from streamrank.datasets.synthetic import make_letor_like      # the README's data: dense
Xs, ys, qs = make_letor_like(n_rows=300, n_features=5, random_state=0)
assert isinstance(Xs, np.ndarray) and Xs.shape == (300, 5)
out["make_letor_like"] = scipy_mods()

with contextlib.redirect_stdout(io.StringIO()):
    assert main(["evaluate", "--model", "model.zarr", "--store", "cli.zarr", "-q"]) == 0
    assert main(["predict", "--model", "model.zarr", "--store", "cli.zarr", "--out", "scores.npy", "-q"]) == 0
model = sr.load("model.zarr")
out["api_scores"] = model.predict(X).tobytes().hex()
out["evaluate_predict"] = scipy_mods()

fitted = sr.RankRLS(alpha=1.0).fit(sr.GroupStore.open("cli.zarr"))
out["coef"] = fitted.coef_.tobytes().hex()
with contextlib.redirect_stdout(io.StringIO()):
    assert main(["fit", "--store", "cli.zarr", "--model", "again.zarr", "--learner", "rankrls", "-q"]) == 0
out["fit"] = scipy_mods()
print(json.dumps(out))
"""


def test_dense_paths_import_no_scipy_and_a_dense_fit_no_scipy_sparse(tmp_path):
    """import, ndcg, ingest (CLI and API), a dense store's append and blocks, ``make_letor_like``, evaluate and
    predict: no scipy at all.

    The fits (``RankRLS.fit`` and ``streamrank fit --learner rankrls``) then
    import scipy.linalg for their solve and still no scipy.sparse.  The
    results are those of this process, where scipy was imported first.
    """
    rng = np.random.default_rng(5)
    (tmp_path / "train.txt").write_text(_letor_text(rng, 12))
    X, y, q = sr.read_svmlight(tmp_path / "train.txt", dense=True)
    model = sr.RankRLS(alpha=1.0).fit(X, y, q)
    sr.save(model, tmp_path / "model.zarr")
    out = _child(DENSE_CHILD, tmp_path)
    for step in ("import", "ndcg", "cli_ingest", "api_store", "make_letor_like", "evaluate_predict"):
        assert out[step] == [], (step, out[step])
    assert "scipy.linalg" in out["fit"] and not [m for m in out["fit"] if m.startswith("scipy.sparse")], out["fit"]
    assert out["ndcg_value"] > 0
    assert out["api_scores"] == model.predict(X).tobytes().hex()
    assert np.load(tmp_path / "scores.npy").shape == (len(y),)
    want = sr.RankRLS(alpha=1.0).fit(sr.GroupStore.open(tmp_path / "cli.zarr")).coef_
    assert out["coef"] == want.tobytes().hex()


SPARSE_CHILD = """
import json, sys
import numpy as np
import streamrank as sr
from streamrank.rankrls import linear                # the learner's modules are imported before scipy.sparse
from streamrank.io import group_store
assert "scipy.sparse" not in sys.modules
import scipy.sparse as sp

data = np.load("data.npz")
X, y, q = sp.csr_matrix(data["X"]), data["y"], data["q"]
out = {}
for kind, M in (("matrix", X), ("array", sp.csr_array(X))):
    out[kind] = sr.RankRLS(alpha=1.0).fit(M, y, q).coef_.tobytes().hex()
    out[kind + "_cg"] = sr.RankRLS(alpha=1.0, solver="cg", tol=1e-10).fit(M, y, q).coef_.tobytes().hex()
store = sr.GroupStore.create("sparse.zarr", n_features=X.shape[1], sparse=True)
store.append(sp.csr_array(X), y, q, batch_id="a")
blocks = list(sr.GroupStore.open("sparse.zarr").blocks(max_rows=64))
out["blocks_sparse"] = all(sp.issparse(b.X) for b in blocks)
out["store"] = sr.RankRLS(alpha=1.0).fit(sr.GroupStore.open("sparse.zarr")).coef_.tobytes().hex()
print(json.dumps(out))
"""


def test_sparse_input_after_a_late_scipy_import_fits_the_same_bits(tmp_path):
    """scipy.sparse imported only after streamrank: CSR matrices and arrays, in memory and in a store, fit as before."""
    rng = np.random.default_rng(3)
    dense = rng.normal(size=(120, 9)) * (rng.random((120, 9)) < 0.4)
    y, q = rng.integers(0, 4, 120).astype(float), np.repeat(np.arange(15), 8)
    np.savez(tmp_path / "data.npz", X=dense, y=y, q=q)
    out = _child(SPARSE_CHILD, tmp_path)
    X = sp.csr_matrix(dense)
    want = sr.RankRLS(alpha=1.0).fit(X, y, q).coef_.tobytes().hex()
    want_cg = sr.RankRLS(alpha=1.0, solver="cg", tol=1e-10).fit(X, y, q).coef_.tobytes().hex()
    assert out["matrix"] == out["array"] == want
    assert out["matrix_cg"] == out["array_cg"] == want_cg
    assert out["blocks_sparse"] is True
    store = sr.GroupStore.create(tmp_path / "here.zarr", n_features=9, sparse=True)
    store.append(X, y, q, batch_id="a")
    assert out["store"] == sr.RankRLS(alpha=1.0).fit(sr.GroupStore.open(tmp_path / "here.zarr")).coef_.tobytes().hex()


def test_console_commands_of_a_dense_store_import_no_scipy(tmp_path):
    """``python -m streamrank.cli ingest`` and ``evaluate`` (the console path, with its preload), per -X importtime."""
    rng = np.random.default_rng(7)
    (tmp_path / "train.txt").write_text(_letor_text(rng, 10))
    X, y, q = sr.read_svmlight(tmp_path / "train.txt", dense=True)
    sr.save(sr.RankRLS(alpha=1.0).fit(X, y, q), tmp_path / "model.zarr")
    env = dict(os.environ, STREAMRANK_NO_FORK="1")
    for argv in (["ingest", "train.txt", "--store", "s.zarr", "-q"],
                 ["evaluate", "--model", "model.zarr", "--store", "s.zarr", "-q"]):
        res = subprocess.run([sys.executable, "-X", "importtime", "-m", "streamrank.cli", *argv], cwd=tmp_path,
                             env=env, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr[-2000:]
        imported = [line.rsplit("|", 1)[-1].strip() for line in res.stderr.splitlines() if "import time:" in line]
        # the log is read: the command did import (its store; a local store imports no zarr: io/_local_zarr)
        assert "streamrank.io.group_store" in imported
        assert not [m for m in imported if m == "scipy" or m.startswith("scipy.")], argv


def test_issparse_imports_nothing_when_scipy_sparse_was_never_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "scipy.sparse")
    assert _sparse.issparse(np.zeros((2, 2))) is False
    assert _sparse.sp.issparse(object()) is False
    assert "scipy.sparse" not in sys.modules


def test_issparse_while_another_thread_is_importing_scipy_sparse(monkeypatch):
    """A module in sys.modules that has no ``issparse`` yet is being imported: nothing of it can exist, so False."""
    import types

    monkeypatch.setitem(sys.modules, "scipy.sparse", types.ModuleType("scipy.sparse"))
    assert _sparse.issparse(np.zeros(2)) is False


def test_issparse_and_the_lazy_module_follow_scipy_once_imported():
    M = sp.csr_matrix(np.eye(3))
    for x in (M, sp.csr_array(M), M.tocoo(), sp.csc_array(M)):
        assert _sparse.issparse(x) is True and _sparse.sp.issparse(x) is True
    for x in (np.eye(3), M.toarray().tolist(), None, np.float64(1.0)):
        assert _sparse.issparse(x) is False
    assert _sparse.sp.csr_matrix is sp.csr_matrix and _sparse.sp.vstack is sp.vstack
    assert _sparse.scipy_sparse() is sp
    assert "csr_array" in dir(_sparse.sp)
    with pytest.raises(AttributeError):
        _sparse.sp.no_such_scipy_name


def _top_level_scipy_imports(path: Path) -> bool:
    """True if ``path`` imports scipy when it is imported (module level, or under a module-level try/if
    other than ``if TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = []
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        nodes.extend(ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node])
    for node in nodes:
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "scipy" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "scipy":
            return True
    return False


def test_the_preload_knows_which_saved_models_import_scipy_sparse():
    """``_SPARSE_MODELS`` names exactly the registered learners whose module imports scipy at its top."""
    import importlib

    from streamrank.cli._preload import _SPARSE_MODELS
    from streamrank.persistence import _REGISTRY

    for name in sr.LEARNER_MODULES:
        importlib.import_module(name)
    package = {n: cls for n, cls in _REGISTRY.items() if cls.__module__ in sr.LEARNER_MODULES}   # (not tests' own)
    csr = {n for n, cls in package.items() if _top_level_scipy_imports(Path(sys.modules[cls.__module__].__file__))}
    assert csr == _SPARSE_MODELS and "RankRLS" in package


def test_only_the_modules_listed_in_the_sparse_module_doc_import_scipy_at_their_top():
    """The list in :mod:`streamrank._sparse`'s docstring is the truth: a new top-level scipy import must be listed."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        if _top_level_scipy_imports(path):
            parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
            found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    listed = set(re.findall(r"``(streamrank\.[\w.]+)``", _sparse.__doc__.split("Everything else goes through")[0]))
    listed.discard("streamrank.datasets.synthetic")          # named as the one that does not
    assert found == listed, (sorted(found - listed), sorted(listed - found))
    assert "streamrank.io.svmlight" not in found and "streamrank.rankrls.linear" not in found


def test_read_svmlight_dense_is_the_csr_to_array_result_bit_for_bit(tmp_path):
    """``dense=True`` no longer goes through CSR; its X is ``toarray()``'s bit for bit.

    ``-1e-50`` is stored (it is not zero) and becomes float32 -0.0, which
    ``toarray()`` turned into +0.0 (0 + v); the dense read must too.
    """
    text = ("2 qid:1 1:-1e-50 2:0.5 4:-0.0\n0 qid:1 2:-1e-45 3:3.4e38 4:1\n1 qid:2 1:1e-40 3:-2.5\n"
            "0 qid:2 1:NULL 4:-7\n")
    (tmp_path / "f.txt").write_text(text)
    for null in (float("nan"), -0.0, 0.0):
        Xd, yd, qd = sr.read_svmlight(tmp_path / "f.txt", dense=True, null_value=null)
        Xs, ys, qs = sr.read_svmlight(tmp_path / "f.txt", null_value=null)
        assert isinstance(Xd, np.ndarray) and Xd.dtype == np.float32 and Xd.flags.c_contiguous
        assert Xd.tobytes() == Xs.toarray().tobytes(), null
        assert yd.tobytes() == ys.tobytes() and qd.tobytes() == qs.tobytes()
    assert Xs.data[0] == 0 and np.signbit(Xs.data[0])                          # CSR keeps the -0.0 it parsed
    assert Xd[0, 0] == 0 and not np.signbit(Xd[0, 0])                           # the dense X has +0.0, as before
    (tmp_path / "empty.txt").write_text("")
    Xe, _, _ = sr.read_svmlight(tmp_path / "empty.txt", dense=True, n_features=3)
    assert Xe.shape == (0, 3) and isinstance(Xe, np.ndarray)


def test_console_preload_adds_scipy_sparse_only_for_csr_runs(monkeypatch, tmp_path):
    """``scipy.sparse`` is preloaded for ``--sparse``, a CSR store (group or tuple), a CSR learner or a saved model of
    one; not otherwise."""
    from streamrank.cli import _preload
    from streamrank.cli._app import build_parser
    from streamrank.io.schema import TUPLE_FORMAT

    assert _preload._TUPLE_FORMAT == TUPLE_FORMAT
    rng = np.random.default_rng(0)
    Xd = rng.normal(size=(6, 3))
    dense = sr.GroupStore.create(tmp_path / "dense.zarr", n_features=3)
    dense.append(Xd, np.arange(6.0), np.repeat([0, 1], 3))
    sparse = sr.GroupStore.create(tmp_path / "sparse.zarr", n_features=3, sparse=True)
    sparse.append(sp.csr_matrix(Xd), np.arange(6.0), np.repeat([0, 1], 3))
    tuples = sr.TupleStore.create(tmp_path / "tuples.zarr", 3, 3)
    tuples.append(sp.csr_matrix(Xd[:2]), sp.csr_matrix(Xd), np.array([[0, 1, 2], [1, 3, 4]]), batch_id="t")
    broken = tmp_path / "broken.zarr"
    broken.mkdir()
    (broken / "zarr.json").write_text('{"attributes": ["sparse"]')                 # unreadable: not a hint
    listy = tmp_path / "listy.zarr"
    listy.mkdir()
    (listy / "zarr.json").write_text('["sparse", true]')
    (tmp_path / "t.txt").write_text("1 qid:1 1:0.5\n")
    sr.save(sr.RankRLS(alpha=1.0).fit(Xd, np.arange(6.0), np.repeat([0, 1], 3)), tmp_path / "linear.zarr")
    sr.save(sr.KernelRankRLS(alpha=1.0).fit(Xd, np.arange(6.0), np.repeat([0, 1], 3)), tmp_path / "kernel.zarr")
    calls = []
    monkeypatch.setattr(_preload, "preload_paused", calls.append)
    parser = build_parser()
    model = str(tmp_path / "m.zarr")
    cases = [
        (["ingest", str(tmp_path / "t.txt"), "--store", str(tmp_path / "new.zarr")], False),
        (["ingest", str(tmp_path / "t.txt"), "--store", str(tmp_path / "new.zarr"), "--sparse"], True),
        (["ingest", str(tmp_path / "t.txt"), "--store", str(tmp_path / "sparse.zarr")], True),
        (["fit", "--store", str(tmp_path / "dense.zarr"), "--model", model, "--learner", "rankrls"], False),
        (["fit", "--store", str(tmp_path / "dense.zarr"), "--model", model, "--learner", "cg"], True),
        (["fit", "--store", str(tmp_path / "sparse.zarr"), "--model", model, "--learner", "rankrls"], True),
        (["fit", "--store", str(tmp_path / "tuples.zarr"), "--model", model, "--learner", "sgd-bilinear"], True),
        (["cv", "--store", str(tmp_path / "dense.zarr"), "--learner", "rankrls", "--alphas", "1"], False),
        (["evaluate", "--model", str(tmp_path / "dense.zarr"), "--store", str(tmp_path / "dense.zarr")], False),
        (["evaluate", "--model", str(tmp_path / "dense.zarr"), "--store", str(tmp_path / "sparse.zarr")], True),
        (["predict", "--model", str(tmp_path / "dense.zarr"), "--store", str(tmp_path / "tuples.zarr"),
          "--out", str(tmp_path / "s.npy")], True),
        (["evaluate", "--model", str(tmp_path / "dense.zarr"), "--store", str(broken)], False),
        (["evaluate", "--model", str(tmp_path / "dense.zarr"), "--store", str(listy)], False),
        (["evaluate", "--model", str(tmp_path / "linear.zarr"), "--store", str(tmp_path / "dense.zarr")], False),
        (["predict", "--model", str(tmp_path / "kernel.zarr"), "--store", str(tmp_path / "dense.zarr"),
          "--out", str(tmp_path / "s.npy")], True),
    ]
    for argv, csr in cases:
        calls.clear()
        _preload.preload_for(parser.parse_args(argv))
        want = _preload.PRELOAD[argv[0]] + (_preload.SPARSE_PRELOAD if csr else ())
        local = _preload.URL_ONLY.get(argv[0], ())       # (every store here is local: ingest's zarr is left out)
        assert calls == [tuple(m for m in want if m not in local)], argv
        assert "scipy.sparse" not in _preload.PRELOAD[argv[0]]
    calls.clear()
    _preload.preload_for(SimpleNamespace(command="info", store=str(tmp_path / "sparse.zarr")))
    assert calls == [()]                                   # a command without a preload gets none

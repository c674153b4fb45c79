"""The ``streamrank`` command line, driven as a user would: real subprocesses on a MQ2008 slice.

The subprocesses are ``python -m streamrank.cli`` (what the console script runs: ``cli.main()``, supervised)
forked from one pre-imported Python (the ``fork_server`` fixture, tests/_forked.py): real processes with their
own exit codes, pipes and signals (the Ctrl-C tests interrupt them), without paying numpy's, numba's, zarr's
and streamrank's imports again for each (~1.3 CPU-s a command).  The installed console script itself is run
by tests/packaging/test_wheel.py, the tty test below and tests/cli/test_cli_phases.py.

One train / test store is ingested per module (from the LETOR 4.0 archive in
``../shared/data/letor`` beside the checkout, read straight from the tar.gz) and reused.  Every
result printed or written by the CLI is compared with the same computation
done in-process through the Python API.  Error cases check the documented
exit codes (see ``streamrank/cli/_common.py``) and that an error is one line.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from _cli_inproc import run_cli

import streamrank as sr
from streamrank import cli
from streamrank.datasets._paths import data_path

ARCHIVE = data_path("letor", "MQ2008_QueryLevelNorm.tar.gz")
TRAIN = f"{ARCHIVE}:MQ2008/Fold1/train.txt"
TEST = f"{ARCHIVE}:MQ2008/Fold1/test.txt"
SCRIPT = Path(sys.executable).parent / "streamrank"

pytestmark = pytest.mark.skipif(not ARCHIVE.exists(), reason="MQ2008 archive not available")


def _cmd():
    return [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "streamrank.cli"]


_FORKS = []   # the fork server of this module's tests (see the module doc)


@pytest.fixture(scope="module", autouse=True)
def _forks(fork_server):
    _FORKS.append(fork_server)
    yield
    _FORKS.clear()


def _forked_cli(args, env, **kw):
    """``python -m streamrank.cli ARGS`` as a process forked from the fork server."""
    return ["-m", "streamrank.cli", *[str(a) for a in args]], dict(env=env, **kw)


def run(*args, env=None, cwd=None, timeout=300):
    e = dict(os.environ)
    e.pop("STREAMRANK_PROGRESS_SECONDS", None)
    e.update(env or {})
    argv, kw = _forked_cli(args, e, cwd=cwd)
    return _FORKS[0].run(argv, timeout=timeout, **kw)


class _Done:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def inproc(*args, env=None):
    """``cli.main`` in this process, output captured (the same code as the console script, no startup cost).

    Each command is also run at least once as a real subprocess in this module.
    """
    return _Done(*run_cli(*args, env=env))


def ok(p):
    assert p.returncode == 0, f"exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    return p


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    p = ok(run("ingest", TRAIN, "--store", d / "train.zarr", "--limit", 500))
    assert "ingested" in p.stdout and "46 features" in p.stdout
    # the same command in this process (it just ran as a console script): the store is what is tested
    ok(inproc("ingest", TEST, "--store", d / "test.zarr", "--limit", 300, "--chunk-mb", 0.05, "-q"))
    return d


# ------------------------------------------------------------------ ingest/info
def test_ingested_store_equals_parser(data):
    from streamrank.datasets.letor import iter_letor

    chunks = list(iter_letor(ARCHIVE, member="MQ2008/Fold1/test.txt", limit_rows=300))
    X = np.concatenate([c.X for c in chunks])
    y = np.concatenate([c.y for c in chunks])
    qid = np.concatenate([c.qid for c in chunks])
    store = sr.GroupStore.open(data / "test.zarr")
    assert store.n_rows == len(y) and store.n_features == 46
    assert len(store.batches) > 1                       # --chunk-mb 0.05: several atomic appends
    blocks = list(store.blocks(max_rows=10_000))
    np.testing.assert_array_equal(np.concatenate([b.X for b in blocks]), X.astype(np.float32))
    np.testing.assert_array_equal(np.concatenate([b.y for b in blocks]), y)
    np.testing.assert_array_equal(np.concatenate([b.row_qid() for b in blocks]), qid)
    assert store.verify() == len(store.batches)


def test_info_store(data):
    p = ok(run("info", data / "test.zarr", "--json"))
    info = json.loads(p.stdout)
    store = sr.GroupStore.open(data / "test.zarr")
    assert info["kind"] == "group" and info["format_version"] == 1
    assert (info["rows"], info["groups"], info["features"]) == (store.n_rows, store.n_groups, 46)
    assert info["batches"] == len(store.batches)
    assert info["size_on_disk"] == sum(f.stat().st_size for f in (data / "test.zarr").rglob("*") if f.is_file())
    text = ok(inproc("info", data / "train.zarr")).stdout
    for word in ("rows", "groups", "features", "size_on_disk", "batches", "format_version"):
        assert word in text


def test_ingest_is_idempotent(data, tmp_path):
    before = sr.GroupStore.open(data / "train.zarr").n_rows
    p = ok(inproc("ingest", TRAIN, "--store", data / "train.zarr", "--limit", 500, "-q"))
    assert "ingested 0 rows (0 batch(es), 1 already in the store)" in p.stdout
    assert sr.GroupStore.open(data / "train.zarr").n_rows == before


def test_ingest_npz_and_zarr_copy(data, tmp_path):
    rng = np.random.default_rng(0)
    X, y, qid = rng.normal(size=(40, 46)), rng.integers(0, 3, 40).astype(float), np.repeat(np.arange(900, 908), 5)
    np.savez(tmp_path / "day.npz", X=X, y=y, qid=qid)
    # a copy of the test store plus a .npz day, in one command (formats detected from the paths)
    ok(inproc("ingest", data / "test.zarr", tmp_path / "day.npz", "--store", tmp_path / "all.zarr", "-q"))
    src, out = sr.GroupStore.open(data / "test.zarr"), sr.GroupStore.open(tmp_path / "all.zarr")
    assert out.n_rows == src.n_rows + 40 and out.n_groups == src.n_groups + 8
    last = list(out.blocks(max_rows=100_000))[-1]
    np.testing.assert_array_equal(last.X[-40:], X.astype(np.float32))


def test_ingest_sparse_store_equals_dense(data, rankrls_model, tmp_path):
    ok(inproc("ingest", TEST, "--store", tmp_path / "csr.zarr", "--limit", 300, "--sparse", "-q"))
    a, b = sr.GroupStore.open(tmp_path / "csr.zarr"), sr.GroupStore.open(data / "test.zarr")
    assert a.sparse and not b.sparse and a.n_rows == b.n_rows
    Xa = sp.vstack([blk.X for blk in a.blocks()]).toarray()
    np.testing.assert_array_equal(Xa, np.concatenate([blk.X for blk in b.blocks()]))
    # a model trained on the dense store scores the CSR store identically (evaluate streams CSR blocks)
    p = inproc("evaluate", "--model", rankrls_model, "--store", tmp_path / "csr.zarr", "--json")
    q = inproc("evaluate", "--model", rankrls_model, "--store", data / "test.zarr", "--json")
    got, want = json.loads(p.stdout)["metrics"], json.loads(q.stdout)["metrics"]
    assert got.keys() == want.keys()
    for k in got:
        assert got[k] == pytest.approx(want[k], rel=1e-12)


# ----------------------------------------------------------- fit and friends
@pytest.fixture(scope="module")
def rankrls_model(data):
    p = ok(run("fit", "--store", data / "train.zarr", "--model", data / "m.zarr", "--learner", "rankrls",
               "--alphas", "2^-6:2^6:5", "--cv", 3))   # 2^-6, 2^-3, ..., 2^6
    assert "chose alpha=" in p.stdout and "saved to" in p.stdout
    return data / "m.zarr"


def test_fit_matches_python_api(data, rankrls_model):
    m = sr.load(rankrls_model)
    ref = sr.RankRLS(solver="primal")
    res = ref.cross_validate(sr.GroupStore.open(data / "train.zarr"), alphas=2.0 ** np.arange(-6, 7, 3), folds=3)
    assert m.alpha == res.best_alpha
    np.testing.assert_allclose(m.coef_, ref.coef_, rtol=1e-10, atol=1e-13)
    meta = json.loads((rankrls_model / "zarr.json").read_text())["attributes"]["cli"]
    np.testing.assert_allclose(meta["cv"]["scores"], res.scores, rtol=1e-10)
    info = json.loads(ok(inproc("info", rankrls_model, "--json")).stdout)
    assert info["kind"] == "model" and info["class"] == "RankRLS" and info["cv"]["best_alpha"] == res.best_alpha


def test_evaluate_matches_metrics(data, rankrls_model):
    p = ok(run("evaluate", "--model", rankrls_model, "--store", data / "test.zarr",
               "--metrics", "ndcg@10,disagreement,map,auc", "--json"))
    got = json.loads(p.stdout)["metrics"]
    m, store = sr.load(rankrls_model), sr.GroupStore.open(data / "test.zarr")
    ref = sr.metrics.evaluate(store, m, k=10)
    for name in ("ndcg@10", "disagreement", "map"):
        assert got[name] == pytest.approx(ref[name].value, rel=1e-12)
    assert got["auc"] == pytest.approx(sr.metrics.evaluate(store, m, metrics=["auc"])["auc"].value, rel=1e-12)
    text = ok(inproc("evaluate", "--model", rankrls_model, "--store", data / "test.zarr", "-q")).stdout
    assert text.splitlines()[0].startswith("ndcg@10")


def test_predict_npy_and_zarr(data, rankrls_model, tmp_path):
    ok(run("predict", "--model", rankrls_model, "--store", data / "test.zarr", "--out", tmp_path / "s.npy", "-q"))
    ok(inproc("predict", "--model", rankrls_model, "--store", data / "test.zarr", "--out", tmp_path / "s.zarr", "-q"))
    m, store = sr.load(rankrls_model), sr.GroupStore.open(data / "test.zarr")
    want = np.concatenate([m.predict(b.X) for b in store.blocks()])
    np.testing.assert_array_equal(np.load(tmp_path / "s.npy"), want)
    import zarr

    z = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")
    np.testing.assert_array_equal(z["score"][...], want)
    np.testing.assert_array_equal(z["qid"][...], store.qid)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.npy", "s.zarr"]   # no temporaries


def _png_size(path):
    import matplotlib.image as mpimg

    assert path.stat().st_size > 1000
    return mpimg.imread(path).shape[:2]


def test_plot_regularization_path(rankrls_model, tmp_path):
    p = ok(run("plot", "--model", rankrls_model, "--out", tmp_path / "path.png", "--width", 700, "--height", 420))
    assert "(path)" in p.stdout
    assert _png_size(tmp_path / "path.png") == (420, 700)


@pytest.mark.parametrize("learner,opts", [
    ("cg", ["--alpha", "4", "--tol", "1e-10"]),
    ("kernel", ["--gamma", "0.05", "--alpha", "1"]),
    ("sparse-kernel", ["--gamma", "0.05", "--n-basis", "60", "--alphas", "0.25,1,4", "--cv", "query"]),
    ("sgd-pairwise", ["--eta0", "0.1", "--n-pairs", "3000", "--batch-size", "500"]),
])
def test_other_learners(data, learner, opts, tmp_path):
    out = tmp_path / f"{learner}.zarr"
    ok(inproc("fit", "--store", data / "train.zarr", "--model", out, "--learner", learner, "-q", *opts))
    m = sr.load(out)
    store = sr.GroupStore.open(data / "test.zarr")
    got = json.loads(ok(inproc("evaluate", "--model", out, "--store", data / "test.zarr", "--json")).stdout)
    assert got["metrics"]["ndcg@10"] == pytest.approx(sr.metrics.evaluate(store, m)["ndcg@10"].value, rel=1e-12)
    assert 0.3 < got["metrics"]["ndcg@10"] <= 1.0
    if learner == "sgd-pairwise":   # the same pairs (seed 0) as the Python API
        ref = sr.PairwiseSGDRanker(eta0=0.1).fit(sr.GroupStore.open(data / "train.zarr"), n_pairs=3000,
                                                 max_rows=cli.DEFAULT_MAX_ROWS, batch_size=500)
        np.testing.assert_array_equal(m.coef_, ref.coef_)
        assert m.t_ == 3000
    if learner == "cg":   # the same model as the Python API
        ref = sr.RankRLS(alpha=4.0, solver="cg", tol=1e-10).fit(sr.GroupStore.open(data / "train.zarr"))
        np.testing.assert_allclose(m.coef_, ref.coef_, rtol=1e-8, atol=1e-10)
        ok(inproc("plot", "--model", out, "--out", tmp_path / "cg.png", "-q"))      # CG convergence curve
        assert _png_size(tmp_path / "cg.png") == (500, 800)


def test_cv_command(data, tmp_path):
    p = ok(inproc("cv", "--store", data / "train.zarr", "--learner", "rankrls", "--alphas", "1e-2:1e2:5",
               "--folds", "query", "--scoring", "ndcg@10", "--json", tmp_path / "cv.json", "-q"))
    assert "best alpha" in p.stdout and "<- best" in p.stdout
    res = json.loads((tmp_path / "cv.json").read_text())
    ref = sr.RankRLS().cross_validate(sr.GroupStore.open(data / "train.zarr"), alphas=np.geomspace(1e-2, 1e2, 5),
                                      folds="query", scoring="ndcg@10")
    np.testing.assert_allclose(res["scores"], ref.scores, rtol=1e-10)
    assert res["best_alpha"] == ref.best_alpha


# --------------------------------------------------------------- tuple stores
def test_sgd_bilinear_on_tuple_store(tmp_path):
    rng = np.random.default_rng(1)
    Q = sp.random(40, 16, density=0.3, random_state=2, format="csr")
    D = sp.random(60, 16, density=0.3, random_state=3, format="csr")
    t = np.column_stack([rng.integers(0, 40, 500), rng.integers(0, 60, 500), rng.integers(0, 60, 500)])
    ts = sr.TupleStore.create(tmp_path / "src.zarr", 16, 16)
    ts.append(Q, D, t, batch_id="day-1")
    ok(inproc("ingest", tmp_path / "src.zarr", "--store", tmp_path / "tuples.zarr", "--format", "zarr", "-q"))
    assert sr.TupleStore.open(tmp_path / "tuples.zarr").n_tuples == 500
    info = json.loads(ok(inproc("info", tmp_path / "tuples.zarr", "--json")).stdout)
    assert info["kind"] == "tuple" and info["tuples"] == 500 and info["query_features"] == 16
    ok(inproc("fit", "--store", tmp_path / "tuples.zarr", "--model", tmp_path / "w.zarr", "--learner",
              "sgd-bilinear", "--steps", 500, "--eta0", 1.0, "--l1", 1e-3, "--checkpoint-every", 100,
              "--validation", tmp_path / "tuples.zarr", "-q"))
    m = sr.load(tmp_path / "w.zarr")
    assert m.t_ == 500 and len(m.history_) >= 5
    got = json.loads(ok(inproc("evaluate", "--model", tmp_path / "w.zarr", "--store", tmp_path / "tuples.zarr",
                               "--json")).stdout)["metrics"]["tuple_error"]
    stored = sr.TupleStore.open(tmp_path / "tuples.zarr")         # features as stored (float32)
    Qs, Dp, Dn = stored.Q[t[:, 0]], stored.D[t[:, 1]], stored.D[t[:, 2]]
    assert got == pytest.approx(np.mean(m.predict(Qs, Dp) <= m.predict(Qs, Dn)))
    ok(inproc("predict", "--model", tmp_path / "w.zarr", "--store", tmp_path / "tuples.zarr",
              "--out", tmp_path / "t.npy", "-q"))
    np.testing.assert_array_equal(np.load(tmp_path / "t.npy"), np.column_stack([m.predict(Qs, Dp), m.predict(Qs, Dn)]))
    # --normalize: scale-only scales of the stored query / item vectors, applied by predict
    ok(inproc("fit", "--store", tmp_path / "tuples.zarr", "--model", tmp_path / "wn.zarr", "--learner",
              "sgd-bilinear", "--steps", 300, "--eta0", 1.0, "--l1", 1e-3, "--normalize", "minmax", "-q"))
    mn = sr.load(tmp_path / "wn.zarr")
    A, B = stored.Q.toarray().astype(np.float64), stored.D.toarray().astype(np.float64)
    np.testing.assert_allclose(mn.query_normalizer_.scale, A.max(0) - A.min(0), rtol=1e-12)
    np.testing.assert_allclose(mn.item_normalizer_.scale, B.max(0) - B.min(0), rtol=1e-12)
    np.testing.assert_allclose(mn.predict(Qs, Dp), np.einsum(
        "ij,jk,ik->i", Qs.toarray() / mn.query_normalizer_.scale, mn.W_.toarray(),
        Dp.toarray() / mn.item_normalizer_.scale), rtol=1e-10, atol=1e-12)
    # a tuple learner on a scored-group store (and the reverse) is a clear data error
    g = sr.GroupStore.create(tmp_path / "g.zarr", 3)
    g.append(np.ones((4, 3)), [1, 0, 1, 0], [1, 1, 2, 2])
    p = inproc("fit", "--store", tmp_path / "g.zarr", "--model", tmp_path / "x.zarr", "--learner", "sgd-bilinear")
    assert p.returncode == 4 and "tuple store" in p.stderr
    p = inproc("plot", "--model", tmp_path / "w.zarr", "--out", tmp_path / "lc.png")
    try:
        from streamrank.plot import learning_curve  # noqa: F401
    except ImportError:
        assert p.returncode == 6
    else:
        ok(p)
        assert (tmp_path / "lc.png").stat().st_size > 1000


# ---------------------------------------------------------- progress / quiet
def test_progress_lines_when_not_a_tty(data, tmp_path):
    p = ok(run("fit", "--store", data / "train.zarr", "--model", tmp_path / "a.zarr", "--learner", "rankrls",
               "--max-rows", 100, env={"STREAMRANK_PROGRESS_SECONDS": "0"}))
    lines = [s for s in p.stderr.splitlines() if s.startswith("streamrank fit rankrls")]
    assert len(lines) >= 3, p.stderr                          # one per block of <= 100 rows, and a final one
    assert "rows/s" in lines[0] and "ETA" in lines[0] and "%" in lines[0]
    assert "\r" not in p.stderr and "\x1b[" not in p.stderr      # no bar control codes in a log
    q = ok(inproc("fit", "--store", data / "train.zarr", "--model", tmp_path / "b.zarr", "--learner", "rankrls",
                  "--quiet", env={"STREAMRANK_PROGRESS_SECONDS": "0"}))
    assert q.stderr == "" and "fitted" in q.stdout


def test_progress_uses_tqdm_on_a_tty():
    import io

    from streamrank.cli._progress import Progress

    class TTY(io.StringIO):
        def isatty(self):
            return True

    s = TTY()
    with Progress(100, desc="fit", stream=s) as bar:
        for _ in range(4):
            bar.update(25)
    assert bar._bar is not None and "100/100" in s.getvalue() and "\r" in s.getvalue()
    s2 = TTY()
    with Progress(100, desc="fit", stream=s2, quiet=True) as bar:
        bar.update(100)
    assert s2.getvalue() == ""


# ----------------------------------------------------------------- errors
def _one_line(p):
    lines = [s for s in p.stderr.splitlines() if s.strip()]
    assert len(lines) == 1, p.stderr
    return lines[0]


@pytest.mark.parametrize("args,code,words", [
    (["fit", "--store", "{d}/nope.zarr", "--model", "{t}/m.zarr", "--learner", "rankrls"], 3, "does not exist"),
    (["ingest", "{d}/nope.txt", "--store", "{t}/s.zarr"], 3, "does not exist"),
    (["ingest", str(ARCHIVE) + ":MQ2008/Fold9/train.txt", "--store", "{t}/s.zarr"], 3, "no member"),
    (["fit", "--store", "{d}/train.zarr", "--model", "{t}/m.zarr", "--learner", "xgboost"], 2, "invalid choice"),
    (["ingest", "{d}/m.zarr/zarr.json", "--store", "{t}/s.zarr", "--format", "npz"], 4, "not a .npz"),
    (["ingest", "{d}/m.zarr/zarr.json", "--store", "{t}/s.zarr"], 4, "zarr.json:1"),
    (["ingest", "{d}/m.zarr/zarr.json", "--store", "{t}/s.zarr", "--format", "zarr"], 4, "not a zarr store"),
    (["evaluate", "--model", "{d}/train.zarr", "--store", "{d}/test.zarr"], 4, "not a model"),
    (["evaluate", "--model", "{d}/m.zarr", "--store", "{d}/m.zarr"], 4, "not a store"),
    (["fit", "--store", "{d}/train.zarr", "--model", "{t}/m.zarr", "--learner", "rankrls", "--alphas", "1:x"], 2,
     "bad GRID"),
    (["fit", "--store", "{d}/train.zarr", "--model", "{t}/m.zarr", "--learner", "cg", "--alphas", "1,2",
      "--cv", "query"], 6, "needs --learner rankrls"),
    (["predict", "--model", "{d}/m.zarr", "--store", "{d}/test.zarr", "--out", "{t}/s.csv"], 2, ".npy or .zarr"),
    (["fit", "--store", "{d}/train.zarr", "--model", "{d}/test.zarr", "--learner", "rankrls"], 5, "refusing"),
])
def test_documented_errors(data, rankrls_model, tmp_path, args, code, words):
    argv = [a.format(d=data, t=tmp_path) for a in args]
    # most cases in-process (the same code path as the console script), a few as real subprocesses below
    p = run(*argv) if code in (3, 5) else None
    if p is not None:
        assert p.returncode == code, p.stderr
        line = _one_line(p)
    else:
        p = inproc(*argv)
        assert p.returncode == code, p.stderr
        line = _one_line(p)
    assert line.startswith("streamrank ") and words in line, line
    assert "Traceback" not in line


def test_model_format_errors_and_verbose(data, rankrls_model, tmp_path):
    newer = tmp_path / "newer.zarr"
    shutil.copytree(rankrls_model, newer)
    doc = json.loads((newer / "zarr.json").read_text())
    doc["attributes"]["format_version"] = 99
    (newer / "zarr.json").write_text(json.dumps(doc))
    p = run("evaluate", "--model", newer, "--store", data / "test.zarr")
    assert p.returncode == 4 and "upgrade streamrank" in _one_line(p)
    corrupt = tmp_path / "corrupt.zarr"
    shutil.copytree(rankrls_model, corrupt)
    shutil.rmtree(corrupt / "coef_")
    p = run("predict", "--model", corrupt, "--store", data / "test.zarr", "--out", tmp_path / "s.npy", "--verbose")
    assert p.returncode == 4 and "Traceback" in p.stderr and "missing or damaged" in p.stderr.splitlines()[-1]
    assert not (tmp_path / "s.npy").exists()


def test_help_on_every_subcommand(capsys):
    p = ok(run("--help"))
    assert "exit codes" in p.stdout and all(c in p.stdout for c in ("ingest", "fit", "evaluate", "plot"))
    for command in ("ingest", "info", "fit", "evaluate", "predict", "cv", "plot"):
        assert cli.main([command, "--help"]) == 0
        out = capsys.readouterr().out
        assert "examples:" in out and f"streamrank {command}" in out, command


def test_grid_syntax():
    np.testing.assert_allclose(cli.parse_grid("2^-2:2^2"), [0.25, 0.5, 1, 2, 4])
    # LO:HI:N is N log-spaced values, whatever LO and HI look like (issue 24: 10^-3:10^3:7 gave 0.001, 10000)
    np.testing.assert_allclose(cli.parse_grid("10^-3:10^3:7"), 10.0 ** np.arange(-3, 4), rtol=1e-12)
    np.testing.assert_allclose(cli.parse_grid("2^-4:2^4:3"), [1 / 16, 1, 16])
    np.testing.assert_allclose(cli.parse_grid("2^-4:2^4:4"), 2.0 ** np.array([-4, -4 / 3, 4 / 3, 4]))
    np.testing.assert_allclose(cli.parse_grid("10^-1:10^1"), [0.1, 1, 10])
    np.testing.assert_allclose(cli.parse_grid("0.01:100:5"), [0.01, 0.1, 1, 10, 100])
    np.testing.assert_allclose(cli.parse_grid("3:3:1"), [3.0])
    np.testing.assert_allclose(cli.parse_grid("0.5, 2^3,7"), [0.5, 8, 7])
    assert cli.parse_grid("10^-3:10^3:7").max() == 1000.0 and cli.parse_grid("10^-3:10^3:7").min() == 0.001
    for bad in ("", "1:2", "-1,2", "2^a:2^3", "0:1:3", "2^1:3^2", "nan", "1:10:2.5", "1:10:0", "10:1:3",
                "2^3:2^1", "2^-1.5:2^2", "1:2:3:4", "1:10:1", "0.001:inf:3"):
        with pytest.raises(cli.UsageError, match="LO:HI:N"):
            cli.parse_grid(bad)
    p = inproc("cv", "--store", "x.zarr", "--learner", "rankrls", "--alphas", "10^-3:10^3:2.5")
    assert p.returncode == 2 and "N is a count" in p.stderr


# ---------------------------------------------------------------- Ctrl-C
def _interrupt_after_progress(argv, env, lines=2, timeout=120, sig=signal.SIGINT):
    """Start the CLI, wait for ``lines`` progress lines on stderr, send ``sig``; return (rc, stderr)."""
    e = dict(os.environ, STREAMRANK_PROGRESS_SECONDS="0", **env)
    args, kw = _forked_cli(argv, e)
    proc = _FORKS[0].popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    seen = []
    t0 = time.monotonic()
    try:
        while len([s for s in seen if s.startswith("streamrank ")]) < lines:
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            assert time.monotonic() - t0 < timeout
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, "".join(seen) + err


def test_sigint_during_fit_leaves_no_model(data, rankrls_model, tmp_path):
    slow = {"_STREAMRANK_TEST_SLEEP": "0.05"}
    argv = ["fit", "--store", data / "train.zarr", "--learner", "cg", "--max-rows", 20, "--tol", "1e-12"]
    rc, err = _interrupt_after_progress(argv + ["--model", tmp_path / "new.zarr"], slow)
    assert rc == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []                     # no model, no temporary directory
    rc, err = _interrupt_after_progress(argv + ["--model", tmp_path / "new.zarr"], slow, lines=1, sig=signal.SIGTERM)
    assert rc == 143 and "terminated" in err, err
    assert list(tmp_path.iterdir()) == []
    # over an existing model (--overwrite): the old one stays, whole
    shutil.copytree(rankrls_model, tmp_path / "old.zarr")
    rc, err = _interrupt_after_progress(argv + ["--model", tmp_path / "old.zarr", "--overwrite"], slow)
    assert rc == 130, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.zarr"]
    X = np.ones((3, 46))
    np.testing.assert_array_equal(sr.load(tmp_path / "old.zarr").predict(X), sr.load(rankrls_model).predict(X))


def test_sigint_during_ingest_then_resume(tmp_path):
    # ~15 chunks of 0.03 MB, 0.2 s each in the killed run: the signal comes after 3, with ~12 (2.4 s) to go
    argv = ["ingest", TRAIN, "--limit", 800, "--chunk-mb", 0.03]
    rc, err = _interrupt_after_progress(argv + ["--store", tmp_path / "s.zarr"], {"_STREAMRANK_TEST_SLEEP": "0.2"},
                                        lines=3)
    assert rc == 130, err
    part = sr.GroupStore.open(tmp_path / "s.zarr")
    assert part.verify() == len(part.batches) >= 1             # the store is at a commit, checksums hold
    n_part = part.n_rows
    # running the same command again continues (committed chunks are skipped by batch id)
    p = ok(inproc(*argv, "--store", tmp_path / "s.zarr", "-q"))
    assert "already in the store" in p.stdout
    ok(inproc(*argv, "--store", tmp_path / "ref.zarr", "-q"))
    a, b = sr.GroupStore.open(tmp_path / "s.zarr"), sr.GroupStore.open(tmp_path / "ref.zarr")
    assert a.n_rows == b.n_rows > n_part and a.n_groups == b.n_groups
    np.testing.assert_array_equal(np.concatenate([x.X for x in a.blocks()]), np.concatenate([x.X for x in b.blocks()]))
    np.testing.assert_array_equal(a.qid, b.qid)


def test_tqdm_bar_on_a_terminal(data, rankrls_model, tmp_path):
    """With stderr on a pseudo-terminal the progress is a tqdm bar (carriage returns, rate, 100%)."""
    import pty

    master, slave = pty.openpty()
    try:
        e = dict(os.environ)
        e.pop("STREAMRANK_PROGRESS_SECONDS", None)
        proc = subprocess.Popen(_cmd() + ["evaluate", "--model", str(data / "m.zarr"), "--store",
                                          str(data / "test.zarr"), "--max-rows", "100"],
                                stdout=subprocess.PIPE, stderr=slave, env=e)
        os.close(slave)
        slave = None
        chunks = []
        while True:
            try:
                b = os.read(master, 4096)
            except OSError:       # EIO: the child closed the terminal
                break
            if not b:
                break
            chunks.append(b)
        out, _ = proc.communicate(timeout=120)
    finally:
        os.close(master)
        if slave is not None:
            os.close(slave)
    tty = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, tty
    assert "\r" in tty and "evaluate" in tty and "100%" in tty and "rows/s" in tty, tty
    assert b"ndcg@10" in out


def test_model_swap_defers_ctrl_c(tmp_path):
    """Replacing a model takes two renames; a Ctrl-C between them is held until both are done."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old").write_text("old")
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "new").write_text("new")
    real_replace = os.replace
    calls = []

    def replace_and_interrupt(a, b):
        calls.append((a, b))
        real_replace(a, b)
        if len(calls) == 1:           # after moving the old model aside
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)

    cli.os.replace = replace_and_interrupt
    try:
        with pytest.raises(KeyboardInterrupt):
            cli._replace_dir(tmp_path / "new", tmp_path / "out")
    finally:
        cli.os.replace = real_replace
    assert len(calls) == 2 and (tmp_path / "out" / "new").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_cli_model_write_sweeps_what_a_killed_write_left(tmp_path):
    """A CLI write killed with -9 leaves pid-tagged siblings; sr.load reads the .old copy, the next write
    sweeps both (the leftovers of a live writer are kept)."""
    import subprocess

    import streamrank as sr
    from streamrank.cli._atomic import _save_model

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    out = tmp_path / "model"
    m = sr.RankRLS(alpha=2.0).fit(np.eye(4), np.arange(4.0), np.zeros(4, int))
    _save_model(m, out, {"command": "fit"})
    old = tmp_path / f".model.{dead}-0.old"           # killed between its two renames
    os.replace(out, old)
    partial = tmp_path / f".model.{dead}-1.partial"   # killed while writing
    partial.mkdir()
    live = tmp_path / f".model.{os.getpid()}-2.partial"
    live.mkdir()
    assert sr.load(out).alpha == 2.0                  # out is missing: the .old copy is read
    _save_model(sr.RankRLS(alpha=3.0).fit(np.eye(4), np.arange(4.0), np.zeros(4, int)), out, {"command": "fit"})
    assert sr.load(out).alpha == 3.0
    assert not old.exists() and not partial.exists() and live.exists()

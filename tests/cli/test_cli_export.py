"""``streamrank fit --normalize`` and ``streamrank export`` on a MQ2008 slice, as a user runs them."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from _cli_inproc import run_cli

import streamrank as sr
from streamrank.datasets._paths import data_path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "reference"))
from ltr_scorers import score_opensearch, score_solr  # noqa: E402

ARCHIVE = data_path("letor", "MQ2008_QueryLevelNorm.tar.gz")
pytestmark = pytest.mark.skipif(not ARCHIVE.exists(), reason="MQ2008 archive not available")
NAMES = [f"f{j}" for j in range(1, 47)]


run = run_cli   # (exit code, stdout, stderr) of cli.main in this process


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli_export")
    for split, rows in (("train", 1500), ("test", 800)):
        rc, _, err = run("ingest", f"{ARCHIVE}:MQ2008/Fold1/{split}.txt", "--store", d / f"{split}.zarr",
                         "--limit", rows, "-q")
        assert rc == 0, err
    return d


def _test_rows(d):
    store = sr.GroupStore.open(d / "test.zarr")
    X = np.vstack([b.X for b in store.blocks()]).astype(np.float32)
    return X, np.repeat(store.qid, np.diff(store.group_ptr))


@pytest.mark.parametrize("learner,fmt", [("rankrls", "opensearch"), ("cg", "solr"), ("sgd-pairwise", "elasticsearch")])
def test_fit_normalized_then_export_serves_like_predict(stores, tmp_path, learner, fmt):
    model_path = tmp_path / "m.zarr"
    alpha = [] if learner.startswith("sgd") else ["--alpha", "1"]     # sgd-pairwise takes --l1/--l2, no --alpha
    rc, _, err = run("fit", "--store", stores / "train.zarr", "--model", model_path, "--learner", learner,
                     "--normalize", "minmax", *alpha, "-q")
    assert rc == 0, err
    (tmp_path / "names.txt").write_text("\n".join(NAMES) + "\n")
    rc, out, err = run("export", "--model", model_path, "--format", fmt, "--out", tmp_path / "m.json",
                       "--feature-names", f"@{tmp_path / 'names.txt'}", "--name", "mq")
    assert rc == 0, err
    assert "wrote" in out
    doc = json.loads((tmp_path / "m.json").read_text())
    X, qid = _test_rows(stores)
    model = sr.load(model_path)
    assert model.normalizer_.kind == "minmax"
    score = score_solr if fmt == "solr" else score_opensearch
    served = score(doc, NAMES, X)
    expected = model.predict(X)
    assert np.abs(served - expected).max() <= 1e-5 * np.abs(expected).max()


def test_export_refusals_are_one_line_with_exit_6(stores, tmp_path):
    model_path = tmp_path / "k.zarr"
    rc, _, err = run("fit", "--store", stores / "train.zarr", "--model", model_path, "--learner", "sparse-kernel",
                     "--n-basis", "20", "--gamma", "0.1", "-q")
    assert rc == 0, err
    rc, _, err = run("export", "--model", model_path, "--format", "solr", "--out", tmp_path / "k.json")
    assert rc == 6 and err.count("\n") == 1 and "format='onnx' or 'json'" in err
    rc, _, err = run("export", "--model", tmp_path / "missing.zarr", "--format", "json", "--out", tmp_path / "x")
    assert rc == 3
    rc, _, err = run("fit", "--store", stores / "train.zarr", "--model", model_path, "--learner", "rankrls",
                     "--overwrite", "-q")
    rc, _, err = run("export", "--model", model_path, "--format", "opensearch", "--out", tmp_path / "m.json")
    assert rc == 6 and "feature names" in err and not (tmp_path / "m.json").exists()


def test_export_onnx_from_the_console_script(stores, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    model_path = tmp_path / "k.zarr"
    rc, _, err = run("fit", "--store", stores / "train.zarr", "--model", model_path, "--learner", "kernel",
                     "--gamma", "0.05", "--normalize", "standard", "-q")
    assert rc == 0, err
    script = Path(sys.executable).parent / "streamrank"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "streamrank.cli"]
    p = subprocess.run(cmd + ["export", "--model", str(model_path), "--format", "onnx", "--out",
                              str(tmp_path / "k.onnx")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    X, _ = _test_rows(stores)
    got = ort.InferenceSession(str(tmp_path / "k.onnx")).run(None, {"X": X})[0]
    expected = sr.load(model_path).predict(X)
    assert np.abs(got - expected).max() <= 1e-5 * np.abs(expected).max()


def test_cv_fit_keeps_the_stores_names_and_export_names_the_cli_option(tmp_path, monkeypatch):
    """A model chosen by ``fit --alphas --cv`` keeps the store's feature names (as a plain fit does); a model
    without names is refused by ``export`` with the command's own option, not the Python keyword."""
    from streamrank.datasets.synthetic import make_letor_like

    monkeypatch.chdir(tmp_path)
    X, y, qid = make_letor_like(n_rows=400, n_features=3, random_state=0)
    sr.GroupStore.create("named.zarr", 3, feature_names=["a", "b", "c"]).append(X, y, qid, batch_id="d")
    sr.GroupStore.create("plain.zarr", 3).append(X, y, qid, batch_id="d")
    for store in ("named", "plain"):
        rc, _, err = run("fit", "--store", f"{store}.zarr", "--model", f"{store}-m.zarr", "--learner", "rankrls",
                         "--alphas", "0.1,1,10", "--cv", "2", "-q")
        assert rc == 0, err
    assert list(sr.load("named-m.zarr").feature_names_in_) == ["a", "b", "c"]
    rc, _, err = run("export", "--model", "named-m.zarr", "--format", "solr", "--out", "named.json", "-q")
    assert rc == 0, err
    rc, _, err = run("export", "--model", "plain-m.zarr", "--format", "solr", "--out", "plain.json")
    assert rc == 6 and "--feature-names" in err and "feature_names=[" not in err, err

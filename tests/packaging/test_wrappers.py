"""The checkout's ``pipelines/*.py`` and ``data_recipes/*.py`` are thin wrappers of the package's commands, and
run as scripts (issue 24: ``python pipelines/distributed.py ...`` failed with "cannot import name 'Client' from
'distributed'": the script's folder was sys.path[0] and its name shadowed dask's package)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import streamrank as sr

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_every_wrapper_names_a_package_module():
    import importlib

    for folder, package in (("pipelines", "streamrank.pipelines"), ("data_recipes", "streamrank.recipes")):
        for script in sorted((REPO / folder).glob("*.py")):
            text = script.read_text()
            assert f"from {package}.{script.stem} import main" in text, script
            assert len(text.splitlines()) < 20, f"{script} is a wrapper, not a second copy"
            assert callable(importlib.import_module(f"{package}.{script.stem}").main)


@pytest.mark.distributed
def test_distributed_script_runs_a_cluster_fit(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    store = sr.GroupStore.create(tmp_path / "s.zarr", 3)
    store.append(X, X @ [1.0, -1.0, 0.5], np.repeat(np.arange(6), 10), batch_id="b")
    r = subprocess.run([sys.executable, str(REPO / "pipelines" / "distributed.py"), "--store", "s.zarr",
                        "--model", "m.zarr", "--workers", "1", "--learner", "rankrls"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    np.testing.assert_allclose(sr.load(tmp_path / "m.zarr").coef_, sr.RankRLS(alpha=1.0).fit(store).coef_,
                               rtol=1e-8, atol=1e-10)


def test_recipe_script_runs(tmp_path):
    r = subprocess.run([sys.executable, str(REPO / "data_recipes" / "synthetic.py"), "--rows", "200",
                        "--features", "3", "--out", "x.zarr"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert sr.GroupStore.open(tmp_path / "x.zarr").n_rows == 200

"""Written files follow the umask (issue 35): stores, models, exports, runs, judgments, scores and plots are
0644 (directories 0755) under umask 022 and 0640 under 027, atomic writes included (a temporary file made by
``tempfile.mkstemp`` is 0600 whatever the umask, and the rename kept that)."""
from __future__ import annotations

import os
import stat

import pytest

from _cli_inproc import run_cli

import streamrank as sr
from streamrank.datasets.synthetic import make_letor_like


@pytest.fixture
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _modes(root):
    return {str(p.relative_to(root)): (p.is_dir(), stat.S_IMODE(p.lstat().st_mode)) for p in root.rglob("*")}


@pytest.mark.parametrize("umask", [0o022, 0o027], indirect=True)
def test_every_writer_follows_the_umask(tmp_path, umask, monkeypatch):
    monkeypatch.chdir(tmp_path)
    X, y, qid = make_letor_like(n_rows=300, n_features=3, random_state=0)
    store = sr.GroupStore.create(tmp_path / "s.zarr", n_features=3, feature_names=["a", "b", "c"], docids=True)
    store.append(X, y, qid, batch_id="day-1", docid=[f"d{i}" for i in range(len(y))])
    model = sr.RankRLS(alpha=1.0).fit(store)
    sr.save(model, tmp_path / "m.zarr")
    sr.export(model, tmp_path / "m.json", format="opensearch")
    for argv in (["fit", "--store", "s.zarr", "--model", "m2.zarr", "--learner", "rankrls", "--alphas", "0.1,1,10",
                  "--cv", "2", "-q"],
                 ["export", "--model", "m2.zarr", "--format", "solr", "--out", "solr.json", "-q"],
                 ["predict", "--model", "m.zarr", "--store", "s.zarr", "--out", "scores.npy", "-q"],
                 ["predict", "--model", "m.zarr", "--store", "s.zarr", "--out", "scores.zarr", "--run", "run.txt",
                  "--qrels", "qrels.txt", "-q"]):
        rc, _, err = run_cli(*argv)
        assert rc == 0, (argv, err)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pass
    else:
        rc, _, err = run_cli("plot", "--model", "m2.zarr", "--out", "path.png", "-q")
        assert rc == 0 and (tmp_path / "path.png").is_file(), err
    modes = _modes(tmp_path)
    for name in ("m.json", "solr.json", "run.txt", "qrels.txt", "scores.npy", "m.zarr/zarr.json",
                 "s.zarr/zarr.json", "scores.zarr/zarr.json"):
        assert name in modes, name
    bad = {n: oct(m) for n, (is_dir, m) in modes.items() if m != (0o777 if is_dir else 0o666) & ~umask}
    assert not bad, bad

"""sr.plot.regularization_path and sr.plot.nightly_history write non-empty PNGs of the expected size."""
from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

import numpy as np
import pytest

from _cli_inproc import run_cli

import streamrank as sr

# skipped without matplotlib, which is not imported at collection (~0.5 CPU-s in every pytest process)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs matplotlib")
ROOT = Path(__file__).resolve().parents[2]


def _png(path):
    import matplotlib.image as mpimg

    path = Path(path)
    assert path.is_file() and path.stat().st_size > 2000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = mpimg.imread(path)
    assert img[..., :3].std() > 0.01          # something is drawn
    return img.shape[:2]


@pytest.mark.slow   # a regularization path fit and a matplotlib render: ~2 CPU-s
def test_regularization_path_png(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 5))
    qid = np.repeat(np.arange(12), 10)
    y = X @ rng.normal(size=5) + rng.normal(size=120)
    m = sr.RankRLS()
    res = m.cross_validate(sr.as_source(X, y, qid), alphas=2.0 ** np.arange(-6, 7), folds=4)
    fig = sr.plot.regularization_path(res, tmp_path / "path.png")
    assert _png(tmp_path / "path.png") == (400, 640)       # figsize (6.4, 4.0) at 100 dpi
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    # the chosen λ is marked: a vertical line at best_alpha and a star on its score
    xs = [line.get_xdata() for line in ax.get_lines()]
    assert any(np.allclose(x, res.best_alpha) for x in xs)
    # the CLI's stored record (a dict) draws the same, at any size
    rec = {"alphas": list(res.alphas), "scores": list(res.scores), "best_alpha": res.best_alpha,
           "scoring": res.scoring, "greater_is_better": res.greater_is_better, "folds": 4}
    sr.plot.regularization_path(rec, tmp_path / "small.png", figsize=(3.0, 2.0), dpi=150)
    assert _png(tmp_path / "small.png") == (300, 450)
    with pytest.raises(ValueError, match="equally long"):
        sr.plot.regularization_path({"alphas": [1, 2], "scores": [1.0]})


def _nightly():
    from streamrank.pipelines import nightly

    return nightly


def _day(tmp_path, day):
    rng = np.random.default_rng(day)
    sizes = rng.integers(3, 9, 10)
    qid = np.repeat(np.arange(day * 100, day * 100 + 10), sizes)
    X = rng.normal(size=(len(qid), 4))
    y = np.round(X @ [1.0, -0.5, 0.25, 0.0] + 0.5 * rng.normal(size=len(qid)))
    path = tmp_path / f"day{day}.npz"
    np.savez(path, X=X, y=y, qid=qid)
    return path


@pytest.mark.slow   # several nightly runs and a matplotlib render: ~2 CPU-s
def test_nightly_history_png(tmp_path):
    nightly = _nightly()
    models, store = tmp_path / "models", tmp_path / "store.zarr"
    for day in (1, 2, 3, 4):
        nightly.run_night(store, [_day(tmp_path, day)], models, alphas=[0.1, 1.0, 10.0], plot=False,
                          out=io.StringIO(), tolerance=0.5 if day != 3 else -1.0)
    nightly.run_night(store, [_day(tmp_path, 4)], models, alphas=[0.1, 1.0, 10.0], plot=False,
                      out=io.StringIO())                     # nothing new: an "up-to-date" run
    fig = sr.plot.nightly_history(models, tmp_path / "nights.png")
    assert _png(tmp_path / "nights.png") == (500, 800)      # figsize (8, 5) at 100 dpi
    top, bottom = fig.axes
    assert bottom.get_yscale() == "log"                      # chosen λ per night
    assert {t.get_text() for t in top.get_legend().get_texts()} >= {"ndcg@10", "disagreement"}
    # the command line draws it from the directory
    from streamrank import cli

    rc = cli.main(["plot", "--model", str(models), "--out", str(tmp_path / "cli.png"), "-q",
                   "--width", "600", "--height", "300"])
    assert rc == 0 and _png(tmp_path / "cli.png") == (300, 600)
    # the nightly 'current' pointer works wherever a model path is expected

    def run(*argv):
        rc, out, err = run_cli(*argv)
        assert rc == 0, err
        return json.loads(out)

    info = run("info", models / "current", "--json")
    ev = run("evaluate", "--model", models / "current", "--store", store, "--json", "-q")
    assert info["class"] == "RankRLS" and info["kind"] == "model"
    assert 0 < ev["metrics"]["ndcg@10"] <= 1


def test_nightly_history_names_a_weighted_lines_scoring():
    """A weighted line's reports (``validation.weighted``) are drawn as such; an unweighted line's names are bare."""
    pytest.importorskip("matplotlib")

    def report(i, weighted=None):
        v = {"scheme": "holdout", **({"weighted": weighted} if weighted else {})}
        return {"started": f"2026-01-0{i}", "status": "promoted", "promoted": True, "alpha": 1.0,
                "metrics": {"ndcg@10": 0.5 + i / 100}, "current_metrics": {"ndcg@10": 0.5}, "validation": v}

    labels = lambda fig: {t.get_text() for t in fig.axes[0].get_legend().get_texts()}   # noqa: E731
    assert labels(sr.plot.nightly_history([report(1, "ips-weighted"), report(2, "ips-weighted")])) == {
        "ndcg@10 (ips-weighted)", "ndcg@10 (ips-weighted) (current model)"}
    assert labels(sr.plot.nightly_history([report(1), report(2)])) == {"ndcg@10", "ndcg@10 (current model)"}


@pytest.mark.slow   # nightly runs and plots (matplotlib): 5.5 s wall under load 13
def test_nightly_history_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        sr.plot.nightly_history(tmp_path / "nothing")
    (tmp_path / "reports").mkdir()
    with pytest.raises(ValueError, match="no nightly reports"):
        sr.plot.nightly_history(tmp_path)

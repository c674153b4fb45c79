"""``streamrank distributed`` tells its phases with honest counts (issue 24): the statistics tasks as they
finish on the workers, the reduction, the CV folds, the solve; cg its iterations against max_iter with the
residual against the tolerance; the sparse kernel its reservoir and kernel statistics.  A real LocalCluster
(the module's ``client``); the counts are checked against the run's own results, not hard-coded."""
from __future__ import annotations

import re

import pytest

import streamrank as sr
from streamrank.pipelines import distributed as pdist

from pipeline_data import make_store

pytestmark = [pytest.mark.distributed, pytest.mark.slow]   # a LocalCluster of 2 processes: ~1 min cold


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("dp") / "train.zarr", range(1, 7))


def _run(client, store, out, *extra):
    return pdist.main(["--store", str(store.path), "--model", str(out), "--scheduler", client.scheduler.address,
                       "--max-rows", "60", *extra])


def _counts(err, name):
    """Every ``done/total`` shown for the phase ``name`` (in order) and the total."""
    got = [(int(a), int(b)) for a, b in re.findall(re.escape(name) + r"[^:]*: (\d+)/(\d+) ", err)]
    assert got, f"no {name!r} phase in:\n{err}"
    totals = {b for _, b in got}
    assert len(totals) == 1, got
    return [a for a, _ in got], totals.pop()


def test_statistics_tasks_cv_folds_and_solve_are_reported(client, store, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("STREAMRANK_PROGRESS_SECONDS", "0")
    assert _run(client, store, tmp_path / "m", "--learner", "rankrls", "--alphas", "0.5,2,8", "--folds", "3") == 0
    err = capsys.readouterr().err
    done, total = _counts(err, "fold statistics (3 folds)")
    assert done == list(range(total + 1)) + [total]      # 0, 1, ..., total, then the closing line
    assert total >= 2                                     # 60-row blocks of a larger store: several tasks
    assert f"of {len(store.plan(60, split_groups=True))} blocks on 2 worker(s)" in err
    assert "tree reduction of" in err and "CV folds: 3/3 folds (100%)" in err
    assert err.index("fold statistics") < err.index("tree reduction") < err.index("CV folds") < err.index("solve (")
    assert re.search(r"solve \(\d+ features, alpha=[\d.]+\): done in", err)
    # --quiet: no progress line
    assert _run(client, store, tmp_path / "q", "--learner", "rankrls", "--quiet") == 0
    assert capsys.readouterr().err == ""


def test_cg_iterations_are_counted_against_max_iter_with_the_residual(client, store, tmp_path, capsys,
                                                                      monkeypatch):
    monkeypatch.setenv("STREAMRANK_PROGRESS_SECONDS", "0")
    assert _run(client, store, tmp_path / "cg", "--learner", "rankrls", "--solver", "cg", "--alpha", "0.5") == 0
    err = capsys.readouterr().err
    model = sr.load(tmp_path / "cg")
    done, total = _counts(err, "cg iterations")
    assert total == min(10 * store.n_features, 1000)     # solve_cg's default max_iter
    assert done[-1] == model.n_iter_ == max(done)         # the last count is the number of iterations run
    last = [s for s in err.splitlines() if "cg iterations" in s][-1]
    r, tol = map(float, re.search(r"\[residual (\S+), tol (\S+)\]", last).groups())
    assert r <= tol == model.tol                          # it stopped because it converged


def test_sparse_kernel_reservoir_kernel_statistics_and_solve(client, store, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("STREAMRANK_PROGRESS_SECONDS", "0")
    assert _run(client, store, tmp_path / "sk", "--learner", "sparse-kernel", "--n-basis", "15", "--gamma", "0.1",
                "--alpha", "0.5") == 0
    err = capsys.readouterr().err
    n_blocks = len(store.plan(60, split_groups=True))
    for name in ("basis reservoir (15 rows)", "kernel statistics (15 basis rows)"):
        done, total = _counts(err, name)
        assert total == n_blocks and done[-1] == total
    assert "solve (15 x 15): done in" in err

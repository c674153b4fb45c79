"""The nightly data checks (issue 36): a broken day is quarantined before it trains, named by its check.

Three good days of 300 queries x 12 documents (8 features, grades 0..3 from a linear rule), then a broken
day: labels 3 - y (the gate promoted it: it cost 0.0003 NDCG), a zeroed feature column, labels x 2, a
repeat of yesterday's rows under new query ids, a tenth of the rows.  Each is ingested (the store keeps
it), excluded, and named by its check; the good days after it are promoted; ``--readmit`` takes it back
and ``--force`` trains on it, both recorded with who and when.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from check_days import broken, good_day, save
from streamrank.pipelines import nightly
from streamrank.pipelines._nightly_check_rules import _psi
from streamrank.pipelines._nightly_checks import read_day_record
from streamrank.pipelines._nightly_profiles import _Moments, row_hashes

ALPHAS = "2^-4:2^8:7"
SCRIPT = Path(sys.executable).parent / "streamrank"


def _main(store, models, *args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = nightly.main(["--store", str(store), "--models", str(models), "--alphas", ALPHAS, "--no-plot",
                           *map(str, args)])
    return rc, out.getvalue(), err.getvalue()


def _report(models):
    return json.loads(sorted((models / "reports").glob("*.json"))[-1].read_text())


@pytest.fixture(scope="module")
def three_good(tmp_path_factory):
    """A store and models directory after three good nights (copied by each test)."""
    d = tmp_path_factory.mktemp("checks")
    store, models = d / "s.zarr", d / "m"
    for i in (1, 2, 3):
        rc, out, err = _main(store, models, "--new", save(d / f"d{i}.npz", good_day(i)))
        assert rc == 0 and "-> promoted" in out, (out, err)
    return d


def _copy(base, tmp):
    shutil.copytree(base / "s.zarr", tmp / "s.zarr")
    shutil.copytree(base / "m", tmp / "m")
    return tmp / "s.zarr", tmp / "m"


# ------------------------------------------------------------------ pieces
def test_row_hashes_are_the_same_for_dense_and_csr_rows_and_see_every_value():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 7)).astype(np.float32)
    X[rng.random(X.shape) < 0.4] = 0
    y = rng.integers(0, 3, 50).astype(float)
    h = row_hashes(X, y)
    assert np.array_equal(h, row_hashes(sp.csr_matrix(X), y))
    assert len(np.unique(h)) == 50
    X2 = X.copy()
    X2[3, 6] += 1
    y2 = y.copy()
    y2[4] += 1
    assert np.flatnonzero(row_hashes(X2, y) != h).tolist() == [3]
    assert np.flatnonzero(row_hashes(X, y2) != h).tolist() == [4]


def test_pooled_moments_equal_numpy_on_the_rows_joined():
    rng = np.random.default_rng(1)
    parts = [rng.normal(size=(n, 4)) * [1, 2, 0, 3] for n in (5, 17, 1)]
    m = _Moments(4)
    for p in parts[:2]:
        m.add(p)
    m.merge(_Moments.from_json(_roundtrip(_one(parts[2]))))
    X = np.vstack(parts)
    assert np.allclose(m.mean, X.mean(0)) and np.allclose(m.var, X.var(0))
    assert m.zeros.tolist() == (X == 0).sum(0).tolist() and np.array_equal(m.max, X.max(0))
    s = _Moments(4)
    s.add(sp.csr_matrix(X))
    assert np.allclose(s.mean, X.mean(0)) and np.allclose(s.var, X.var(0)) and np.array_equal(s.min, X.min(0))


def _one(X):
    m = _Moments(X.shape[1])
    m.add(X)
    return m.to_json()


def _roundtrip(doc):
    return json.loads(json.dumps(doc))


def test_psi_is_the_documented_sum():
    p, q = {"0.0": 50, "1.0": 50}, {"0.0": 80, "1.0": 20}
    a, b = np.array([0.5, 0.5]), np.array([0.8, 0.2])
    assert _psi(p, q) == pytest.approx(np.sum((a - b) * np.log(a / b)))
    assert _psi(p, p) == 0.0


# ------------------------------------------------------------------ the days
@pytest.mark.slow   # three runs of the console script: ~4 s
@pytest.mark.skipif(not SCRIPT.exists(), reason="needs the streamrank console script")
def test_cli_quarantines_the_inverted_day_promotes_the_next_and_readmits_it(three_good, tmp_path):
    """The issue's reproduction through the real command: exit 7 and one line, the day kept in the store."""
    store, models = _copy(three_good, tmp_path)
    env = dict(os.environ, PYTHONPATH=str(Path(nightly.__file__).parents[2]))

    def run(*args):
        return subprocess.run([str(SCRIPT), "nightly", "--store", str(store), "--models", str(models),
                               "--alphas", ALPHAS, "--no-plot", *map(str, args)],
                              capture_output=True, text=True, timeout=300, env=env)

    inverted = save(tmp_path / "d4_inverted.npz", broken("inverted", 4))
    n_before = sr.GroupStore.open(store).n_groups
    p = run("--new", inverted)
    assert p.returncode == 7, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("streamrank nightly: quarantined d4_inverted.npz (sha256:"), p.stderr
    assert "agreement 0." in lines[0] and "(threshold 0." in lines[0] and "ndcg@10 0." in lines[0], lines[0]
    assert "label_set" not in lines[0]           # grades 3 - y are the same set: only agreement sees it
    assert "; quarantined d4_inverted.npz (agreement)" in p.stdout and "current=v0003" in p.stdout
    rep = _report(models)
    assert set(rep["checks"]["days"][0]["checks"]) == {"schema", "label_set", "label_drift", "feature_drift",
                                                       "zero_fraction", "agreement", "volume", "duplicates"}
    by = rep["checks"]["days"][0]["checks"]
    assert by["agreement"]["status"] == "failed" and all(
        by[c]["status"] == "passed" for c in by if c != "agreement"), by
    day = rep["quarantined"][0]["day"]
    # nothing is lost: the day is in the store, excluded from training
    s = sr.GroupStore.open(store)
    assert s.n_groups == n_before + 300
    excl = json.loads((models / "excluded.json").read_text())["excluded"]
    assert [e["day"] for e in excl] == [day] and excl[0]["reason"] == "quarantined by the data checks: agreement"
    rec = read_day_record(models, day)
    assert rec["decision"] == "quarantined" and rec["agreement"]["model"] == "v0003"
    # the good day after it is promoted, trained without it
    p = run("--new", save(tmp_path / "d5.npz", good_day(5)))
    assert p.returncode == 0 and "-> promoted; current=v0004" in p.stdout, (p.stdout, p.stderr)
    v4 = json.loads((models / "v0004" / "version.json").read_text())
    assert v4["excluded"] == [day]
    # re-admitted by hand: recorded with who and when; the next night retrains with it
    p = run("--readmit", inverted)
    assert p.returncode == 0, p.stderr
    rep = _report(models)
    assert rep["readmitted"] == [day] and rep["overrides"][0]["action"] == "readmit"
    assert rep["overrides"][0]["user"] and rep["overrides"][0]["at"]
    assert "retrain" in rep
    rec = read_day_record(models, day)
    assert rec["readmitted"]["user"] == rep["overrides"][0]["user"]
    assert json.loads((models / "excluded.json").read_text())["excluded"] == []


@pytest.mark.parametrize("kind, check", [("zeroed", "zero_fraction"), ("rescaled", "label_set"),
                                         ("repeat", "duplicates"), ("tenth", "volume")])
def test_each_broken_day_is_caught_by_its_check(three_good, tmp_path, kind, check):
    store, models = _copy(three_good, tmp_path)
    yesterday = good_day(3)
    rc, out, err = _main(store, models, "--new", save(tmp_path / f"{kind}.npz", broken(kind, 4, yesterday)))
    assert rc == 7, (out, err)
    assert check in out.split("; quarantined ")[1], out
    assert f"{check} " in err or f"{check}:" in err, err
    rep = _report(models)
    failed = rep["quarantined"][0]["failed"]
    assert check in failed, failed
    res = rep["checks"]["days"][0]["checks"][check]
    assert res["status"] == "failed" and res["figure"] is not None and res["threshold"] is not None
    # the next good day is checked against the accepted days only, and promoted
    rc, out, err = _main(store, models, "--new", save(tmp_path / "d5.npz", good_day(5)))
    assert rc == 0 and "-> promoted; current=v0004" in out, (out, err)
    assert _report(models)["checks"]["days"][0]["decision"] == "accepted"


def test_force_trains_on_a_failing_day_and_records_who(three_good, tmp_path):
    store, models = _copy(three_good, tmp_path)
    rc, out, err = _main(store, models, "--new", save(tmp_path / "tenth.npz", broken("tenth", 4)), "--force")
    assert rc == 0 and "quarantined" not in out and "v0004" in out, (out, err)
    assert "; trained on tenth.npz despite its failed checks (volume: --force)" in out
    rep = _report(models)
    assert rep["checks"]["days"][0]["decision"] == "forced" and rep["checks"]["days"][0]["failed"] == ["volume"]
    assert rep["overrides"][0]["action"] == "force" and rep["overrides"][0]["user"]
    assert not (models / "excluded.json").exists()
    assert sr.load(models / "current").n_features_in_ == 8


def test_a_day_ingested_without_its_profile_is_profiled_from_the_store(three_good, tmp_path):
    """A night killed between the ingest and the checks: the re-run reads the day from the store once."""
    store, models = _copy(three_good, tmp_path)
    day = save(tmp_path / "inv.npz", broken("inverted", 4))
    nightly.ingest(store, [day])               # the ingest of a night that died before its checks
    rc, out, err = _main(store, models, "--new", day)
    assert rc == 7 and "agreement" in err, (out, err)
    rec = read_day_record(models, _report(models)["quarantined"][0]["day"])
    assert rec["profiled_from"].startswith("store")
    rc2, out2, err2 = _main(store, models, "--new", day)        # the same night again: still quarantined
    assert rc2 == 7 and err2 == err and "up to date" in out2


def test_no_checks_lets_the_day_through_to_the_gate(three_good, tmp_path):
    store, models = _copy(three_good, tmp_path)
    rc, out, err = _main(store, models, "--new", save(tmp_path / "inv.npz", broken("inverted", 4)), "--no-checks")
    assert rc == 0 and "-> promoted" in out, (out, err)    # the finding: the gate alone promotes it
    assert "checks" not in _report(models)


def test_bad_thresholds_are_usage_errors(tmp_path):
    with pytest.raises(SystemExit) as e, contextlib.redirect_stderr(io.StringIO()):
        nightly.main(["--store", str(tmp_path / "s"), "--models", str(tmp_path / "m"), "--new", "x.npz",
                      "--volume-ratio", "0.5"])
    assert e.value.code == 2


# ------------------------------------------------------------------ every learner line
@pytest.mark.slow   # five nights of each learner: ~3 s
@pytest.mark.parametrize("learner", ["sparse-kernel", "sgd-pairwise"])
def test_the_other_group_learners_quarantine_the_inverted_day(tmp_path, learner):
    store, models = tmp_path / "s.zarr", tmp_path / "m"
    extra = ["--learner", learner] + (["--n-basis", "60", "--gamma", "0.1"] if learner == "sparse-kernel" else [])
    for i in (1, 2, 3):
        rc, out, err = _main(store, models, "--new", save(tmp_path / f"d{i}.npz", good_day(i)), *extra)
        assert rc == 0 and "-> promoted" in out, (out, err)
    rc, out, err = _main(store, models, "--new", save(tmp_path / "inv.npz", broken("inverted", 4)), *extra)
    assert rc == 7 and "quarantined inv.npz (agreement)" in out and "current=v0003" in out, (out, err)
    rc, out, err = _main(store, models, "--new", save(tmp_path / "d5.npz", good_day(5)), *extra)
    assert rc == 0 and "-> promoted; current=v0004" in out, (out, err)
    assert len(nightly.read_version(models, "v0004")["excluded"]) == 1      # trained without the inverted day


@pytest.mark.slow   # five sgd-bilinear nights on MQ2008 tuple days: ~3 s
def test_sgd_bilinear_quarantines_inverted_and_repeated_tuple_days(tmp_path):
    from mq_days import ARCHIVE, read_queries, tuple_day

    if not ARCHIVE.exists():
        pytest.skip("MQ2008 archive not available")
    lines, starts = read_queries()
    store, models = tmp_path / "t.zarr", tmp_path / "m"
    args = ("--learner", "sgd-bilinear")
    for i in range(3):          # good days (the gate may reject one: SGD on 90 queries is noisy)
        rc, out, err = _main(store, models, "--new", tuple_day(tmp_path / f"t{i}.npz", lines, starts, 90 * i,
                                                               90 * i + 90), *args)
        assert rc == 0 and "quarantined" not in out, (out, err)
    inv = tuple_day(tmp_path / "inv.npz", lines, starts, 270, 360, invert=True)
    rc, out, err = _main(store, models, "--new", inv, *args)
    assert rc == 7 and "quarantined inv.npz (agreement)" in out, (out, err)
    assert "agreement 0." in err and "(threshold 0." in err and "disagreement 0." in err, err
    rep = _report(models)["checks"]["days"][0]
    assert rep["checks"]["label_set"]["status"] == "skipped" and rep["checks"]["volume"]["status"] == "passed"
    # yesterday's tuples again (a new file: the same content under another seed's sampling is not a copy)
    rep_day = tmp_path / "repeat.npz"
    with np.load(tmp_path / "t2.npz") as z:
        np.savez(rep_day, **{k: z[k] for k in z.files}, note=np.array([1]))   # other bytes, same tuples
    rc, out, err = _main(store, models, "--new", rep_day, *args)
    assert rc == 7 and "duplicates" in _report(models)["quarantined"][0]["failed"], (out, err)
    assert "duplicates 1 (threshold 0.5" in err
    rc, out, err = _main(store, models, "--new", tuple_day(tmp_path / "t4.npz", lines, starts, 360, 450), *args)
    assert rc == 0 and _report(models)["checks"]["days"][0]["decision"] == "accepted", (out, err)


# ------------------------------------------------------------------ real days
@pytest.mark.slow   # five MQ2008 nights and an inverted one: ~3 s
def test_mq2008_s1_to_s5_as_five_days_are_all_accepted_and_an_inverted_s5_is_not(tmp_path):
    from mq_days import ARCHIVE, read_queries, text_day

    if not ARCHIVE.exists():
        pytest.skip("MQ2008 archive not available")
    store, models = tmp_path / "s.zarr", tmp_path / "m"
    files = []
    for i in range(1, 6):
        lines, starts = read_queries(f"MQ2008/S{i}.txt")
        files.append(text_day(tmp_path / f"S{i}.txt", lines, starts, 0, len(starts) - 1))
    inverted = text_day(tmp_path / "S5_inverted.txt", lines, starts, 0, len(starts) - 1, invert=True)
    for f in files[:4]:
        rc, out, err = _main(store, models, "--new", f)
        assert rc == 0 and "-> promoted" in out, (out, err)
    shutil.copytree(store, tmp_path / "s4.zarr")
    shutil.copytree(models, tmp_path / "m4")
    rc, out, err = _main(store, models, "--new", files[4])
    assert rc == 0 and "-> promoted" in out, (out, err)
    reports = sorted((models / "reports").glob("*.json"))
    decisions = [d["decision"] for r in reports for d in json.loads(r.read_text())["checks"]["days"]]
    assert decisions == ["accepted"] * 5
    rc, out, err = _main(tmp_path / "s4.zarr", tmp_path / "m4", "--new", inverted)
    assert rc == 7 and "agreement" in err, (out, err)


@pytest.mark.slow   # a night with both plots (matplotlib): ~2.5 s
def test_checks_png_shows_every_day_and_marks_the_quarantined_one(three_good, tmp_path):
    pytest.importorskip("matplotlib")
    store, models = _copy(three_good, tmp_path)
    rep = nightly.run_night(store, [save(tmp_path / "zeroed.npz", broken("zeroed", 4))], models,
                            alphas=[1.0, 16.0], out=io.StringIO())
    assert rep["quarantined"] and (models / "checks.png").stat().st_size > 0 and (models / "metrics.png").exists()
    fig = sr.plot.nightly_checks_history(models)
    top, bottom = fig.axes
    labels = {t.get_text() for t in top.get_legend().get_texts()}
    assert labels >= {"feature_drift", "zero_fraction", "label_drift", "duplicates", "volume"}
    zero = next(ln for ln in top.get_lines() if ln.get_label() == "zero_fraction")
    assert zero.get_ydata()[-1] == pytest.approx(1.0 / 0.5) and len(zero.get_xdata()) == 4     # 4 days checked
    assert any(ln.get_label() == "ndcg@10" for ln in bottom.get_lines())
    assert sum(1 for ln in top.get_lines() if ln.get_color() == "0.75") == 8      # every feature's drift


def test_fingerprint_kernels_match_a_plain_numpy_formula():
    from streamrank.io.fingerprints import column_salts as _salt
    from streamrank.pipelines._nightly_profiles import fingerprints

    rng = np.random.default_rng(2)
    X = rng.normal(size=(30, 5)).astype(np.float32)
    X[rng.random(X.shape) < 0.5] = 0
    X[0, 1] = -0.0                                      # a negative zero is a zero
    h, zeros = fingerprints(X)
    assert zeros.tolist() == (X == 0).sum(0).tolist()
    with np.errstate(over="ignore"):
        m = (X.view(np.uint32).astype(np.uint64) ^ _salt(5)) * np.uint64(0x9E3779B97F4A7C15)
        m ^= m >> np.uint64(32)
        m[X == 0] = 0
        from streamrank.io.fingerprints import mix64 as _mix

        assert np.array_equal(h, _mix(m.sum(axis=1, dtype=np.uint64)))
    hs, zs = fingerprints(sp.csr_matrix(X))
    assert np.array_equal(hs, h) and np.array_equal(zs, zeros)


def test_a_day_with_another_feature_count_is_refused_by_the_store_not_by_the_checks(three_good, tmp_path):
    store, models = _copy(three_good, tmp_path)
    X, y, q = good_day(4)
    rc, out, err = _main(store, models, "--new", save(tmp_path / "wide.npz", (np.hstack([X, X[:, :1]]), y, q)))
    assert rc == 4 and "9" in err and "8" in err and "predict" not in err, err
    assert sr.GroupStore.open(store).n_groups == 900


def test_agreement_sample_is_the_same_whatever_the_chunking(monkeypatch):
    """The bottom-k sample by group hash: the same groups (and figures) for any chunk size or day order."""
    from streamrank.pipelines import _nightly_profiles as prof

    monkeypatch.setattr(prof, "AGREEMENT_GROUPS", 40)
    X, y, q = good_day(7)
    model = sr.RankRLS(alpha=1.0).fit(X, y, q)

    def figures(cut, order=None):
        p = prof.DayProfile(model)
        groups = np.split(np.arange(len(y)), np.flatnonzero(np.diff(q)) + 1)
        if order is not None:
            groups = [groups[i] for i in order]
        rows = np.concatenate(groups)
        Xs, ys, qs = X[rows], y[rows], q[rows]
        for a in range(0, len(ys), cut):
            p.add(Xs[a:a + cut], ys[a:a + cut], qs[a:a + cut])
        return p.agreement()

    base = figures(12 * 7)
    assert base["groups_scored"] == 40
    for cut, order in ((12, None), (12 * 100, None), (12 * 13, np.random.default_rng(0).permutation(300))):
        got = figures(cut, order)
        assert got["groups_scored"] == 40
        assert got["ndcg"] == pytest.approx(base["ndcg"], abs=1e-12)
        assert got["disagreement"] == pytest.approx(base["disagreement"], abs=1e-12)
    full = prof.DayProfile(model)
    monkeypatch.setattr(prof, "AGREEMENT_GROUPS", 10_000)
    full.add(X, y, q)
    want = sr.metrics.evaluate(sr.as_source(X, y, q), model, k=10)
    assert full.agreement()["ndcg"] == pytest.approx(want["ndcg@10"].value, abs=1e-12)
    assert full.agreement()["disagreement"] == pytest.approx(want["disagreement"].value, abs=1e-12)


@pytest.mark.parametrize("raw", [b"PK\x03\x04garbage", b"", b"\x93NUMPY junk"])
def test_a_damaged_day_hashes_file_is_a_models_dir_error(tmp_path, raw):
    """A damaged ``days/<day>.npz`` is named as such (not a raw zip/numpy error), with what to do about it."""
    from streamrank.pipelines._nightly_checks import DAYS, read_day_hashes
    from streamrank.pipelines._nightly_errors import ModelsDirError

    (tmp_path / DAYS).mkdir()
    (tmp_path / DAYS / "abc.npz").write_bytes(raw)
    with pytest.raises(ModelsDirError, match=r"abc\.npz is damaged .*profiled again"):
        read_day_hashes(tmp_path, "abc")

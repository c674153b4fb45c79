"""Bad input through the command line and the nightly pipeline, and state that changes between calls.

Every bad file or argument gives its documented exit code and one line on
stderr that names the file and line (text), the array and row (npz), or the
argument — and leaves the store and the promoted model as they were.
"""
from __future__ import annotations

import io
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from _cli_inproc import run_cli

import streamrank as sr

ROOT = Path(__file__).resolve().parents[2]
GOOD = "".join(f"{(i * 7) % 3} qid:{i // 5} 1:{i * 0.1:.3f} 2:{(i % 4) * 0.5:.3f} 3:1\n" for i in range(20))


def _run(argv):
    code, _, err = run_cli(*([*argv, "--quiet"] if argv[0] != "info" else argv))
    return code, err


def _text(tmp, name, body):
    p = tmp / name
    p.write_bytes(body.encode() if isinstance(body, str) else body)
    return p


def _npz(tmp, name, **arrays):
    p = tmp / name
    np.savez(p, **arrays)
    return p


def _arrays(n=20, nf=3):
    rng = np.random.default_rng(0)
    return dict(X=rng.normal(size=(n, nf)), y=rng.integers(0, 3, n).astype(float), qid=np.repeat(np.arange(n // 5), 5))


def _with(**changes):
    a = _arrays()
    for k, v in changes.items():
        a[k] = v(a[k]) if callable(v) else v
    return a


def _nan_at(a, idx):
    a = a.astype(float).copy()
    a[idx] = np.nan
    return a


INGEST_CASES = {
    # name: (make source, expected exit code, regex the stderr line must match)
    "text_nan_value": (lambda t: _text(t, "d.txt", GOOD + "1 qid:9 1:nan\n"), 4, r"d\.txt:21: bad feature value"),
    "text_bad_label": (lambda t: _text(t, "d.txt", "x qid:1 1:1\n" + GOOD), 4, r"d\.txt:1: bad label"),
    "text_missing_qid": (lambda t: _text(t, "d.txt", GOOD + "1 1:1\n"), 4, r"d\.txt:21: qid present on some"),
    "text_crlf_comments_unicode": (lambda t: _text(t, "d.txt", "# héllo ☃\r\n" + GOOD.replace("\n", " # ü\r\n")),
                                   0, r"^$"),
    "text_noncontiguous_qid": (lambda t: _text(t, "d.txt", GOOD + "1 qid:0 1:1\n"), 4, r"qid 0|not contiguous"),
    "text_empty_file": (lambda t: _text(t, "d.txt", ""), 0, r"^$"),      # nothing to append
    # told by its content (issue 24): not parsed as text, the supported formats listed, no bytes printed
    "text_binary_garbage": (lambda t: _text(t, "d.txt", b"\x00\xff\xfe\x01" * 50), 4,
                            r"d\.txt is binary data, not a format streamrank reads; supported: LETOR"),
    "text_truncated_gzip": (lambda t: _text(t, "d.txt", b"\x1f\x8b\x08\x00\x00\x00"), 4, r"d\.txt: corrupt or truncated gzip"),
    "missing_file": (lambda t: t / "nope.txt", 3, r"nope\.txt"),
    "npz_nan_X": (lambda t: _npz(t, "d.npz", **_with(X=lambda X: _nan_at(X, (7, 1)))), 4, r"X .*row 7"),
    "npz_inf_y": (lambda t: _npz(t, "d.npz", **_with(y=lambda y: _nan_at(y, 11) * 0 + np.where(np.arange(20) == 11, np.inf, y))),
                  4, r"y .*row 11"),
    "npz_missing_qid": (lambda t: _npz(t, "d.npz", X=_arrays()["X"], y=_arrays()["y"]), 4, r"qid"),
    "npz_y_too_short": (lambda t: _npz(t, "d.npz", **_with(y=lambda y: y[:-1])), 4, r"y has 19 rows"),
    "npz_fractional_qid": (lambda t: _npz(t, "d.npz", **_with(qid=lambda q: _nan_at(q, 3) * 0 + np.where(np.arange(20) == 3, 0.5, q))),
                           4, r"qid .*row 3"),
    "npz_object_array": (lambda t: _npz(t, "d.npz", **_with(X=lambda X: X.astype(object))), 4, r"pickle|object|X"),
    "npz_string_X": (lambda t: _npz(t, "d.npz", **_with(X=lambda X: X.astype(str))), 4, r"X has dtype"),
    "npz_not_a_zip": (lambda t: _text(t, "d.npz", b"PK\x03\x04garbage"), 4, r"d\.npz"),
}


@pytest.mark.parametrize("case", sorted(INGEST_CASES))
def test_ingest_bad_sources(tmp_path, case):
    make, code, pattern = INGEST_CASES[case]
    store = tmp_path / "s.zarr"
    assert _run(["ingest", str(_npz(tmp_path, "base.npz", **{**_arrays(), "qid": np.repeat(np.arange(100, 104), 5)})),
                 "--store", str(store)])[0] == 0
    src = make(tmp_path)
    got, err = _run(["ingest", str(src), "--store", str(store)])
    assert got == code, err
    assert len(err.strip().splitlines()) <= 1
    import re

    assert re.search(pattern, err.strip()), err
    s = sr.GroupStore.open(store)
    assert s.verify() == len(s.batches) and s.n_rows in (20, 40)   # nothing half-written
    if code:
        assert s.n_rows == 20


@pytest.mark.slow   # several CLI fits and predicts: 2.6 s wall under load 11
def test_cli_model_and_store_mismatches(tmp_path):
    store3, store4 = tmp_path / "s3.zarr", tmp_path / "s4.zarr"
    assert _run(["ingest", str(_npz(tmp_path, "a.npz", **_arrays(nf=3))), "--store", str(store3)])[0] == 0
    assert _run(["ingest", str(_npz(tmp_path, "b.npz", **_arrays(nf=4))), "--store", str(store4)])[0] == 0
    model = tmp_path / "m"
    assert _run(["fit", "--store", str(store3), "--model", str(model), "--learner", "rankrls"])[0] == 0
    code, err = _run(["evaluate", "--model", str(model), "--store", str(store4)])
    assert code == 4 and "3 features" in err and "has 4" in err, err
    code, err = _run(["predict", "--model", str(model), "--store", str(store4), "--out", str(tmp_path / "s.npy")])
    assert code == 4 and "features" in err and not (tmp_path / "s.npy").exists(), err
    # appending a store of another width
    code, err = _run(["ingest", str(_npz(tmp_path, "c.npz", **{**_arrays(nf=4), "qid": np.repeat(np.arange(50, 54), 5)})),
                      "--store", str(store3)])
    assert code == 4 and "features" in err, err
    code, err = _run(["fit", "--store", str(store3), "--model", str(model), "--learner", "rankrls", "--alpha", "-1"])
    assert code == 2, err
    code, err = _run(["fit", "--store", str(tmp_path / "missing.zarr"), "--model", str(model), "--learner", "rankrls"])
    assert code == 3, err
    (tmp_path / "junk").mkdir()
    code, err = _run(["info", str(tmp_path / "junk")])
    assert code == 4, err
    assert sr.load(model).coef_.shape == (3,)          # the model was never overwritten by a failed run


def test_nightly_bad_day_leaves_store_and_model(tmp_path):
    sys.path.insert(0, str(ROOT))
    from streamrank.pipelines import nightly

    store, models = tmp_path / "logs.zarr", tmp_path / "models"
    good = _npz(tmp_path, "d1.npz", **_arrays())
    argv = ["--store", str(store), "--models", str(models), "--alphas", "1,10", "--no-plot", "--new"]
    with redirect_stdout(io.StringIO()):
        assert nightly.main([*argv, str(good)]) == 0
    v1 = nightly.current_version(models)
    bad = _npz(tmp_path, "d2.npz", **{**_with(X=lambda X: _nan_at(X, (4, 0))), "qid": np.repeat(np.arange(10, 14), 5)})
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err), pytest.raises((ValueError, SystemExit)) as info:
        rc = nightly.main([*argv, str(bad)])
        if rc:
            raise SystemExit(rc)
    if isinstance(info.value, ValueError):
        assert "row 4" in str(info.value) and "X" in str(info.value)
    assert sr.GroupStore.open(store).n_rows == 20 and nightly.current_version(models) == v1


# ------------------------------------------------------------- state between calls
def _xyq(nf, seed=0, q0=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(20, nf)), rng.normal(size=20), np.repeat(np.arange(q0, q0 + 4), 5)


@pytest.mark.parametrize("make", [
    lambda: sr.RankRLS(solver="primal"),
    lambda: sr.PairwiseSGDRanker(),
])
def test_feature_count_changing_between_partial_fits(make):
    m = make()
    m.partial_fit(*_xyq(4))
    with pytest.raises(ValueError, match=r"X has 5 features, but \w+ was fitted with 4"):
        m.partial_fit(*_xyq(5, q0=10))
    with pytest.raises(ValueError, match=r"5 features.*4|4.*5 features"):
        m.predict(np.ones((3, 5)))


def test_feature_count_changing_for_bilinear_sgd():
    X = sp.random(10, 6, density=0.5, format="csr", random_state=0)
    m = sr.SparseSGDRanker().partial_fit(X, X, X)
    Y = sp.random(10, 7, density=0.5, format="csr", random_state=1)
    with pytest.raises(ValueError, match=r"Q has 7 features.*6"):
        m.partial_fit(Y, Y, Y)
    with pytest.raises(ValueError, match=r"7 features.*6"):
        m.predict(Y, Y)


@pytest.mark.parametrize("fit", ["kernel", "rankrls", "pairwise"])
def test_loaded_model_checks_feature_count(tmp_path, fit):
    X, y, q = _xyq(4)
    m = {"kernel": sr.KernelRankRLS(), "rankrls": sr.RankRLS(), "pairwise": sr.PairwiseSGDRanker()}[fit].fit(X, y, q)
    sr.save(m, tmp_path / "m")
    with pytest.raises(ValueError, match=r"5 features"):
        sr.load(tmp_path / "m").predict(np.ones((2, 5)))


def test_group_id_already_in_the_store(tmp_path):
    s = sr.GroupStore.create(tmp_path / "s.zarr", 4, group_identity="global")
    s.append(*_xyq(4), batch_id="a")
    X, y, q = _xyq(4, seed=1, q0=3)       # ids 3..6: id 3 is already stored
    with pytest.raises(ValueError, match=r"qid 3 \(batch row 0\) is already in the store as group 3"):
        s.append(X, y, q, batch_id="b")
    assert sr.GroupStore.open(tmp_path / "s.zarr").n_rows == 20

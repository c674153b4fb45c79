"""Nightly retraining over simulated nights: duplicates, killed runs, incremental == from scratch."""
from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from pipeline_data import make_day, make_tuple_day

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from streamrank.pipelines import nightly  # noqa: E402

GRID = "2^-4:2^4"

CHILD = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from streamrank.pipelines import nightly
    import streamrank.io._group_append as append   # its write_attrs: the commit point of an append

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    where = sys.argv[1]
    if where == "ingest":      # rows written beyond the commit, commit record not yet
        append.write_attrs = die
    elif where == "promote":   # version written, pointer not yet switched
        nightly.switch_current = die
    sys.exit(nightly.main(sys.argv[2:]))
""")


def _day_file(tmp, d, kind="npz"):
    X, y, qid = make_day(d)
    if kind == "npz":
        p = tmp / f"day{d}.npz"
        np.savez(p, X=X, y=y, qid=qid)
    else:
        p = tmp / f"day{d}.txt"
        with open(p, "w") as fh:
            for i in range(len(y)):
                feats = " ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(X[i]))
                fh.write(f"{y[i]:g} qid:{qid[i]} {feats}\n")
    return p


def _argv(store, models, day, *extra):
    return ["--store", str(store), "--new", str(day), "--models", str(models), "--alphas", GRID,
            "--tolerance", "1.0", "--no-plot", *extra]


def _night(store, models, day, *extra):
    buf = io.StringIO()
    args = nightly.build_parser().parse_args(_argv(store, models, day, *extra))
    rep = nightly.run_night(args.store, args.new, args.models, alphas=args.alphas, full=args.full,
                            keep=args.keep, tolerance=args.tolerance, plot=False, out=buf)
    assert buf.getvalue().startswith("nightly rankrls:")
    return rep


def _killed_night(fork_server, tmp, store, models, day, where):
    """A night in a real process (forked from the pre-imported fork server, tests/_forked.py) that SIGKILLs
    itself at ``where``."""
    script = tmp / "child.py"
    script.write_text(CHILD.format(root=str(ROOT)))
    proc = fork_server.run([str(script), where, *_argv(store, models, day)], timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def test_six_nights_with_duplicate_and_killed_runs(tmp_path, fork_server):
    store, models = tmp_path / "logs.zarr", tmp_path / "models"
    days = {d: _day_file(tmp_path, d, "text" if d == 6 else "npz") for d in range(1, 7)}

    r1 = _night(store, models, days[1])
    assert r1["status"] == "promoted" and r1["mode"] == "full"
    assert nightly.current_version(models) == r1["version"]
    r2 = _night(store, models, days[2])
    assert r2["mode"] == "incremental" and r2["data"]["new_groups"] == 12

    # a duplicated night appends nothing and trains nothing
    rows = sr.GroupStore.open(store).n_rows
    dup = _night(store, models, days[2])
    assert dup["status"] == "up-to-date" and not dup["ingest"][0]["appended"]
    assert sr.GroupStore.open(store).n_rows == rows and len(nightly.list_versions(models)) == 2

    # night 3 killed in the middle of ingest: store and models at their previous state
    _killed_night(fork_server, tmp_path, store, models, days[3], "ingest")
    import zarr
    assert zarr.open_group(str(store), mode="r")["y"].shape[0] > rows   # a torn tail was left
    s = sr.GroupStore.open(store)
    assert s.n_rows == rows and s.verify() == 2
    assert nightly.current_version(models) == r2["version"] and len(nightly.list_versions(models)) == 2
    r3 = _night(store, models, days[3])                       # the next run completes the work
    assert r3["status"] == "promoted" and r3["ingest"][0]["appended"]
    assert sr.GroupStore.open(store).verify() == 3

    # night 4 killed during promotion: version written, pointer not switched
    _killed_night(fork_server, tmp_path, store, models, days[4], "promote")
    assert nightly.current_version(models) == r3["version"]
    assert len(nightly.list_versions(models)) == 4
    r4 = _night(store, models, days[4])
    assert r4.get("reused") and r4["version"] == "v0004" and nightly.current_version(models) == "v0004"
    assert len(nightly.list_versions(models)) == 4

    r5 = _night(store, models, days[5], "--keep", "3")
    assert r5["pruned"] == ["v0001", "v0002"]
    r6 = _night(store, models, days[6], "--keep", "3")          # a LETOR text day
    assert nightly.list_versions(models) == ["v0004", "v0005", "v0006"]

    # the incrementally updated model equals a from-scratch fit on all nights' data
    final = sr.load(models / "current")
    full_store = sr.GroupStore.open(store)
    assert full_store.n_groups == 6 * 12 and len(full_store.batches) == 6
    ref = sr.RankRLS(solver="primal")
    cv = ref.cross_validate(full_store, alphas=nightly._parse_alphas(GRID), folds=5)
    assert final.alpha == cv.best_alpha == r6["alpha"]
    np.testing.assert_allclose(final.coef_, ref.coef_, rtol=1e-8, atol=1e-12)
    scratch = sr.RankRLS(alpha=final.alpha, solver="primal").fit(full_store)
    np.testing.assert_allclose(final.coef_, scratch.coef_, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(final.stats_.G, scratch.stats_.G, rtol=1e-10, atol=1e-8)

    # --full retrains from scratch to the same model
    rf = _night(store, tmp_path / "models_full", days[1], "--full")
    assert rf["mode"] == "full"
    np.testing.assert_allclose(sr.load(tmp_path / "models_full" / "current").coef_, final.coef_, rtol=1e-8)

    # every version keeps its metrics, data range and parameters; a JSON report per run
    meta = nightly.read_version(models, "v0006")
    assert meta["data"]["groups"] == [0, 72] and meta["params"]["alpha"] == final.alpha
    assert set(meta["metrics"]) == {"ndcg@10", "disagreement"} and meta["mode"] == "incremental"
    reports = sorted((models / "reports").glob("*.json"))
    assert len(reports) >= 7 and json.loads(reports[-1].read_text())["version"] == "v0006"


def test_worse_candidate_is_not_promoted(tmp_path):
    store, models = tmp_path / "logs.zarr", tmp_path / "models"
    _night(store, models, _day_file(tmp_path, 1))
    buf = io.StringIO()
    rep = nightly.run_night(store, [_day_file(tmp_path, 2)], models, alphas=[1.0], tolerance=-2.0,
                            plot=False, out=buf)
    assert rep["status"] == "rejected" and nightly.current_version(models) == "v0001"
    assert "rejected" in buf.getvalue()
    assert rep["excluded"] == [nightly.content_hash(_day_file(tmp_path, 2))]   # kept out of later nights...
    # ...unless re-admitted: the next night starts again from the current model and sees night 2's groups
    rep = nightly.run_night(store, [_day_file(tmp_path, 3)], models, alphas=[1.0], tolerance=1.0,
                            plot=False, out=io.StringIO(), readmit=[_day_file(tmp_path, 2)])
    assert rep["status"] == "promoted" and rep["data"]["new_groups"] == 24


def test_cli_main_and_plot(tmp_path, capsys):
    store, models = tmp_path / "logs.zarr", tmp_path / "models"
    assert nightly.main(["--store", str(store), "--new", str(_day_file(tmp_path, 1)), str(_day_file(tmp_path, 2)),
                         "--models", str(models), "--alphas", "0.5,1,2"]) == 0
    out = capsys.readouterr().out
    assert "ingested 2 batch(es)" in out and "current=v0001" in out
    pytest.importorskip("matplotlib")
    assert (models / "metrics.png").stat().st_size > 0
    with pytest.raises(SystemExit):
        nightly.main(["--store", str(store), "--new", "x", "--models", str(models), "--alphas", "0,-1"])


@pytest.mark.parametrize("module", ["streamrank.pipelines.nightly", "streamrank.pipelines.distributed"])
def test_scripts_run_from_the_command_line(module):
    proc = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "--store" in proc.stdout


def test_sgd_bilinear_nights_resume_and_equal_one_run(tmp_path):
    store, models = tmp_path / "tuples.zarr", tmp_path / "models"
    days = [make_tuple_day(tmp_path, d) for d in range(1, 6)]
    run = dict(learner="sgd-bilinear", tolerance=1.0, plot=False, gate_fraction=0)   # every query trained on
    for i, day in enumerate(days):
        rep = nightly.run_night(store, [day], models, out=io.StringIO(), **run)
        assert rep["status"] == "promoted" and rep["mode"] == ("full" if i == 0 else "incremental")
        if i == 2:   # a duplicated night: nothing appended, nothing trained
            dup = nightly.run_night(store, [day], models, out=io.StringIO(), **run)
            assert dup["status"] == "up-to-date"
    final = sr.load(models / "current")
    ts = sr.TupleStore.open(store)
    assert ts.n_tuples == 1500 and final.t_ == 1500
    scratch = sr.SparseSGDRanker(auto_refit=False)
    for a in range(0, 1500, 500):
        scratch.partial_fit(*nightly.tuple_range(ts, a, a + 500))
    np.testing.assert_allclose(final.W_.toarray(), scratch.W_.toarray(), rtol=1e-12, atol=1e-14)
    meta = nightly.read_version(models, nightly.current_version(models))
    assert meta["data"]["tuples"] == [0, 1500] and "tuple_error" in meta["metrics"]


def test_sparse_kernel_nights_incremental_equals_scratch(tmp_path):
    store, models = tmp_path / "logs.zarr", tmp_path / "models"
    params = {"n_basis": 20, "gamma": 0.05, "random_state": 3}
    for d in range(1, 5):
        rep = nightly.run_night(store, [_day_file(tmp_path, d)], models, learner="sparse-kernel",
                                alphas=[0.1, 1.0, 10.0], tolerance=1.0, plot=False, out=io.StringIO(),
                                learner_params=params)
        assert rep["status"] == "promoted"
    cur = nightly.current_version(models)
    assert (models / cur / "statistics.npz").is_file() and rep["mode"] == "incremental"
    final = sr.load(models / "current")
    s = sr.GroupStore.open(store)
    scratch = sr.KernelRankRLS(gamma=0.05, alpha=final.alpha, basis=final.basis_).fit(s)
    np.testing.assert_allclose(final.dual_coef_, scratch.dual_coef_, rtol=1e-7, atol=1e-9)
    # λ chosen from the fold statistics kept night by night equals the library's own k-fold choice on all data
    m = sr.KernelRankRLS(gamma=0.05, basis=final.basis_).fit(s)
    best = m.cross_validate(alphas=[0.1, 1.0, 10.0], folds=5).best_alpha
    assert best == final.alpha == final.best_alpha_


def test_sgd_pairwise_nights_resume(tmp_path):
    store, models = tmp_path / "logs.zarr", tmp_path / "models"
    for d in range(1, 5):
        rep = nightly.run_night(store, [_day_file(tmp_path, d)], models, learner="sgd-pairwise", tolerance=1.0,
                                plot=False, out=io.StringIO(), learner_params={"random_state": 5}, gate_fraction=0)
        assert rep["status"] == "promoted" and "ndcg@10" in rep["metrics"]
    final = sr.load(models / "current")
    s = sr.GroupStore.open(store)
    replay = sr.PairwiseSGDRanker(random_state=5)     # the same partial_fit calls in one process
    for e in s.batches:
        for b in s.groups(*e["groups"]).blocks():
            replay.partial_fit(b.X, b.y, b.row_qid())
    assert final.t_ == replay.t_ == s.n_rows
    np.testing.assert_allclose(final.coef_, replay.coef_, rtol=1e-12, atol=1e-15)


def test_fixed_validation_store_and_group_weight(tmp_path):
    from pipeline_data import make_store

    store, models = tmp_path / "logs.zarr", tmp_path / "models"
    val = make_store(tmp_path / "val.zarr", [50, 51])
    for d in (1, 2):
        assert nightly.main(["--store", str(store), "--new", str(_day_file(tmp_path, d)), "--models", str(models),
                             "--alphas", "0.5,2", "--validation", str(val.path), "--group-weight", "query",
                             "--ties", "exclude", "--no-plot"]) == 0
    meta = nightly.read_version(models, "v0002")
    assert meta["validation"] == {"scheme": "fixed-store", "store": str(val.path)} and meta["params"]["group_weight"] == "query"
    final = sr.load(models / "current")
    ref = sr.RankRLS(alpha=final.alpha, solver="primal", group_weight="query", ties="exclude")
    np.testing.assert_allclose(final.coef_, ref.fit(sr.GroupStore.open(store)).coef_, rtol=1e-8)
    want = sr.metrics.evaluate(val, final, k=10)["ndcg@10"].value
    assert meta["metrics"]["ndcg@10"] == pytest.approx(want, rel=1e-12)


def test_nightly_normalize_rankrls_equals_scratch_and_library_selection(tmp_path):
    """--normalize standard: the moments ride in the fold statistics night after night; λ is chosen on the
    scaled folds (the library's rule) and the model equals a from-scratch normalized fit on all data."""
    store, models = tmp_path / "logs.zarr", tmp_path / "models"
    for d in (1, 2, 3):
        assert nightly.main(["--store", str(store), "--new", str(_day_file(tmp_path, d)), "--models", str(models),
                             "--alphas", "0.01,1,100", "--normalize", "standard", "--tolerance", "1",
                             "--no-plot"]) == 0
    final = sr.load(models / "current")
    s = sr.GroupStore.open(store)
    assert final.normalize == "standard" and final.normalizer_ is not None
    ref = sr.RankRLS(alpha=final.alpha, solver="primal", normalize="standard").fit(s)
    np.testing.assert_allclose(final.coef_, ref.coef_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(final.normalizer_.scale, ref.normalizer_.scale, rtol=1e-10)
    cv = sr.RankRLS(solver="primal", normalize="standard").cross_validate(s, alphas=[0.01, 1.0, 100.0], folds=5)
    assert final.alpha == cv.best_alpha
    meta = nightly.read_version(models, nightly.current_version(models))
    np.testing.assert_allclose(meta["selection"]["cv_squared"], cv.scores, rtol=1e-8)


def test_nightly_normalize_sparse_kernel_and_pairwise_keep_the_first_nights_scales(tmp_path):
    from streamrank.normalize import FeatureMoments, NormalizedSource

    X1 = make_day(1)[0]
    first = FeatureMoments(X1.shape[1]).update(X1).normalizer("minmax")
    # sparse kernel: scales fixed with the basis; incremental = a fit on the scaled rows with that basis
    store, models = tmp_path / "k.zarr", tmp_path / "km"
    for d in (1, 2, 3):
        assert nightly.main(["--store", str(store), "--new", str(_day_file(tmp_path, d)), "--models", str(models),
                             "--learner", "sparse-kernel", "--n-basis", "15", "--gamma", "0.5", "--alphas", "0.1,1,10",
                             "--normalize", "minmax", "--tolerance", "1", "--no-plot"]) == 0
    final = sr.load(models / "current")
    np.testing.assert_allclose(final.normalizer_.offset, first.offset, rtol=1e-12)
    np.testing.assert_allclose(final.normalizer_.scale, first.scale, rtol=1e-12)
    s = sr.GroupStore.open(store)
    scratch = sr.KernelRankRLS(gamma=0.5, alpha=final.alpha, basis=final.basis_).fit(NormalizedSource(s, first))
    np.testing.assert_allclose(final.dual_coef_, scratch.dual_coef_, rtol=1e-7, atol=1e-9)
    X = np.vstack([b.X for b in s.blocks()])
    np.testing.assert_allclose(final.predict(X), scratch.predict(first.transform(X)), rtol=1e-7, atol=1e-9)
    # pairwise SGD: the first night's scales, then the same partial_fit calls
    store, models = tmp_path / "p.zarr", tmp_path / "pm"
    for d in (1, 2, 3):
        assert nightly.main(["--store", str(store), "--new", str(_day_file(tmp_path, d)), "--models", str(models),
                             "--learner", "sgd-pairwise", "--normalize", "minmax", "--seed", "5", "--tolerance", "1",
                             "--gate-fraction", "0",
                             "--no-plot"]) == 0
    final = sr.load(models / "current")
    s = sr.GroupStore.open(store)
    replay = sr.PairwiseSGDRanker(random_state=5, normalize="minmax").init_state(s.n_features)
    replay.normalizer_ = first
    for e in s.batches:
        for b in s.groups(*e["groups"]).blocks():
            replay.partial_fit(b.X, b.y, b.row_qid())
    np.testing.assert_allclose(final.normalizer_.scale, first.scale, rtol=1e-12)
    np.testing.assert_allclose(final.coef_, replay.coef_, rtol=1e-12, atol=1e-15)


def test_nightly_normalize_sgd_bilinear_keeps_the_first_nights_scales(tmp_path):
    """--learner sgd-bilinear --normalize standard: scale-only scales of the first night's stored query and
    item vectors, kept by later nights; W equals the same partial_fit calls on rows scaled by them."""
    days = [make_tuple_day(tmp_path, d) for d in range(1, 4)]
    args = ["--learner", "sgd-bilinear", "--normalize", "standard", "--tolerance", "1", "--no-plot", "--gate-fraction", "0"]
    assert nightly.main(["--store", str(tmp_path / "b1.zarr"), "--new", str(days[0]), "--models",
                         str(tmp_path / "bm1"), *args]) == 0
    first = sr.TupleStore.open(tmp_path / "b1.zarr")
    s = first.Q.toarray().astype(np.float64).std(axis=0)
    u = first.D.toarray().astype(np.float64).std(axis=0)
    s[s == 0], u[u == 0] = 1.0, 1.0
    store, models = tmp_path / "b.zarr", tmp_path / "bm"
    for day in days:
        assert nightly.main(["--store", str(store), "--new", str(day), "--models", str(models), *args]) == 0
    final = sr.load(models / "current")
    assert final.normalize == "standard"
    np.testing.assert_allclose(final.query_normalizer_.scale, s, rtol=1e-10)
    np.testing.assert_allclose(final.item_normalizer_.scale, u, rtol=1e-10)
    ts = sr.TupleStore.open(store)
    replay = sr.SparseSGDRanker(auto_refit=False)
    for a in range(0, ts.n_tuples, 300):      # one partial_fit per night, as the pipeline
        Q, Dp, Dn = nightly.tuple_range(ts, a, a + 300)
        Q, Dp, Dn = (sp.csr_matrix(M.astype(np.float64) @ sp.diags(1 / f))
                     for M, f in ((Q, final.query_normalizer_.scale), (Dp, final.item_normalizer_.scale),
                                  (Dn, final.item_normalizer_.scale)))
        replay.partial_fit(Q, Dp, Dn)
    assert final.t_ == replay.t_ == ts.n_tuples
    np.testing.assert_allclose(final.W_.toarray(), replay.W_.toarray(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("ties", ["include", "exclude"])
def test_nightly_rankrls_selection_equals_brute_force_kfold(tmp_path, ties):
    """Two nights of a two-output store: the λ scores the nightly reports are the brute-force k-fold loss.

    Fold f's model is retrained pair by pair without fold f's groups
    (tests/reference), its loss summed over fold f's pairs, the sum divided by
    each output's pair count and averaged over the outputs — the library's
    selection (``RankRLS.cross_validate``).  The pipeline's own copy divided
    by the pair count summed over the outputs, which differs with
    ``ties="exclude"`` (each output has its own tied pairs).
    """
    sys.path.insert(0, str(ROOT / "tests" / "reference"))
    from rankrls_reference import brute_loss, brute_rankrls, pair_list

    from streamrank.pipelines._nightly_learners import update_rankrls
    from streamrank.rankrls.selection import fold_of

    rng = np.random.default_rng(7)
    store = sr.GroupStore.create(tmp_path / "s.zarr", n_features=4, n_outputs=2)
    alphas = [0.25, 1.0, 4.0]
    model = None
    for night in range(2):                      # night 2 adds its groups' fold statistics to night 1's
        sizes = rng.integers(2, 6, 8)
        X = rng.normal(size=(sizes.sum(), 4))
        Y = rng.integers(0, 3, size=(sizes.sum(), 2)).astype(float)
        store.append(X, Y, np.repeat(np.arange(8) + 8 * night, sizes), batch_id=f"night-{night}")
        s = sr.GroupStore.open(tmp_path / "s.zarr")
        model, sel, _ = update_rankrls(s, model, 8 * night, alphas, folds=3, params={"ties": ties})
    assert sel["new_groups"] == 8
    X, Y, qids, gp = [], [], [], [0]
    for b in s.blocks():
        X.append(b.X), Y.append(np.asarray(b.y).reshape(b.n_rows, -1)), qids.append(b.qid)
        gp += list(gp[-1] + b.group_ptr[1:])
    X, Y, qids, gp = np.vstack(X), np.vstack(Y), np.concatenate(qids), np.asarray(gp)
    fog = fold_of(qids, 3)
    loss = np.zeros((len(alphas), 2))
    for f in range(3):
        tr = [g for g in range(len(qids)) if fog[g] != f]
        te = [g for g in range(len(qids)) if fog[g] == f]
        rows = lambda gs: np.concatenate([np.arange(gp[g], gp[g + 1]) for g in gs])  # noqa: E731
        ptr = lambda gs: np.concatenate(([0], np.cumsum([gp[g + 1] - gp[g] for g in gs])))  # noqa: E731
        for ai, a in enumerate(alphas):
            W = brute_rankrls(X[rows(tr)], Y[rows(tr)], ptr(tr), a, ties=ties)
            loss[ai] += brute_loss(X[rows(te)] @ W, Y[rows(te)], ptr(te), ties=ties)
    pairs = np.array([len(pair_list(gp, Y[:, c], ties=ties)) for c in range(2)])
    want = (loss / pairs).mean(axis=1)
    np.testing.assert_allclose(sel["cv_squared"], want, rtol=1e-8)
    assert sel["alpha"] == alphas[int(np.argmin(want))] == model.alpha == model.best_alpha_


@pytest.mark.parametrize("text, message", [("{not json", "not JSON"), ("[1, 2]", "expected a JSON object, got list")])
def test_storage_options_parse_like_the_streamrank_command(text, message, capsys):
    """--storage-options goes through streamrank.cli.parse_storage_options, as every other command's does."""
    argv = ["--store", "s.zarr", "--models", "m", "--new", "d.txt", "--storage-options", text]
    with pytest.raises(SystemExit) as exc:
        nightly.build_parser().parse_args(argv)
    assert exc.value.code == 2
    assert f"argument --storage-options: {message}" in capsys.readouterr().err
    args = nightly.build_parser().parse_args(argv[:-1] + ['{"anon": true}'])
    assert args.storage_options == {"anon": True}

"""sr.distributed on a real LocalCluster (2 worker processes): same answers as the local run."""
from __future__ import annotations

import json
import os
import sys
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import streamrank as sr
from streamrank import distributed as srd
from streamrank.distributed import _cluster
from streamrank.metrics import evaluate

from pipeline_data import make_store

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from streamrank.pipelines import distributed as pdist  # noqa: E402
from streamrank.pipelines import nightly  # noqa: E402

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("d") / "train.zarr", range(1, 7))


@pytest.mark.parametrize("group_weight,ties", [("pair", "include"), ("query", "exclude")])
def test_fit_equals_local_fit(client, store, group_weight, ties):
    local = sr.RankRLS(alpha=0.5, solver="primal", group_weight=group_weight, ties=ties).fit(store, max_rows=40)
    dist = srd.fit(sr.RankRLS(alpha=0.5, solver="primal", group_weight=group_weight, ties=ties), store,
                   client, max_rows=40, split_every=3)
    np.testing.assert_allclose(dist.coef_, local.coef_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dist.stats_.G, local.stats_.G, rtol=1e-10, atol=1e-9)
    assert (dist.stats_.n_rows, dist.stats_.n_groups, dist.stats_.n_pairs) == \
        (local.stats_.n_rows, local.stats_.n_groups, local.stats_.n_pairs)


def test_fit_global_group_split_across_blocks(client):
    """qid=None: one group cut into pieces; the pieces are joined by the tree reduction."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 4))
    y = X @ [1.0, 0.0, -1.0, 2.0] + rng.normal(size=300)
    src = sr.as_source(X, y, None)
    local = sr.RankRLS(alpha=1.0, solver="primal").fit(src, max_rows=64)
    dist = srd.fit(sr.RankRLS(alpha=1.0, solver="primal"), src, client, max_rows=64, split_every=2)
    np.testing.assert_allclose(dist.coef_, local.coef_, rtol=1e-10)


def test_statistics_never_pull_rows(client, store):
    """Workers open the store by path: the task arguments hold a path, not data."""
    ref = srd.SourceRef(store)
    assert ref.kind == "group_store" and ref.source is None and ref.path == store.path
    srd.statistics(sr.RankRLS(solver="primal"), store, client, max_rows=50)
    paths = client.run(lambda: sorted(k[0] for k in _cluster._OPEN_STORES))
    assert any(store.path in p for p in paths.values())


def test_fit_from_an_s3_store_equals_the_local_fit(client, s3_server, s3_url, tmp_path):
    """No shared filesystem: the workers open the s3:// URL themselves (with the store's storage options;
    their environment has no credentials) and read their blocks from the bucket; the tasks carry the URL."""
    import pickle

    so = s3_server.storage_options
    url = s3_url + "/train.zarr"
    remote = make_store(url, [1, 2], storage_options=so)      # two appends: each is ~30 requests
    store = make_store(tmp_path / "train.zarr", [1, 2])
    assert remote.n_rows == store.n_rows
    ref = srd.SourceRef(remote)
    assert (ref.kind, ref.path, ref.storage_options, ref.source) == ("group_store", url, so, None)
    assert len(pickle.dumps(ref)) < 2000                     # a URL and options, never rows
    local = sr.RankRLS(alpha=0.5, solver="primal").fit(store, max_rows=40)
    dist = srd.fit(sr.RankRLS(alpha=0.5, solver="primal"), url, client, max_rows=40, split_every=3,
                   storage_options=so)
    np.testing.assert_allclose(dist.coef_, local.coef_, rtol=1e-10, atol=1e-12)
    opened = client.run(lambda: sorted({k[0] for k in _cluster._OPEN_STORES}))
    assert any(url in paths for paths in opened.values()), opened   # opened on the workers themselves
    expected = np.concatenate([local.predict(b.X) for b in store.blocks(max_rows=40)])
    np.testing.assert_allclose(srd.predict(dist, remote, client, max_rows=40), expected, rtol=1e-10)
    # scores cannot be published atomically on object storage (no rename): refused before any work
    with pytest.raises(NotImplementedError, match="object storage"):
        srd.predict(dist, remote, client, out=s3_url + "/scores")


def test_fold_statistics_equal_local(client, store):
    from streamrank.rankrls.selection import accumulate_folds

    m = sr.RankRLS(solver="primal")
    local = accumulate_folds(m, store, 4, 45)
    dist = srd.statistics(m, store, client, max_rows=45, folds=4)
    for a, b in zip(local, dist):
        np.testing.assert_allclose(b.G, a.G, rtol=1e-10, atol=1e-9)
        np.testing.assert_allclose(b.B, a.B, rtol=1e-10, atol=1e-9)


def test_predict_and_evaluate_equal_local(client, store, tmp_path):
    m = sr.RankRLS(alpha=2.0, solver="primal").fit(store)
    scores = srd.predict(m, store, client, max_rows=37)
    local = np.concatenate([m.predict(b.X) for b in store.blocks(max_rows=1000)])
    np.testing.assert_allclose(scores, local, rtol=1e-12)
    import zarr

    path = srd.predict(m, store, client, max_rows=50, out=str(tmp_path / "scores"))
    arr = zarr.open_array(path, mode="r")
    assert arr.chunks == (50,)
    np.testing.assert_allclose(arr[:], local, rtol=1e-12)
    got = srd.evaluate(m, store, client, k=5, max_rows=37, split_every=2)
    want = evaluate(store, m, k=5)
    assert set(got) == set(want)
    for name in want:
        assert got[name].value == pytest.approx(want[name].value, rel=1e-12)
        assert (got[name].n_queries, got[name].n_skipped) == (want[name].n_queries, want[name].n_skipped)
    # the metric conventions travel to the workers
    names = "ndcg@1,3,map,mrr,p@5,recall@5"          # (labels -3..3: no ERR)
    got = srd.evaluate(m, store, client, metrics=names, gain="linear", empty="zero", max_rows=37)
    want = evaluate(store, m, metrics=names, gain="linear", empty="zero")
    assert set(got) == set(want) and len(want) == 6
    for name in want:
        assert got[name].value == pytest.approx(want[name].value, rel=1e-12)
        assert (got[name].n_queries, got[name].n_skipped) == (want[name].n_queries, want[name].n_skipped)
    with pytest.raises(ValueError, match="empty must be one of"):
        srd.evaluate(m, store, client, empty="nan")


def test_predict_and_evaluate_are_redone_when_they_lose_a_worker(client, store, tmp_path, monkeypatch):
    """A gather or a reduction that meets a dead worker is run again: same scores, same metrics."""
    from distributed.comm.core import CommClosedError

    m = sr.RankRLS(alpha=2.0, solver="primal").fit(store)
    local = np.concatenate([m.predict(b.X) for b in store.blocks(max_rows=1000)])
    want = evaluate(store, m, k=5)
    from streamrank.distributed import _predict

    real_gather, real_tree = client.gather, _predict.tree_reduce
    fail = {"gather": 1, "tree": 1}

    def gather(*a, **kw):
        if fail["gather"]:
            fail["gather"] -= 1
            raise CommClosedError("in <TCP ConnectionPool.gather>: Stream is closed")
        return real_gather(*a, **kw)

    def tree(*a, **kw):
        if fail["tree"]:
            fail["tree"] -= 1
            raise CommClosedError("in <TCP ConnectionPool.gather>: Stream is closed")
        return real_tree(*a, **kw)

    monkeypatch.setattr(client, "gather", gather)
    monkeypatch.setattr(_predict, "tree_reduce", tree)   # evaluate's reduction (streamrank.distributed._predict)
    np.testing.assert_allclose(srd.predict(m, store, client, max_rows=37), local, rtol=1e-12)
    fail["gather"] = 1
    import zarr

    path = srd.predict(m, store, client, max_rows=50, out=str(tmp_path / "scores"))
    np.testing.assert_allclose(zarr.open_array(path, mode="r")[:], local, rtol=1e-12)
    got = srd.evaluate(m, store, client, k=5, max_rows=37, split_every=2)
    assert fail == {"gather": 0, "tree": 0}
    for name in want:
        assert got[name].value == pytest.approx(want[name].value, rel=1e-12)


def test_worker_killed_during_statistics_run(client, tmp_path):
    """SIGKILL one worker process mid-run: its tasks are recomputed, the model is unchanged."""
    store = make_store(tmp_path / "big.zarr", range(1, 25), n_features=12)
    local = sr.RankRLS(alpha=0.5, solver="primal").fit(store, max_rows=16)
    pids = client.run(os.getpid)
    victim = sorted(pids.values())[0]
    result = {}

    def run():
        result["m"] = srd.fit(sr.RankRLS(alpha=0.5, solver="primal"), store, client, max_rows=16,
                              split_every=2, blocks_per_task=1)

    t = threading.Thread(target=run)
    t.start()
    # wait until the run is under way (some tasks finished), then kill a worker
    deadline = time.time() + 30
    while time.time() < deadline:
        done = client.run_on_scheduler(
            lambda dask_scheduler: sum(1 for ts in dask_scheduler.tasks.values() if ts.state == "memory"))
        if done >= 5:
            break
        time.sleep(0.01)
    assert "m" not in result, "the run finished before the worker was killed"
    os.kill(victim, signal.SIGKILL)
    t.join(120)
    assert not t.is_alive()
    client.wait_for_workers(2, timeout=60)
    assert victim not in client.run(os.getpid).values()
    np.testing.assert_allclose(result["m"].coef_, local.coef_, rtol=1e-10)



def test_worker_killed_during_cg_run(client, tmp_path):
    """SIGKILL one worker process between CG iterations: the scattered vector lives on every worker
    (broadcast), the lost products are recomputed, the iterates stay those of the local solver."""
    # 3 days (225 rows, 15 blocks of 16 rows a pass, 12 iterations): each pass costs dask ~10 ms a task
    # here, so the 12-day store (61 blocks) spent 14 s scheduling; the kill still lands between iterations
    store = make_store(tmp_path / "cg.zarr", range(1, 4), n_features=12)
    kw = dict(alpha=0.5, solver="cg", tol=1e-12, max_iter=30)
    local = sr.RankRLS(**kw).fit(store, max_rows=16)
    pids = client.run(os.getpid)
    victim = sorted(pids.values())[0]
    seen, result = [], {}

    def callback(it, *args):
        seen.append(it)
        if it == 3:                                   # mid-run: kill a worker, then go on iterating
            os.kill(victim, signal.SIGKILL)

    def run():
        try:
            result["m"] = srd.fit(sr.RankRLS(**kw), store, client, max_rows=16, split_every=2,
                                  callback=callback)
        except BaseException as exc:                   # reported below, not lost in the thread
            result["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join(180)
    assert not t.is_alive()
    assert "error" not in result, result.get("error")
    assert 3 in seen
    client.wait_for_workers(2, timeout=60)
    assert victim not in client.run(os.getpid).values()
    m = result["m"]
    assert m.n_iter_ == local.n_iter_
    np.testing.assert_allclose(m.coef_, local.coef_, rtol=1e-8, atol=1e-12)


def test_cg_pass_that_loses_a_worker_is_run_again(client, store, monkeypatch):
    """The retry path itself, deterministically: a pass whose scatter dies is redone, same iterates."""
    from distributed.comm.core import CommClosedError

    from streamrank.distributed import _cg as dcg

    kw = dict(alpha=0.5, solver="cg", tol=1e-10, max_iter=8)
    local = sr.RankRLS(**kw).fit(store, max_rows=80)
    real = dcg.DistributedRankingOperator._pass_once
    calls = []

    def flaky(self, V):
        calls.append(1)
        if len(calls) in (3, 4):                      # the third pass fails twice in a row
            raise CommClosedError("in <TCP ConnectionPool.scatter>: Stream is closed")
        return real(self, V)

    monkeypatch.setattr(dcg.DistributedRankingOperator, "_pass_once", flaky)
    m = srd.fit(sr.RankRLS(**kw), store, client, max_rows=80, split_every=3)
    assert m.cg_info_["n_retries"] == 2
    np.testing.assert_allclose(m.coef_, local.coef_, rtol=1e-8, atol=1e-12)
    from streamrank.distributed import _retry

    monkeypatch.setattr(_retry, "RETRIES", 1)
    calls.clear()
    with pytest.raises(CommClosedError):              # more losses than retries: the error, not a hang
        srd.fit(sr.RankRLS(**kw), store, client, max_rows=80, split_every=3)


@pytest.mark.parametrize("qid_none", [False, True])
def test_cg_fit_equals_local_cg(client, store, qid_none):
    """Every CG product is a distributed map + tree sum; iterates equal the local solver's."""
    if qid_none:  # one global group, cut into pieces across blocks
        rng = np.random.default_rng(5)
        X = rng.normal(size=(200, 5))
        src = sr.as_source(X, X @ [1.0, 2.0, 0.0, -1.0, 0.5] + rng.normal(size=200), None)
    else:
        src = store
    kw = dict(alpha=0.5, solver="cg", tol=1e-10, max_iter=12)
    local = sr.RankRLS(**kw).fit(src, max_rows=80)
    dist = srd.fit(sr.RankRLS(**kw), src, client, max_rows=80, split_every=3)
    assert dist.solver_ == "cg" and dist.n_iter_ == local.n_iter_
    assert dist.cg_info_["n_scatters"] == dist.n_iter_          # the vector is scattered once per iteration
    np.testing.assert_allclose(dist.coef_, local.coef_, rtol=1e-8, atol=1e-12)


def test_sparse_kernel_ties_excluded_several_outputs_equals_local(client):
    """ties="exclude" with two outputs: the workers keep one G per output, the reduction joins them."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(240, 4))
    Y = np.column_stack([rng.integers(0, 3, 240), rng.integers(0, 2, 240)]).astype(float)
    src = sr.as_source(X, Y, np.repeat(np.arange(40), 6))
    kw = dict(kernel="rbf", gamma=0.3, alpha=0.5, n_basis=15, random_state=2, ties="exclude")
    local = sr.KernelRankRLS(**kw).fit(src, max_rows=50)
    dist = srd.fit(sr.KernelRankRLS(**kw), src, client, max_rows=35, split_every=2)
    np.testing.assert_allclose(dist.dual_coef_, local.dual_coef_, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("basis", ["random"])
def test_sparse_kernel_rankrls_equals_local(client, store, basis):
    """Sparse KernelRankRLS: distributed reservoir picks the same basis rows; statistics reduced on workers."""
    kw = dict(kernel="rbf", gamma=0.1, alpha=0.3, n_basis=25, random_state=7)
    if basis == "given":
        kw["basis"] = np.random.default_rng(1).normal(size=(25, store.n_features))
    local = sr.KernelRankRLS(**kw).fit(store, max_rows=50)
    dist = srd.fit(sr.KernelRankRLS(**kw), store, client, max_rows=35, split_every=2)
    np.testing.assert_array_equal(dist.basis_, local.basis_)
    np.testing.assert_allclose(dist.dual_coef_, local.dual_coef_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(srd.predict(dist, store, client, max_rows=64),
                               np.concatenate([local.predict(b.X) for b in store.blocks(max_rows=1000)]),
                               rtol=1e-8, atol=1e-10)

def test_cli_with_scheduler_address(client, tmp_path, capsys):
    store = make_store(tmp_path / "s.zarr", range(1, 6))
    out, rep = tmp_path / "model", tmp_path / "report.json"
    addr = client.scheduler.address
    assert pdist.main(["--store", str(store.path), "--model", str(out), "--scheduler", addr,
                       "--learner", "rankrls", "--alphas", "2^-3:2^3", "--folds", "4",
                       "--validation", str(store.path), "--report", str(rep), "--max-rows", "40"]) == 0
    line = capsys.readouterr().out
    assert line.startswith("distributed rankrls:") and "ndcg@10" in line
    model = sr.load(out)
    ref = sr.RankRLS(solver="primal")
    cv = ref.cross_validate(store, alphas=nightly._parse_alphas("2^-3:2^3"), folds=4)
    assert model.alpha == cv.best_alpha
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-10)
    report = json.loads(rep.read_text())
    assert report["workers"] == 2 and report["selection"]["alpha"] == model.alpha
    want = sr.metrics.evaluate(store, model, k=10)["ndcg@10"].value
    assert report["validation"]["ndcg@10"] == pytest.approx(want, rel=1e-12)


def test_cli_cg_with_ties_excluded(client, tmp_path, capsys):
    store = make_store(tmp_path / "s.zarr", range(1, 4))
    out = tmp_path / "model"
    assert pdist.main(["--store", str(store.path), "--model", str(out), "--scheduler", client.scheduler.address,
                       "--learner", "rankrls", "--solver", "cg", "--ties", "exclude", "--alpha", "0.5",
                       "--max-rows", "40"]) == 0
    capsys.readouterr()
    model = sr.load(out)
    assert model.ties == "exclude"
    ref = sr.RankRLS(alpha=0.5, solver="cg", ties="exclude", tol=model.tol).fit(store, max_rows=40)
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-6, atol=1e-9)


def test_cli_rejects_both_scheduler_and_workers(tmp_path):
    with pytest.raises(SystemExit):
        pdist.main(["--store", "s", "--model", "m", "--scheduler", "tcp://x:1", "--workers", "2",
                    "--learner", "rankrls"])


def _tuple_store(path, n_features=30, n_queries=40, n_items=80, n_tuples=3000, seed=0, storage_options=None):
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    Q = sp.random(n_queries, n_features, density=0.15, format="csr", random_state=rng, dtype=np.float64)
    D = sp.random(n_items, n_features, density=0.15, format="csr", random_state=rng, dtype=np.float64)
    Wt = sp.random(n_features, n_features, density=0.1, random_state=rng) + sp.eye(n_features)
    S = (Q @ Wt @ D.T).toarray()
    q = rng.integers(0, n_queries, n_tuples)
    a, b = rng.integers(0, n_items, n_tuples), rng.integers(0, n_items, n_tuples)
    swap = S[q, a] < S[q, b]
    tup = np.stack([q, np.where(swap, b, a), np.where(swap, a, b)], axis=1)
    opts = {"storage_options": storage_options} if storage_options else {}
    store = sr.TupleStore.create(path, n_features, n_features, **opts)
    store.append(Q, D, tup)
    store = sr.TupleStore.open(path, **opts)
    return store, store.Q, store.D, tup   # the stored (float32) vectors


@pytest.mark.parametrize("where", ["local", "s3"])
def test_sgd_rounds_one_shard_is_partial_fit(client, tmp_path, where, request):
    """One shard: a round is exactly partial_fit on the same tuples (the scatter/gather changes nothing);
    from an s3:// TupleStore the workers read the tuples from the bucket themselves (its URL and options)."""
    if where == "s3":
        so = request.getfixturevalue("s3_server").storage_options
        ts, Q, D, tup = _tuple_store(request.getfixturevalue("s3_url") + "/t.zarr", n_tuples=600,
                                     storage_options=so)
        import pickle

        assert len(pickle.dumps(ts)) < 2000          # it travels as its URL and options, never its tuples
    else:
        ts, Q, D, tup = _tuple_store(tmp_path / "t.zarr", n_tuples=600)
    kw = dict(eta0=0.5, l1=1e-3, shrink_every=10, auto_refit=False)
    dist = srd.fit(sr.SparseSGDRanker(**kw), ts, client, rounds=3, steps_per_round=150, n_shards=1,
                   batch_size=64)
    local = sr.SparseSGDRanker(**kw)
    for r in range(3):
        t = tup[(r * 150 + np.arange(150)) % 600]
        for a in range(0, 150, 64):
            tt = t[a:a + 64]
            local.partial_fit(Q[tt[:, 0]], D[tt[:, 1]], D[tt[:, 2]])
    assert dist.t_ == local.t_ == 450
    np.testing.assert_allclose(dist.W_.toarray(), local.W_.toarray(), rtol=1e-12, atol=1e-15)


def test_sgd_round_that_loses_a_worker_is_run_again(client, tmp_path, monkeypatch):
    """A round whose gather meets a dead worker is redone from the same model: the same W as without."""
    from distributed.comm.core import CommClosedError

    ts, Q, D, tup = _tuple_store(tmp_path / "t.zarr", n_tuples=600)
    kw = dict(eta0=0.5, l1=1e-3, shrink_every=10, auto_refit=False)
    clean = srd.fit(sr.SparseSGDRanker(**kw), ts, client, rounds=3, steps_per_round=150, batch_size=64)
    real = client.gather
    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:                           # the second round loses a worker once
            raise CommClosedError("in <TCP ConnectionPool.gather>: Stream is closed")
        return real(*args, **kwargs)

    monkeypatch.setattr(client, "gather", flaky)
    dist = srd.fit(sr.SparseSGDRanker(**kw), ts, client, rounds=3, steps_per_round=150, batch_size=64)
    assert dist.rounds_retries_ == 1 and clean.rounds_retries_ == 0
    assert dist.t_ == clean.t_ == 450
    np.testing.assert_allclose(dist.W_.toarray(), clean.W_.toarray(), rtol=1e-12, atol=1e-15)


def test_sgd_rounds_average_is_sparse_and_close_to_single_machine(client, tmp_path):
    from streamrank.distributed._sgd import average_models

    ts, Q, D, tup = _tuple_store(tmp_path / "t.zarr")
    kw = dict(eta0=0.5, l1=1e-4, shrink_every=10, auto_refit=False)
    a = sr.SparseSGDRanker(**kw).partial_fit(Q[tup[:50, 0]], D[tup[:50, 1]], D[tup[:50, 2]])
    b = sr.SparseSGDRanker(**kw).partial_fit(Q[tup[50:100, 0]], D[tup[50:100, 1]], D[tup[50:100, 2]])
    avg = average_models([a, b])
    np.testing.assert_allclose(avg.W_.toarray(), (a.W_.toarray() + b.W_.toarray()) / 2, atol=1e-15)
    assert avg.t_ == 50 and avg.nnz_ == ((a.W_ + b.W_) != 0).sum()

    dist = srd.fit(sr.SparseSGDRanker(**kw), ts, client, rounds=4, steps_per_round=375, batch_size=128)
    assert dist.t_ == 4 * 375 and len(dist.rounds_history_) == 4
    single = sr.SparseSGDRanker(**kw)
    for a0 in range(0, 1500, 128):
        tt = tup[a0:min(a0 + 128, 1500)]
        single.partial_fit(Q[tt[:, 0]], D[tt[:, 1]], D[tt[:, 2]])
    err = {name: sr.metrics.tuple_error(m.predict(Q[tup[:, 0]], D[tup[:, 1]]), m.predict(Q[tup[:, 0]], D[tup[:, 2]]))
           for name, m in (("dist", dist), ("single", single))}
    assert err["dist"] <= err["single"] + 0.05, err


def test_cli_sgd_rounds_report_single_machine_quality(client, tmp_path, capsys):
    ts, Q, D, tup = _tuple_store(tmp_path / "t.zarr", n_tuples=1200)
    rep = tmp_path / "r.json"
    assert pdist.main(["--store", str(ts.path), "--model", str(tmp_path / "m"), "--scheduler",
                       client.scheduler.address, "--learner", "sgd-bilinear", "--rounds", "3",
                       "--steps-per-round", "200", "--eta0", "0.5", "--l1", "1e-4", "--compare-single",
                       "--report", str(rep)]) == 0
    r = json.loads(rep.read_text())
    assert r["t"] == 600 and r["workers"] == 2
    assert 0.0 <= r["tuple_error"] <= r["single_tuple_error"] + 0.1
    assert sr.load(tmp_path / "m").t_ == 600
    assert "one machine, same tuples" in capsys.readouterr().out


def test_cli_sparse_kernel_and_cg(client, store, tmp_path, capsys):
    for extra in (["--learner", "sparse-kernel", "--n-basis", "15", "--gamma", "0.1", "--seed", "2"],
                  ["--learner", "rankrls", "--solver", "cg"]):
        out = tmp_path / extra[1]
        assert pdist.main(["--store", str(store.path), "--model", str(out), "--scheduler",
                           client.scheduler.address, "--alpha", "0.5", "--max-rows", "60", *extra]) == 0
        model = sr.load(out)
        if extra[1] == "sparse-kernel":
            ref = sr.KernelRankRLS(gamma=0.1, alpha=0.5, n_basis=15, random_state=2).fit(store)
            np.testing.assert_allclose(model.dual_coef_, ref.dual_coef_, rtol=1e-8, atol=1e-10)
        else:
            ref = sr.RankRLS(alpha=0.5, solver="cg").fit(store, max_rows=60)
            np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-8, atol=1e-12)
    assert capsys.readouterr().out.count("distributed ") == 2


def test_pairwise_sgd_rounds(client, store):
    """One shard == sequential partial_fit on the same blocks; two shards: averaged, close in quality."""
    kw = dict(eta0=0.05, l1=1e-4, shrink_every=10, random_state=4)
    one = srd.fit(sr.PairwiseSGDRanker(**kw), store, client, rounds=3, steps_per_round=100, n_shards=1,
                  max_rows=120)
    local = sr.PairwiseSGDRanker(**kw)
    plan = store.plan(120)
    for r in range(3):
        b = store.read_block(*plan[r % len(plan)])
        local.partial_fit(b.X, b.y, b.row_qid(), n_pairs=100)
    assert one.t_ == local.t_ == 300
    np.testing.assert_allclose(one.coef_, local.coef_, rtol=1e-12, atol=1e-15)
    two = srd.fit(sr.PairwiseSGDRanker(**kw), store, client, rounds=4, steps_per_round=150, max_rows=120)
    assert two.t_ == 600 and len(two.rounds_history_) == 4
    single = sr.PairwiseSGDRanker(**kw).fit(store, n_pairs=1200)
    nd = {name: evaluate(store, m, k=10)["ndcg@10"].value for name, m in (("two", two), ("single", single))}
    assert nd["two"] >= nd["single"] - 0.1, nd


def test_cli_sgd_pairwise(client, store, tmp_path):
    rep = tmp_path / "r.json"
    assert pdist.main(["--store", str(store.path), "--model", str(tmp_path / "m"), "--scheduler",
                       client.scheduler.address, "--learner", "sgd-pairwise", "--rounds", "3",
                       "--steps-per-round", "100", "--max-rows", "120", "--compare-single",
                       "--report", str(rep)]) == 0
    r = json.loads(rep.read_text())
    assert r["t"] == 300 and 0 <= r["ndcg@10"] <= 1 and 0 <= r["single_ndcg@10"] <= 1
    assert sr.load(tmp_path / "m").t_ == 300


def test_sgd_round_reads_tuples_and_rows_in_bounded_pieces(tmp_path):
    """A round task never reads Q/D whole: rows come through a small row cache, same W as whole matrices."""
    from streamrank.distributed._sgd import round_task, _shard_segments, _shard_tuples

    ts, Q, D, tup = _tuple_store(tmp_path / "t.zarr", n_queries=400, n_items=800, n_tuples=2000)
    for n, k, r, steps in [(2000, 2, 3, 700), (7, 2, 5, 9), (2000, 3, 0, 5000)]:
        segs = _shard_segments(n, 1, k, r, steps)
        ids = np.concatenate([np.arange(a, b) for a, b in segs])
        np.testing.assert_array_equal(ids, _shard_tuples(type("S", (), {"n_tuples": n})(), 1, k, r, steps))
    kw = dict(eta0=0.5, l1=1e-3, shrink_every=10, auto_refit=False)
    fresh = sr.TupleStore.open(ts.path)
    small = round_task(1, fresh, sr.SparseSGDRanker(**kw), 2, 1, 1500, 64, cache_bytes=8192)
    assert fresh._cache is None                                   # Q and D were never read whole
    info = fresh.cache_info()
    assert info is not None and 0 < info["peak_nbytes"] <= 8192 and info["misses"] > 0
    whole = round_task(1, ts, sr.SparseSGDRanker(**kw), 2, 1, 1500, 64)   # the fast path (whole matrices)
    assert small.t_ == whole.t_ == 1500
    np.testing.assert_array_equal(small.W_.toarray(), whole.W_.toarray())


def test_sgd_refit_rounds_one_shard_equal_local_refit(client, tmp_path):
    """Refit rounds: one shard, one refit round over the tuples in store order == model.refit locally."""
    ts, Q, D, tup = _tuple_store(tmp_path / "t.zarr", n_tuples=600)
    kw = dict(eta0=0.5, l1=1e-3, shrink_every=10, auto_refit=True)
    dist = srd.fit(sr.SparseSGDRanker(**kw), ts, client, rounds=2, steps_per_round=300, n_shards=1,
                   batch_size=64, refit_rounds=1, refit_steps_per_round=600, cache_bytes=4096)
    local = sr.SparseSGDRanker(**kw)
    for a in range(0, 600, 64):
        tt = tup[a:a + 64]
        local.partial_fit(Q[tt[:, 0]], D[tt[:, 1]], D[tt[:, 2]])
    support = set(zip(*sr.SparseSGDRanker(**kw).partial_fit(Q[tup[:, 0]], D[tup[:, 1]], D[tup[:, 2]])
                      .W_.nonzero()))
    local.refit(ts, n_steps=600, batch_size=64, shuffle_buffer=0)
    assert dist.t_ == local.t_ == 600 and dist.refit_t_ == local.refit_t_ == 600
    np.testing.assert_allclose(dist.W_.toarray(), local.W_.toarray(), rtol=1e-12, atol=1e-15)
    assert set(zip(*dist.W_.nonzero())) <= support
    assert [h["phase"] for h in dist.rounds_history_] == ["sgd", "sgd", "refit"]


def test_sgd_rounds_normalize_one_scale_for_every_shard_equal_local(client, tmp_path):
    """SparseSGDRanker(normalize=): the client fixes the scales of all stored Q / D rows once; one shard's
    rounds (SGD, then a refit round) equal the local partial_fit / refit on rows scaled by them."""
    ts, Q, D, tup = _tuple_store(tmp_path / "t.zarr", n_tuples=600)
    kw = dict(eta0=0.5, l1=1e-3, shrink_every=10, auto_refit=True, init="zeros", normalize="standard")
    dist = srd.fit(sr.SparseSGDRanker(**kw), ts, client, rounds=2, steps_per_round=300, n_shards=1,
                   batch_size=64, refit_rounds=1, refit_steps_per_round=600)
    A, B = Q.toarray().astype(np.float64), D.toarray().astype(np.float64)
    s, u = A.std(axis=0), B.std(axis=0)
    s[s == 0], u[u == 0] = 1.0, 1.0
    np.testing.assert_allclose(dist.query_normalizer_.scale, s, rtol=1e-10)
    np.testing.assert_allclose(dist.item_normalizer_.scale, u, rtol=1e-10)
    import scipy.sparse as sp

    # rows scaled by the model's own scales (its arithmetic: float64(stored) / s), so the steps agree exactly
    s, u = dist.query_normalizer_.scale, dist.item_normalizer_.scale
    Qs, Ds = sp.csr_matrix(A / s), sp.csr_matrix(B / u)
    local = sr.SparseSGDRanker(**{**kw, "normalize": None})
    for a in range(0, 600, 64):
        tt = tup[a:a + 64]
        local.partial_fit(Qs[tt[:, 0]], Ds[tt[:, 1]], Ds[tt[:, 2]])

    class InOrder:            # the tuples in store order as float64 scaled rows (a tuple source would store float32)
        def batches(self, batch_size, shuffle_buffer, random_state):
            from types import SimpleNamespace

            for a in range(0, 600, batch_size):
                tt = tup[a:a + batch_size]
                yield SimpleNamespace(Q=Qs[tt[:, 0]], D_pos=Ds[tt[:, 1]], D_neg=Ds[tt[:, 2]])

    local.refit(InOrder(), n_steps=600, batch_size=64, shuffle_buffer=0)
    assert dist.t_ == 600 and dist.refit_t_ == 600
    np.testing.assert_allclose(dist.W_.toarray(), local.W_.toarray(), rtol=1e-9, atol=1e-12)


def test_sgd_refit_rounds_two_workers_keep_support_and_quality(client, tmp_path):
    ts, Q, D, tup = _tuple_store(tmp_path / "t.zarr")
    kw = dict(eta0=0.5, l1=1e-3, shrink_every=10)
    main = srd.fit(sr.SparseSGDRanker(auto_refit=False, **kw), ts, client, rounds=3, steps_per_round=500,
                   batch_size=128)
    dist = srd.fit(sr.SparseSGDRanker(auto_refit=True, **kw), ts, client, rounds=3, steps_per_round=500,
                   batch_size=128)
    assert len(client.scheduler_info()["workers"]) == 2
    assert dist.t_ == main.t_ == 1500 and dist.refit_t_ == 1500          # 3 refit rounds x 500 steps
    # the support is fixed by the main phase; averaging refit rounds keeps it
    assert set(zip(*dist.W_.nonzero())) == set(zip(*main.W_.nonzero()))
    assert not np.allclose(dist.W_.toarray(), main.W_.toarray())
    # one machine on the same tuples (shard after shard): main phase then refit
    from streamrank.distributed._sgd import refit_round_task, round_task

    single = sr.SparseSGDRanker(auto_refit=True, **kw)
    single.init_state(30, 30)
    for task in (round_task, refit_round_task):
        for r in range(3):
            for shard in range(2):
                single = task(shard, ts, single, 2, r, 500, 128)
    err = {name: sr.metrics.tuple_error(m.predict(Q[tup[:, 0]], D[tup[:, 1]]), m.predict(Q[tup[:, 0]], D[tup[:, 2]]))
           for name, m in (("dist", dist), ("single", single), ("main", main))}
    assert err["dist"] <= err["single"] + 0.05, err
    assert err["dist"] <= err["main"] + 0.02, err


def test_cli_sgd_refit(client, tmp_path):
    ts, Q, D, tup = _tuple_store(tmp_path / "t.zarr", n_tuples=1200)
    rep = tmp_path / "r.json"
    assert pdist.main(["--store", str(ts.path), "--model", str(tmp_path / "m"), "--scheduler",
                       client.scheduler.address, "--learner", "sgd-bilinear", "--rounds", "2",
                       "--steps-per-round", "200", "--eta0", "0.5", "--l1", "1e-3", "--refit", "--compare-single",
                       "--report", str(rep)]) == 0
    r = json.loads(rep.read_text())
    assert r["refit"] and r["refit_t"] == 400 and r["t"] == 400
    assert r["tuple_error"] <= r["single_tuple_error"] + 0.1
    assert sr.load(tmp_path / "m").refit_t_ == 400


def test_task_results_are_o_n2_bytes_whatever_the_block(store):
    """A statistics task returns its sums without the block-sized scratch workspace (what travels)."""
    import pickle

    from streamrank.distributed import SourceRef
    from streamrank.distributed._cluster import _chunks
    from streamrank.distributed._statistics import _fold_stats_task, _stats_task

    est = sr.RankRLS(solver="primal")
    plan = store.plan(10_000, split_groups=True)
    n = store.n_features
    st = _stats_task(plan, SourceRef(store), est)
    assert len(pickle.dumps(st)) < 40 * 8 * (n + 2) ** 2
    ref = est.accumulate_source(store, 10_000)
    np.testing.assert_allclose(st.G, ref.G, rtol=1e-12, atol=1e-12)
    folds = _fold_stats_task(plan, SourceRef(store), est, 3)
    assert all(len(pickle.dumps(f)) < 40 * 8 * (n + 2) ** 2 for f in folds)
    assert [len(t) for t in _chunks(list(range(9)), 4, n_workers=2)] == [1] * 9   # >= 4 tasks a worker
    assert [len(t) for t in _chunks(list(range(77)), 4, n_workers=2)][:2] == [4, 4]


def test_worker_side_failures_say_they_happened_on_a_worker(client, tmp_path):
    """"no store at X" raised on a worker, where X exists on the client, must say it came from a worker.

    The store is opened on the client (which plans from its metadata), then moved away before the tasks
    run: every worker fails to open it.  Was: a bare "no store at X", reading as if X were wrong here.
    """
    path = tmp_path / "moved.zarr"
    st = make_store(path, [1, 2])
    os.rename(path, tmp_path / "elsewhere.zarr")
    with pytest.raises(FileNotFoundError) as e:
        srd.fit(sr.RankRLS(alpha=1.0, solver="primal"), st, client, max_rows=40)
    msg = str(e.value)
    assert f"no store at {path} on dask worker tcp://" in msg and ", pid " in msg
    assert "storage shared with the workers" in msg
    # a read that fails on a worker says so too (here: damaged chunk files of X)
    path = tmp_path / "damaged.zarr"
    make_store(path, [1, 2])
    for f in (path / "X").rglob("*"):
        if f.is_file() and f.name != "zarr.json":
            f.write_bytes(b"not a chunk")
    st = sr.GroupStore.open(path)
    with pytest.raises(Exception, match=r"on dask worker tcp://\S+ \(host "):
        srd.fit(sr.RankRLS(alpha=1.0, solver="primal"), st, client, max_rows=40)

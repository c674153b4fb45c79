"""The metrics kernels' plain-Python twins (issue 22): the kernels' values bit for bit, and no numba when small.

Every call of a metrics kernel goes through ``metrics._twin_calls.run``,
which runs ``python_twin(kernel)`` while ``use_twin`` allows it.  Here each
routed kernel is run both ways on the same arguments (hypothesis cases and
the edge cases) and every output compared byte for byte; the public metrics
are compared under ``twins(True)`` and ``twins(False)`` with the inputs
callers pass (float32, int, read-only, strided); and fresh interpreters show
that a small evaluation imports no numba while a big one takes the kernel.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import streamrank as sr
from streamrank._numba import TWIN_BUDGET_S, python_twin, twins
from streamrank.metrics import _kernels as K
from streamrank.metrics._checks import _byte_words
from streamrank.metrics._twin_calls import COSTS, err_seconds, twin_seconds

ROUTED = ("_ndcg_groups", "_average_precision_groups", "err_groups", "hits_groups", "reciprocal_rank_groups",
          "_cindex_groups", "auc_counts", "trec_rank_groups", "_stable_order_into")


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _both(kernel, *args):
    """Run ``kernel`` and its twin on copies of ``args``; assert every argument and the result agree bitwise."""
    ka = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    ta = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    got_k = kernel(*ka)
    got_t = python_twin(kernel)(*ta)
    for i, (u, v) in enumerate(zip(ka, ta)):     # outputs, inputs and scratch (copies of the same bytes)
        if isinstance(u, np.ndarray):
            assert _same(u, v), (kernel.__name__, i, u, v)
    if isinstance(got_k, tuple):
        assert len(got_k) == len(got_t) and all(float(x) == float(y) for x, y in zip(got_k, got_t)), (got_k, got_t)
        assert [np.asarray(x).dtype.kind for x in got_k] == [np.asarray(x).dtype.kind for x in got_t]
    elif isinstance(got_k, np.ndarray):
        assert _same(got_k, got_t)
    else:
        assert got_k == got_t
    return got_k


def _all_kernels(y, s, gp, ks, *, exp2=True, iy=None, igp=None, ids=None):
    """Every routed kernel, both ways, on boundary-typed arrays (C, writeable float64 / int64)."""
    y, s = np.ascontiguousarray(y, np.float64), np.ascontiguousarray(s, np.float64)
    gp, ks = np.ascontiguousarray(gp, np.int64), np.ascontiguousarray(ks, np.int64)
    iy, igp = (y, gp) if iy is None else (np.ascontiguousarray(iy, np.float64), np.ascontiguousarray(igp, np.int64))
    g, nk = len(gp) - 1, len(ks)
    sizes = np.diff(gp)
    max_n = max(1, int(sizes.max(initial=0)), int(np.diff(igp).max(initial=0)))
    pos = np.concatenate(([0], np.cumsum(y > 0)))
    n_rel = (pos[gp[1:]] - pos[gp[:-1]]).astype(np.int64)
    out = np.full((g, nk), -7.0)
    _both(K._ndcg_groups, y, s, gp, iy, igp, ks, exp2, out, np.empty(max_n), np.empty(nk),
          np.empty(2 * max_n, np.int64))
    _both(K._average_precision_groups, y, s, gp, n_rel, ks, out, np.empty(max_n), np.empty(2 * max_n, np.int64))
    _both(K.err_groups, y, s, gp, ks, exp2, 4.0, out)
    _both(K.hits_groups, y, s, gp, ks, out)
    _both(K.reciprocal_rank_groups, y, s, gp, ks, out)
    cnt = np.full(g, -1, np.int64)
    _both(K._cindex_groups, y, s, gp, cnt, cnt, cnt, np.full(4 * max_n + 1, -1, np.int64))
    if len(y):
        _both(K.auc_counts, (y > 0).astype(np.float64), s)
        for direction in (1.0, -1.0):
            _both(K._stable_order_into, s, 0, len(s), direction, np.empty(2 * len(s), np.int64))
    if ids is None:
        ids = np.array([f"d{(i * 7919) % 1000:03d}x{i}" for i in range(len(y))])
    _both(K.trec_rank_groups, s, _byte_words(ids), gp, np.full(len(y), -1.0))


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 14), min_size=1, max_size=7), seed=st.integers(0, 2**32 - 1),
       levels=st.integers(1, 5), score_levels=st.integers(0, 12), graded=st.sampled_from(["int", "float"]),
       ks=st.lists(st.sampled_from([0, 1, 2, 3, 5, 10]), min_size=1, max_size=3), exp2=st.booleans())
def test_every_twin_gives_its_kernels_bits(sizes, seed, levels, score_levels, graded, ks, exp2):
    """Random groups (empty and one-row ones included), integer or fractional grades, scores with few levels (ties)
    or continuous (``score_levels=0``), several cut-offs, both gains."""
    rng = np.random.default_rng(seed)
    gp = np.concatenate(([0], np.cumsum(sizes)))
    n = int(gp[-1])
    y = rng.integers(0, levels, n).astype(np.float64) if graded == "int" else np.round(rng.uniform(0, 4, n), 3)
    s = rng.normal(size=n) if score_levels == 0 else rng.integers(0, score_levels, n).astype(np.float64)
    _all_kernels(y, s, gp, ks, exp2=exp2)


@pytest.mark.parametrize("case", ["no groups", "empty groups", "one-row groups", "all tied", "no relevant",
                                  "negative grades", "signed zeros and infinities", "big group"])
def test_twins_on_the_edge_cases(case):
    rng = np.random.default_rng(11)
    y, s, gp = {
        "no groups": (np.zeros(0), np.zeros(0), [0]),
        "empty groups": (np.array([1.0, 0, 2]), np.array([0.3, 0.1, 0.2]), [0, 0, 3, 3, 3]),
        "one-row groups": (np.array([1.0, 0, 2, 1]), np.array([0.5, 0.5, 0.1, 0.9]), [0, 1, 2, 3, 4]),
        "all tied": (rng.integers(0, 3, 40).astype(float), np.full(40, 0.25), [0, 25, 40]),
        "no relevant": (np.zeros(9), rng.normal(size=9), [0, 4, 9]),
        "negative grades": (np.array([1.0, -3, -2, 0, -2, -1, -4, -4]), np.array([.1, .9, .5, .3, .2, .3, .2, .1]),
                            [0, 5, 8]),
        "signed zeros and infinities": (np.array([2.0, 1, 0, 1, 0, 2]), np.array([0.0, -0.0, np.inf, -np.inf, 0.0, 1.0]),
                                        [0, 6]),
        "big group": (rng.integers(0, 5, 700).astype(float), np.round(rng.normal(size=700), 1), [0, 700]),
    }[case]
    for ks in ([10], [0, 1, 3]):
        _all_kernels(y, s, gp, ks, exp2=True)
        _all_kernels(y, s, gp, ks, exp2=False)


def test_twins_with_judged_lists_and_nan_scores():
    """qrels give the ideal DCG its own lists (``iy``/``igp``); NaN scores (refused at the metrics' boundary) still
    sort last in both ``_stable_order`` and the concordance count, as the kernels do."""
    rng = np.random.default_rng(5)
    y, s, gp = rng.integers(0, 3, 30).astype(float), rng.normal(size=30), np.array([0, 10, 10, 30])
    iy, igp = rng.integers(0, 4, 17).astype(float), np.array([0, 5, 5, 17])
    _all_kernels(y, s, gp, [3, 0], iy=iy, igp=igp)
    s[[2, 7, 20]] = np.nan
    for direction in (1.0, -1.0):
        _both(K._stable_order_into, s, 0, 30, direction, np.empty(60, np.int64))
    cnt = np.zeros(3, np.int64)
    _both(K._cindex_groups, y, s, gp, cnt, cnt, cnt, np.empty(4 * 20 + 1, np.int64))
    with twins(True):
        twin = K.cindex_group(y, s, 0, 10)
    with twins(False):
        assert K.cindex_group(y, s, 0, 10) == twin


def test_trec_twin_reports_the_same_repeated_id():
    ids = np.array(["b", "a", "c", "a", "x", "y"])
    s = np.zeros(6)
    row = _both(K.trec_rank_groups, s, _byte_words(ids), np.array([0, 4, 6], np.int64), np.zeros(6))
    assert row == 3
    for on in (True, False):
        with twins(on), pytest.raises(ValueError, match="'a' appears twice in query 0"):
            sr.metrics.precision([1, 0, 0, 1, 0, 1], s, [0, 0, 0, 0, 1, 1], ties="trec", doc_ids=ids)


def _public_values(y, s, qid, ids):
    """Every public array metric, per query, with the options that reach a different kernel call."""
    m = sr.metrics
    out = {}
    for name, fn in (("ndcg", m.ndcg), ("err", m.err), ("map", m.mean_average_precision), ("p", m.precision),
                     ("recall", m.recall), ("rr", m.reciprocal_rank)):
        for k in (None, 3, [1, 5, 10]):
            res = fn(y, s, qid, k=k, per_query=True)
            out[(name, str(k))] = res if not isinstance(res, dict) else np.concatenate(list(res.values()))
        out[(name, "trec")] = fn(y, s, qid, k=5, per_query=True, gain="linear", empty="zero", ties="trec", doc_ids=ids)
    qrels = {q: {f"doc{i}": float(i % 3) for i in range(7)} for q in np.unique(qid)[::2]}
    out[("ndcg", "qrels")] = m.ndcg(y, s, qid, k=5, per_query=True, qrels=qrels, doc_ids=ids)
    out[("disagreement", "half")] = m.disagreement(y, s, qid, per_query=True)
    out[("disagreement", "error")] = m.disagreement(y, s, qid, ties="error", per_query=True)
    out[("auc", "")] = np.float64(m.auc((np.asarray(y) > 0).astype(int), s))
    return out


@pytest.mark.parametrize("layout", ["float64", "float32 read-only", "int labels, strided scores"])
def test_public_metrics_are_the_same_with_and_without_twins(layout, monkeypatch):
    rng = np.random.default_rng(3)
    n = 400
    qid = np.repeat(np.arange(30), rng.multinomial(n - 30, np.ones(30) / 30) + 1)
    y = rng.integers(0, 3, n).astype(np.float64)
    s = np.round(rng.normal(size=n), 1)
    ids = np.array([f"doc{i % 50}" for i in range(n)])
    ids = np.char.add(ids, qid.astype(str)).astype(str)
    ids = np.array([f"{d}-{i}" for i, d in enumerate(ids)])
    if layout == "float32 read-only":
        y, s = y.astype(np.float32), s.astype(np.float32)
        y.setflags(write=False)
        s.setflags(write=False)
    elif layout == "int labels, strided scores":
        y = y.astype(np.int64)
        s = np.repeat(s, 2)[::2]
        assert not s.flags.c_contiguous
    from streamrank.metrics import _twin_calls

    ran = []
    monkeypatch.setattr(_twin_calls, "python_twin", lambda kernel: ran.append(kernel.__name__) or python_twin(kernel))
    with twins(True):
        got = _public_values(y, s, qid, ids)
    assert set(ran) == set(ROUTED) - {"_stable_order_into"}         # every call site ran its twin
    ran.clear()
    with twins(False):
        want = _public_values(y, s, qid, ids)
    assert not ran
    assert got.keys() == want.keys()
    for key in want:
        assert _same(got[key], want[key]), key
    assert np.isfinite(want[("ndcg", "None")]).any()


def test_the_evaluator_with_split_groups_is_the_same_with_and_without_twins():
    rng = np.random.default_rng(8)
    y, s = rng.integers(0, 3, 60).astype(float), rng.normal(size=60)
    res = {}
    for on in (True, False):
        with twins(on):
            ev = sr.metrics.RankingEvaluator(5, "ndcg@1,5,map,mrr,p@5,recall@5,err@5,disagreement", keep_per_query=True)
            ev.update(y[:25], s[:25], [0, 10, 25], qid=[1, 2], group_size=[10, 30], group_offset=[0, 0])
            ev.update(y[25:45], s[25:45], [0, 15, 20], qid=[2, 3], group_size=[30, 20], group_offset=[15, 0])
            ev.update(y[45:], s[45:], [0, 15], qid=[3], group_size=[20], group_offset=[5])
            res[on] = ev.result()
    for name, r in res[False].items():
        assert _same(res[True][name].per_query, r.per_query) and res[True][name].value == r.value, name


def test_estimates_cover_every_routed_kernel_and_grow_with_the_work():
    assert set(COSTS) == set(ROUTED)
    for name in ROUTED:
        kernel = getattr(K, name)
        small, big = twin_seconds(kernel, [0, 10, 30]), twin_seconds(kernel, np.arange(0, 30_001, 30))
        assert 0 < small < big, name
    mq_test = np.concatenate(([0], np.cumsum(np.full(156, 2874 // 156))))   # MQ2008 Fold1 test's size
    default = sum(twin_seconds(getattr(K, k), mq_test) for k in ("_ndcg_groups", "_cindex_groups",
                                                                   "_average_precision_groups"))
    assert default < TWIN_BUDGET_S                     # evaluate's default metrics fit the budget ...
    assert twin_seconds(K._ndcg_groups, np.arange(0, 40_001, 20)) > TWIN_BUDGET_S    # ... 40,000 rows do not
    tied, untied = np.zeros(119), np.arange(119.0)
    gp, ks = np.array([0, 119]), np.array([10])
    assert err_seconds(K.err_groups, tied, gp, ks) > 4 * err_seconds(K.err_groups, untied, gp, ks)


def _fresh(code: str, tmp_path) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON line last, to which ``numba`` imported is added."""
    probe = code + "\nimport sys, json\nprint(json.dumps({**RESULT, 'numba': 'numba' in sys.modules}))\n"
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def _letor(n_rows, n_features, seed=0):
    from streamrank.datasets.synthetic import make_letor_like

    return make_letor_like(n_rows=n_rows, n_features=n_features, random_state=seed)


def test_small_metrics_import_no_numba_and_a_big_input_takes_the_kernel(tmp_path):
    X, y, qid = _letor(3_000, 4)
    s = X @ np.arange(1.0, 5.0)
    np.save(tmp_path / "y.npy", y)
    np.save(tmp_path / "s.npy", s)
    np.save(tmp_path / "q.npy", qid)
    code = ("import numpy as np, streamrank as sr\n"
            "y, s, q = np.load('y.npy'), np.load('s.npy'), np.load('q.npy')\n"
            "RESULT = {'ndcg': sr.metrics.ndcg(y, s, q, k=10), 'dis': sr.metrics.disagreement(y, s, q)}\n")
    got = _fresh(code, tmp_path)
    assert not got["numba"], "ndcg and disagreement of 3,000 rows imported numba"
    with twins(False):
        assert got["ndcg"] == sr.metrics.ndcg(y, s, qid, k=10)
        assert got["dis"] == sr.metrics.disagreement(y, s, qid)
    big = ("import numpy as np, streamrank as sr\n"
           "y, s, q = (np.tile(np.load(f), 20) for f in ('y.npy', 's.npy', 'q.npy'))\n"
           "q = q + np.repeat(np.arange(20), 3000) * 10**6\n"
           "RESULT = {'ndcg': sr.metrics.ndcg(y, s, q, k=10), 'ready': sr._numba.numba_ready()}\n")
    got = _fresh(big, tmp_path)
    assert got["numba"] and got["ready"], "60,000 rows (over the twins' budget) did not take the kernel"


def test_evaluating_a_small_store_imports_no_numba(tmp_path):
    """The library call and the CLI's ``evaluate`` (in-process ``main``; the console script preloads numba)."""
    X, y, qid = _letor(1_200, 12)
    store = sr.GroupStore.create(str(tmp_path / "te.zarr"), n_features=12)
    store.append(X, y, qid, batch_id="b")
    model = sr.RankRLS(alpha=1.0).fit(X, y, qid)
    sr.save(model, str(tmp_path / "m.zarr"))
    code = ("import contextlib, io, json, streamrank as sr\nfrom streamrank.cli import main\n"
            "res = sr.metrics.evaluate(sr.GroupStore.open('te.zarr'), sr.load('m.zarr'), metrics='ndcg@10,map,"
            "disagreement,mrr,p@10,err@10,auc')\n"
            "buf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):\n"
            "    assert main(['evaluate', '--model', 'm.zarr', '--store', 'te.zarr', '--json']) == 0\n"
            "RESULT = {'lib': {k: v.value for k, v in res.items()}, 'cli': json.loads(buf.getvalue())['metrics']}\n")
    got = _fresh(code, tmp_path)
    assert not got["numba"], "evaluating 1,200 rows imported numba"
    with twins(False):
        want = sr.metrics.evaluate(sr.GroupStore.open(str(tmp_path / "te.zarr")), model,
                                   metrics="ndcg@10,map,disagreement,mrr,p@10,err@10,auc")
    assert got["lib"] == {k: v.value for k, v in want.items()}
    assert got["cli"] == {k: want[k].value for k in ("ndcg@10", "disagreement", "map")}


def test_the_twins_benchmark_smoke():
    """benchmarks/metrics_twins.py --smoke: every call site's twin gives the kernel's bits (it returns 1 if not)."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "metrics_twins.py"
    spec = importlib.util.spec_from_file_location("_bench_metrics_twins", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--smoke", "--repeat", "1"]) == 0

"""trec_eval (through pytrec_eval) is the oracle: with ``gain="linear", empty="zero", ties="trec"`` and the
documents' ids, every metric equals trec_eval's per query, on real LETOR test folds and three kinds of scores."""
from __future__ import annotations

import json

import numpy as np
import pytest

import streamrank as sr
from streamrank.datasets._paths import data_dir
from streamrank.datasets.letor import DATASETS, letor_member, open_letor

pytrec_eval = pytest.importorskip("pytrec_eval")
M = sr.metrics

# streamrank call -> trec_eval measure (the mapping of the metrics module docstring)
CUTS = (1, 3, 5, 10)
MEASURES = {"ndcg_cut.1,3,5,10", "ndcg", "map", "map_cut.5,10", "P.1,5,10", "set_P", "recall.5,10", "set_recall",
            "recip_rank"}
TREC = dict(gain="linear", empty="zero", ties="trec")


def _ours(y, s, qid, doc_ids, qrels=None):
    """{trec_eval measure name: per-query values (original qid -> value)}."""
    kw = dict(doc_ids=doc_ids, return_details=True, qrels=qrels, **TREC)
    out = {}
    for k, r in M.ndcg(y, s, qid, k=list(CUTS), **kw).items():
        out[f"ndcg_cut_{k}"] = r
    out["map"] = M.mean_average_precision(y, s, qid, **kw)
    for k, r in M.mean_average_precision(y, s, qid, k=[5, 10], **kw).items():
        out[f"map_cut_{k}"] = r
    for k, r in M.precision(y, s, qid, k=[1, 5, 10], **kw).items():
        out[f"P_{k}"] = r
    for k, r in M.recall(y, s, qid, k=[5, 10], **kw).items():
        out[f"recall_{k}"] = r
    out["recip_rank"] = M.reciprocal_rank(y, s, qid, **kw)
    out["ndcg"] = M.ndcg(y, s, qid, k=None, **kw)
    out["set_P"] = M.precision(y, s, qid, k=None, **kw)
    out["set_recall"] = M.recall(y, s, qid, k=None, **kw)
    return out


def _letor(name, max_queries=None, split="test"):
    path = data_dir() / "letor" / DATASETS[name]["archive"]
    if not path.exists():
        pytest.skip(f"{path} is not available")
    ys, qs, docs, feats = [], [], [], []
    with open_letor(path, letor_member(name, 1, split)) as (f, _):
        for raw in f:
            line, _, comment = raw.decode().partition("#")
            parts = line.split()
            q = int(parts[1].split(":")[1])
            if max_queries is not None and q not in qs and len(set(qs)) >= max_queries:
                break
            ys.append(float(parts[0]))
            qs.append(q)
            docs.append(comment.split("=")[1].split()[0])
            feats.append([float(p.split(":")[1]) for p in parts[2:]])
    return np.asarray(ys), np.asarray(qs), np.asarray(docs), np.asarray(feats)


# both folds are slow: the fixture parses a LETOR fold and fits on it (MQ2008: 2.6 s wall under load 7 before the
# first test, ~1.5 CPU-s in all with its cells; OHSUMED: ~3 CPU-s more); the quick loop keeps the metrics' own
# plain-python references (tests/reference/metrics_reference.py)
@pytest.fixture(scope="module", params=[pytest.param("MQ2008", marks=pytest.mark.slow),
                                        pytest.param("OHSUMED", marks=pytest.mark.slow)])
def fold(request):
    """Fold 1's test split, and a RankRLS fitted on its validation split (the scores of a real model)."""
    y, qid, docs, X = _letor(request.param)
    yv, qv, _, Xv = _letor(request.param, split="vali")
    return request.param, y, qid, docs, X, sr.RankRLS(alpha=1.0).fit(Xv, yv, qv)


def _scores(kind, X, y, qid, model=None):
    """A model's scores (fitted on other rows; on these rows if none given), random, or three levels."""
    rng = np.random.default_rng(0)
    if kind == "fitted":
        return (model or sr.RankRLS(alpha=1.0).fit(X, y, qid)).predict(X)
    if kind == "random":
        return rng.random(len(y))
    return rng.integers(0, 3, len(y)).astype(float)          # heavily tied: three score levels


def _qrels(y, qid, docs):
    q = {}
    for yi, qi, di in zip(y, qid, docs):
        q.setdefault(str(qi), {})[str(di)] = int(yi)
    return q


def _trec(qrels, run, measures=MEASURES):
    return pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)


@pytest.mark.parametrize("kind", ["fitted", "random", "tied"])
def test_every_metric_equals_trec_eval_per_query(fold, kind):
    name, y, qid, docs, X, model = fold
    s = _scores(kind, X, y, qid, model)
    qrels = _qrels(y, qid, docs)
    run = {}
    for si, qi, di in zip(s, qid, docs):
        run.setdefault(str(qi), {})[str(di)] = float(si)
    want = _trec(qrels, run)
    ours = _ours(y, s, qid, docs)
    assert len(want) == len(np.unique(qid))
    worst = 0.0
    for measure, res in ours.items():
        got = res.by_qid()
        assert res.n_queries == len(want) and res.n_skipped == 0, measure
        for q, values in want.items():
            assert got[int(q)] == pytest.approx(values[measure], abs=1e-12), (name, kind, measure, q)
            worst = max(worst, abs(got[int(q)] - values[measure]))
        assert res.value == pytest.approx(np.mean([v[measure] for v in want.values()]), abs=1e-12)
    assert worst <= 1e-12


def test_ties_differ_from_trec_order_only_where_scores_tie(fold):
    """The expected-value default equals trec_eval where no score ties, and differs with heavy ties."""
    name, y, qid, docs, X, model = fold
    s = _scores("tied", X, y, qid)
    e = M.mean_average_precision(y, s, qid, per_query=True, empty="zero")
    t = M.mean_average_precision(y, s, qid, per_query=True, empty="zero", ties="trec", doc_ids=docs)
    assert np.max(np.abs(e - t)) > 1e-3
    r = _scores("random", X, y, qid)
    np.testing.assert_allclose(M.mean_average_precision(y, r, qid, per_query=True, empty="zero"),
                               M.mean_average_precision(y, r, qid, per_query=True, empty="zero", ties="trec",
                                                        doc_ids=docs), atol=1e-15)


def test_truncated_run_takes_ideal_and_recall_from_qrels(fold):
    """A run that returns only the top 5 documents of each query: the ideal DCG, recall and AP divide by the
    judgments (qrels), as trec_eval does; queries of the run without judgments are skipped."""
    name, y, qid, docs, X, model = fold
    s = _scores("fitted", X, y, qid, model)
    qrels = _qrels(y, qid, docs)
    keep = np.zeros(len(y), bool)
    for q in np.unique(qid):
        rows = np.flatnonzero(qid == q)
        keep[rows[np.argsort(-s[rows], kind="stable")[:5]]] = True
    run = {}
    for si, qi, di in zip(s[keep], qid[keep], docs[keep]):
        run.setdefault(str(qi), {})[str(di)] = float(si)
    want = _trec(qrels, run)
    ours = _ours(y[keep], s[keep], qid[keep], docs[keep], qrels=qrels)
    for measure, res in ours.items():
        got = res.by_qid()
        for q, values in want.items():
            assert got[int(q)] == pytest.approx(values[measure], abs=1e-12), (name, measure, q)
    # without the qrels the ideal comes from the 5 rows: a different (larger) number somewhere
    plain = M.ndcg(y[keep], s[keep], qid[keep], k=10, per_query=True, doc_ids=docs[keep], **TREC)
    assert np.any(plain > ours["ndcg_cut_10"].per_query + 1e-6)
    # a query of the run that the qrels do not know is skipped, as trec_eval leaves it out
    q0 = str(qid[0])
    partial = {q: v for q, v in qrels.items() if q != q0}
    res = M.ndcg(y, s, qid, k=10, doc_ids=docs, qrels=partial, return_details=True, **TREC)
    assert res.n_skipped == 1 and int(q0) not in res.by_qid()
    assert set(_trec(partial, {q0: run[q0], **run})) == {str(q) for q in res.by_qid()}


@pytest.mark.slow   # a fit, a run file and the CLI: ~2 CPU-s
def test_run_file_and_cli_equal_trec_eval(tmp_path, capsys):
    y, qid, docs, X = _letor("MQ2008", max_queries=40)
    s = np.round(_scores("fitted", X, y, qid), 2)            # two decimals: ties the file keeps
    rows = []
    for q in np.unique(qid):
        r = np.flatnonzero(qid == q)
        for rank, i in enumerate(r[np.argsort(-s[r], kind="stable")], 1):
            rows.append(f"{q} Q0 {docs[i]} {rank} {s[i]:.2f} streamrank")
    (tmp_path / "run.txt").write_text("\n".join(rows) + "\n")
    (tmp_path / "qrels.txt").write_text("".join(f"{q} 0 {d} {int(v)}\n" for q, d, v in zip(qid, docs, y)))
    qrels = _qrels(y, qid, docs)
    run = {}
    for si, qi, di in zip(s, qid, docs):
        run.setdefault(str(qi), {})[str(di)] = float(f"{si:.2f}")
    want = _trec(qrels, run, {"ndcg_cut.1,3,5,10", "map", "recip_rank", "P.10"})
    mean = {m: np.mean([v[m] for v in want.values()]) for m in next(iter(want.values()))}
    res = M.evaluate_run(tmp_path / "run.txt", tmp_path / "qrels.txt", "ndcg@1,3,5,10,map,mrr,p@10",
                         gain="linear", empty="zero", keep_per_query=True)
    for ours, theirs in [("ndcg@1", "ndcg_cut_1"), ("ndcg@10", "ndcg_cut_10"), ("map", "map"),
                         ("mrr", "recip_rank"), ("p@10", "P_10")]:
        assert res[ours].value == pytest.approx(mean[theirs], abs=1e-12)
        assert res[ours].by_qid() == pytest.approx({q: v[theirs] for q, v in want.items()}, abs=1e-12)
    from streamrank.cli import main

    assert main(["evaluate", "--run", str(tmp_path / "run.txt"), "--qrels", str(tmp_path / "qrels.txt"),
                 "--metrics", "ndcg@1,3,5,10,map,mrr,p@10,err@10", "--gain", "linear", "--empty", "zero",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["metrics"]["ndcg@5"] == pytest.approx(mean["ndcg_cut_5"], abs=1e-12)
    assert out["metrics"]["map"] == pytest.approx(mean["map"], abs=1e-12)
    assert out["n_queries"]["map"] == len(want) and out["n_skipped"]["map"] == 0 and out["ties"] == "trec"
    assert "err@10" in out["metrics"]

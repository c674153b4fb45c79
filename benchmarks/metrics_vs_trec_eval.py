"""Queries/s of streamrank's metrics against trec_eval (pytrec_eval), same queries, same run, same numbers.

Synthetic queries of 20-200 documents with grades 0-2 and two kinds of
scores (continuous; three levels, so heavily tied).  For each the best of
``--repeat`` timings of

* pytrec_eval ``RelevanceEvaluator(qrels, measures).evaluate(run)`` over
  ``ndcg_cut.1,3,5,10 map P.10 recall.10 recip_rank`` (baseline; the dicts it
  needs are built outside the timing),
* streamrank, the same measures with ``ties="trec"`` (trec_eval's order,
  from the doc ids), ``gain="linear"``, ``empty="zero"``,
* streamrank with the default ``ties="expected"`` (closed-form expectation),

is printed with the speed ratio to the baseline and the largest per-query
difference between streamrank's ``ties="trec"`` values and trec_eval's
(it must be <= 1e-12).

    python benchmarks/metrics_vs_trec_eval.py            # 20,000 queries
    python benchmarks/metrics_vs_trec_eval.py --smoke    # 200 queries, seconds
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

MEASURES = {"ndcg_cut.1,3,5,10", "map", "P.10", "recall.10", "recip_rank"}
PAIRS = [("ndcg@1", "ndcg_cut_1"), ("ndcg@3", "ndcg_cut_3"), ("ndcg@5", "ndcg_cut_5"), ("ndcg@10", "ndcg_cut_10"),
         ("map", "map"), ("p@10", "P_10"), ("recall@10", "recall_10"), ("mrr", "recip_rank")]


def make_queries(n_queries, seed=0):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(20, 201, n_queries)
    qid = np.repeat(np.arange(n_queries), sizes)
    y = rng.choice([0, 0, 0, 1, 2], size=len(qid)).astype(np.float64)
    docs = np.array([f"D{i:08d}" for i in rng.permutation(len(qid))])
    return y, qid, docs


def _streamrank(y, s, qid, docs, ties):
    import streamrank as sr

    ev = sr.metrics.RankingEvaluator(10, "ndcg@1,3,5,10,map,p@10,recall@10,mrr", keep_per_query=True,
                                     gain="linear", empty="zero", ties=ties)
    gp = np.concatenate(([0], np.flatnonzero(np.diff(qid)) + 1, [len(qid)]))
    ev.update(y, s, gp, qid=qid[gp[:-1]], doc_ids=docs if ties == "trec" else None)
    return ev.result()


def _best(fn, repeat):
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queries", type=int, default=20_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--smoke", action="store_true", help="200 queries, one repeat")
    args = p.parse_args(argv)
    try:
        import pytrec_eval
    except ImportError:
        print("metrics_vs_trec_eval needs pytrec_eval: pip install 'streamrank[test]'", file=sys.stderr)
        return 2
    n_queries, repeat = (200, 1) if args.smoke else (args.queries, args.repeat)
    y, qid, docs = make_queries(n_queries)
    rng = np.random.default_rng(1)
    qrels = {}
    for yi, qi, di in zip(y.tolist(), qid.tolist(), docs.tolist()):
        qrels.setdefault(str(qi), {})[di] = int(yi)
    _streamrank(y[:100], rng.random(100), qid[:100], docs[:100], "trec")      # compile outside the timing
    print(f"{n_queries:,} queries, {len(y):,} documents; best of {repeat}")
    print(f"{'scores':<12} {'evaluator':<34} {'seconds':>8} {'queries/s':>12} {'vs trec_eval':>13}")
    worst = 0.0
    for kind, s in (("continuous", rng.random(len(y))), ("3 levels", rng.integers(0, 3, len(y)).astype(float))):
        run = {}
        for si, qi, di in zip(s.tolist(), qid.tolist(), docs.tolist()):
            run.setdefault(str(qi), {})[di] = si
        evaluator = pytrec_eval.RelevanceEvaluator(qrels, MEASURES)
        t_base, want = _best(lambda: evaluator.evaluate(run), repeat)
        t_trec, got = _best(lambda: _streamrank(y, s, qid, docs, "trec"), repeat)
        t_exp, _ = _best(lambda: _streamrank(y, s, qid, docs, "expected"), repeat)
        for ours, theirs in PAIRS:
            per = got[ours].by_qid()
            worst = max(worst, max(abs(per[int(q)] - v[theirs]) for q, v in want.items()))
        for name, t in (("pytrec_eval (trec_eval 9.x)", t_base), ("streamrank ties='trec'", t_trec),
                        ("streamrank ties='expected'", t_exp)):
            print(f"{kind:<12} {name:<34} {t:8.3f} {n_queries / t:12,.0f} {t_base / t:12.2f}x")
    print(f"largest per-query difference from trec_eval over {len(PAIRS)} measures: {worst:.1e}")
    if worst > 1e-12:
        print("FAILED: streamrank's ties='trec' values differ from trec_eval's")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

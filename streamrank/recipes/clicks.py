"""Simulated click logs on real graded data (MQ2008, OHSUMED) -> GroupStore with click/position columns.

The standard simulation of unbiased learning-to-rank studies (Joachims,
Swaminathan and Schnabel 2017, WSDM), so that position bias — and its
correction — is measurable on real relevance labels
(``streamrank.datasets.clicks`` has the model):

1. a *logging ranker*: linear RankRLS (alpha 1) fitted on the graded labels
   of ``--log-queries`` randomly drawn queries of the split;
2. every query of the split is issued ``--sessions`` times; a session shows
   the logging ranker's top ``--k`` documents;
3. position-based click model: the document at rank r is examined with
   probability p(r) = (1/r)^eta (``--eta``) and an examined document of
   label rel is clicked with probability noise + (1 − noise)(2^rel − 1)/(2^max − 1)
   (``--noise``; max = the dataset's largest label).

The store ``--out`` holds one row per shown document: its features, the
click as the target, the session as the query id, and the row columns
``click`` and ``position`` (:mod:`streamrank.io.row_columns`).
``--randomized-out`` also writes ``--randomized-sessions`` sessions per query
whose top k is shown in a uniformly random order (result randomization), from
which ``--propensity estimate:STORE`` estimates p (Joachims et al. 2017, §5).
Train and compare with the graded vali/test splits (``streamrank recipe letor``):

    streamrank recipe clicks --dataset MQ2008 --fold 1 --eta 1 --out clicks.zarr \\
        --randomized-out randomized.zarr
    streamrank fit --store clicks.zarr --model ips.zarr --learner rankrls --ips --propensity eta=1 --clip 0.01
    streamrank fit --store clicks.zarr --model ips-est.zarr --learner rankrls --ips \\
        --propensity estimate:randomized.zarr --clip 0.01

The graded split is read into memory (MQ2008: 9,630 train rows; OHSUMED
16,140 rows in all); the click log is appended in batches of whole sessions
of about ``--batch-rows`` rows.  Same arguments and ``--seed``, same store.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np


def build_parser():
    from streamrank.datasets.letor import DATASETS, DEFAULT_DIR, SPLITS

    p = argparse.ArgumentParser(prog="streamrank recipe clicks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="path of the click-log GroupStore to write")
    p.add_argument("--randomized-out", default=None, metavar="PATH",
                   help="also write a store of result-randomization sessions (for --propensity estimate:PATH)")
    p.add_argument("--dataset", choices=sorted(DATASETS), default="MQ2008", help="known dataset (default MQ2008)")
    p.add_argument("--fold", type=int, default=1, choices=range(1, 6), help="fold 1..5 (default 1)")
    p.add_argument("--split", choices=SPLITS, default="train", help="split the sessions come from (default train)")
    p.add_argument("--data-dir", default=DEFAULT_DIR, help=f"directory of the archives (default {DEFAULT_DIR})")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="read about N graded rows (whole queries)")
    p.add_argument("--k", type=int, default=10, help="documents shown per session (default 10)")
    p.add_argument("--eta", type=float, default=1.0, help="position bias: p(r) = (1/r)^eta (default 1)")
    p.add_argument("--noise", type=float, default=0.1, help="click probability of an examined non-relevant "
                   "document (default 0.1)")
    p.add_argument("--sessions", type=int, default=20, help="sessions per query (default 20)")
    p.add_argument("--randomized-sessions", type=int, default=5, help="randomized sessions per query for "
                   "--randomized-out (default 5)")
    p.add_argument("--log-queries", type=int, default=10,
                   help="labelled queries the logging ranker is fitted on (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed of the logging sample and the clicks (default 0)")
    p.add_argument("--batch-rows", type=int, default=65_536, help="rows per append (whole sessions; default 65536)")
    p.add_argument("--overwrite", action="store_true", help="replace existing stores")
    return p


def logging_scores(X, y, qid, log_queries: int, seed: int) -> np.ndarray:
    """Scores of the logging ranker: RankRLS(alpha=1) on ``log_queries`` random labelled queries."""
    import streamrank as sr

    rng = np.random.default_rng(seed)
    queries = np.unique(qid)
    sample = rng.choice(queries, min(int(log_queries), queries.size), replace=False)
    m = np.isin(qid, sample)
    return sr.RankRLS(alpha=1.0).fit(X[m], y[m], qid[m]).predict(X)


def write_click_store(path, X, log, *, batch_rows: int = 65_536, overwrite: bool = False):
    """The click log ``log`` (a ``streamrank.datasets.clicks.ClickLog``) over the graded rows ``X`` as a
    new GroupStore: features X[log.row], target and ``click`` column = the clicks, query id = the session,
    ``position`` column; appended in batches of whole sessions.  Returns the store (read mode)."""
    import streamrank as sr

    store = sr.GroupStore.create(path, X.shape[1], row_columns=("click", "position"), overwrite=overwrite)
    n = log.row.shape[0]
    a = 0
    while a < n:
        b = min(a + max(int(batch_rows), 1), n)
        while b < n and log.session[b] == log.session[b - 1]:     # whole sessions per batch
            b += 1
        store.append(X[log.row[a:b]], log.clicks[a:b], log.session[a:b], click=log.clicks[a:b],
                     position=log.position[a:b])
        a = b
    return sr.GroupStore.open(path)


def main(argv=None) -> int:
    """``streamrank recipe clicks``: write the click-log store from the options in ``argv``
    (see ``--help``); returns the exit code."""
    from streamrank.datasets import letor
    from streamrank.datasets.clicks import simulate_clicks

    args = build_parser().parse_args(argv)
    if args.k < 1 or args.sessions < 1 or args.randomized_sessions < 1 or args.log_queries < 1 \
            or not 0 <= args.noise <= 1 or not args.eta >= 0:
        print("streamrank recipe clicks: error: need --k, --sessions, --randomized-sessions, --log-queries >= 1, "
              "0 <= --noise <= 1 and --eta >= 0", file=sys.stderr)
        return 2
    spec = letor.DATASETS[args.dataset]
    source = os.path.join(args.data_dir, spec["archive"])
    if not os.path.exists(source):
        print(f"streamrank recipe clicks: error: {source} does not exist", file=sys.stderr)
        return 3
    for out in (args.out, args.randomized_out):
        if out is not None and os.path.exists(out) and not args.overwrite:
            print(f"streamrank recipe clicks: error: {out} exists; pass --overwrite", file=sys.stderr)
            return 5
    print(f"Citation: {letor.CITATIONS[args.dataset]}")
    print("Click model: Joachims, Swaminathan and Schnabel, Unbiased learning-to-rank with biased feedback, "
          "WSDM 2017.")
    t0 = time.perf_counter()
    member = letor.letor_member(args.dataset, args.fold, args.split)
    parts = list(letor.iter_letor(source, member=member, n_features=spec["n_features"], limit_rows=args.limit))
    X = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts]).astype(np.float64)
    qid = np.concatenate([p[2] for p in parts])
    score = logging_scores(X.astype(np.float64), y, qid, args.log_queries, args.seed)
    log = simulate_clicks(y, qid, score, k=args.k, eta=args.eta, noise=args.noise, n_sessions=args.sessions,
                          random_state=args.seed + 1)
    store = write_click_store(args.out, X, log, batch_rows=args.batch_rows, overwrite=args.overwrite)
    print(f"wrote {store.n_rows:,} shown rows in {store.n_groups:,} sessions ({np.unique(qid).size} queries of "
          f"{args.dataset} fold {args.fold} {args.split}, CTR {log.clicks.mean():.3f}) to {args.out}")
    if args.randomized_out is not None:
        rand = simulate_clicks(y, qid, score, k=args.k, eta=args.eta, noise=args.noise,
                               n_sessions=args.randomized_sessions, randomize=True, random_state=args.seed + 2)
        rstore = write_click_store(args.randomized_out, X, rand, batch_rows=args.batch_rows,
                                   overwrite=args.overwrite)
        print(f"wrote {rstore.n_rows:,} randomized rows in {rstore.n_groups:,} sessions to {args.randomized_out}")
    p = ", ".join(f"{v:.3g}" for v in log.propensity)
    print(f"true propensities p(1..{args.k}) = {p}  (--propensity eta={args.eta:g}); "
          f"done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

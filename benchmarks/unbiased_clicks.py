"""Unbiased learning to rank from simulated clicks on MQ2008 (issue 23).

Recipe (``streamrank.datasets.clicks``): a logging ranker (RankRLS on
``--log-queries`` random labelled training queries) shows its top ``--k``
documents of every training query in ``--sessions`` sessions; clicks follow
the position-based model: examination p(r) = (1/r)^eta, click on an
examined document with probability noise + (1 - noise)(2^rel - 1)/3
(MQ2008 labels 0..2; noise 0.1).  Every session is one query group.

Learners (all linear RankRLS; alpha chosen on the vali split's graded labels
from one ``path``, 2⁻¹⁰…2¹⁰), reported as NDCG@10 on the test split:

(a) RankRLS on the true graded labels of all training queries (the ceiling);
(b) naive: RankRLS(ties="exclude") on the clicks (pairs clicked > not clicked);
(c) IPS: the same with ``sample_weight = streamrank.clicks.ips_weights(...)``,
    i.e. pairs weighted by 1/p(pos of the clicked document) — with the true
    propensities, and with propensities estimated by
    ``streamrank.clicks.estimate_propensity`` from ``--random-sessions``
    extra sessions per query whose top k was shown in a random order
    (result randomization), clipped at ``--clip``;
(d) IPS with propensities estimated by regression EM from the click log
    itself — no randomized traffic (``streamrank.position_bias.estimate_propensity_em``,
    issue 37); "EM share" = (d - b) / (c_true - b), the part of the true-
    propensity gain it keeps (issue 37 asks >= 0.8 at eta 1 and 2).

"gap closed" = (c - b) / (a - b).  Several ``--seeds`` (simulation and
logging sample) are averaged; the table shows mean ± std.

Peer (``--lightgbm``, on by default when the ``bench`` extra's lightgbm is
installed): LightGBM's LambdaMART (``objective="lambdarank"``) on the same
data — (a') on the true labels, (b') on the clicks, (c') on the clicks with
the shown positions given to ``lgb.Dataset(position=)``, its position-bias
correction (a per-position bias factor learned jointly, after Unbiased
LambdaMART, Hu et al. WWW 2019).  Boosting rounds are chosen by early stopping
(30 rounds) on the vali split's graded NDCG@10, as alpha is for RankRLS;
learning_rate 0.05, 31 leaves, at most 500 rounds.  Their "gap closed" is
(c' - b') / (a' - b').  Trees versus linear models: compare each family's
gap closed, not the absolute NDCG.

From a store (issue 23): the first seed's click log is also written to a
``GroupStore`` with ``click`` and ``position`` columns and fitted from there
— plain (clicks, ties excluded) and IPS (``streamrank.io.weighted.ips_weighted``,
the weights read with each block) — printing the time ratio IPS / plain
(best of 3, same process) and the largest coefficient difference from the
in-memory IPS fit of the same (float32-stored) rows.

Usage::

    python benchmarks/unbiased_clicks.py --smoke       # seconds: 60 queries, 1 seed
    python benchmarks/unbiased_clicks.py               # fold 1, eta 1 and 2, 3 seeds
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import print_table  # noqa: E402

ALPHAS = 2.0 ** np.arange(-10, 11)


def load_mq2008(fold, limit_rows=None):
    from streamrank.datasets.letor import DATASETS, DEFAULT_DIR, iter_letor, letor_member

    arch = Path(DEFAULT_DIR) / DATASETS["MQ2008"]["archive"]
    out = {}
    for split in ("train", "vali", "test"):
        Xs, ys, qs = [], [], []
        for X, y, q in iter_letor(arch, member=letor_member("MQ2008", fold, split), n_features=46,
                                  limit_rows=limit_rows):
            Xs.append(X)
            ys.append(y)
            qs.append(q)
        out[split] = (np.concatenate(Xs).astype(np.float64), np.concatenate(ys), np.concatenate(qs))
    return out


def _select(model, vali, test):
    """Test NDCG@10 of the alpha that is best on vali (one path, every alpha)."""
    from streamrank.metrics import ndcg

    Xv, yv, qv = vali
    Xt, yt, qt = test
    P = model.path(ALPHAS)
    scores = [ndcg(yv, Xv @ w, qv, k=10) for w in P]
    i = int(np.nanargmax(scores))
    return float(ndcg(yt, Xt @ P[i], qt, k=10))


def _groups(qid):
    """Sizes of the contiguous query groups of ``qid`` (LightGBM's ``group``)."""
    starts = np.flatnonzero(np.r_[True, qid[1:] != qid[:-1]])
    return np.diff(np.r_[starts, len(qid)])


def _lightgbm(X, y, qid, vali, test, *, position=None, seed=0):
    """Test NDCG@10 of LightGBM lambdarank, rounds chosen by early stopping on vali's graded NDCG@10."""
    import lightgbm as lgb

    from streamrank.metrics import ndcg

    Xv, yv, qv = vali
    Xt, yt, qt = test
    params = {"objective": "lambdarank", "metric": "ndcg", "eval_at": [10], "learning_rate": 0.05,
              "num_leaves": 31, "min_data_in_leaf": 20, "verbose": -1, "seed": seed, "num_threads": 2,
              "deterministic": True, "force_row_wise": True}
    train = lgb.Dataset(X, label=np.asarray(y, dtype=np.int64), group=_groups(qid), position=position)
    val = lgb.Dataset(Xv, label=np.asarray(yv, dtype=np.int64), group=_groups(qv), reference=train)
    booster = lgb.train(params, train, num_boost_round=500, valid_sets=[val],
                        callbacks=[lgb.early_stopping(30, verbose=False)])
    return float(ndcg(yt, booster.predict(Xt, num_iteration=booster.best_iteration), qt, k=10))


def _store_fit(Xc, log, clip, max_rows=None):
    """The click log as a GroupStore with click/position columns: IPS / plain fit time from it, and the IPS
    fit's distance to the in-memory IPS fit of the same rows."""
    import tempfile

    import streamrank as sr
    from streamrank.clicks import ips_weights
    from streamrank.io.weighted import ips_weighted

    max_rows = max_rows or sr.DEFAULT_BLOCK_ROWS       # the in-memory fits' block budget
    with tempfile.TemporaryDirectory() as d:
        store = sr.GroupStore.create(f"{d}/clicks.zarr", Xc.shape[1], row_columns=("click", "position"))
        store.append(Xc, log.clicks, log.session, click=log.clicks, position=log.position)
        store = sr.GroupStore.open(f"{d}/clicks.zarr")

        def best(fit):
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                model = fit()
                times.append(time.perf_counter() - t0)
            return min(times), model
        t_plain, _ = best(lambda: sr.RankRLS(ties="exclude").fit(store, max_rows=max_rows))
        t_ips, ips = best(lambda: sr.RankRLS(ties="exclude").fit(ips_weighted(store, log.propensity, clip=clip),
                                                                 max_rows=max_rows))
    X32 = Xc.astype(np.float32).astype(np.float64)
    mem = sr.RankRLS(ties="exclude").fit(X32, log.clicks, log.session,
                                         sample_weight=ips_weights(log.clicks, log.position, log.propensity, clip=clip))
    return {"store_ratio": t_ips / max(t_plain, 1e-9), "store_plain_s": t_plain,
            "store_diff": float(np.max(np.abs(ips.coef_ - mem.coef_)))}


def run_one(data, *, eta, seed, k, sessions, random_sessions, log_queries, clip, lightgbm=False, store=False):
    import streamrank as sr
    from streamrank.clicks import estimate_propensity, ips_weights
    from streamrank.datasets.clicks import simulate_clicks
    from streamrank.position_bias import estimate_propensity_em

    Xtr, ytr, qtr = data["train"]
    rng = np.random.default_rng(seed)
    sample = rng.choice(np.unique(qtr), min(log_queries, np.unique(qtr).size), replace=False)
    m = np.isin(qtr, sample)
    logging = sr.RankRLS(alpha=1.0).fit(Xtr[m], ytr[m], qtr[m])
    score = logging.predict(Xtr)
    log = simulate_clicks(ytr, qtr, score, k=k, eta=eta, n_sessions=sessions, random_state=seed + 1)
    rand = simulate_clicks(ytr, qtr, score, k=k, eta=eta, n_sessions=random_sessions, randomize=True,
                           random_state=seed + 2)
    p_hat = estimate_propensity(rand.clicks, rand.position, k)
    Xc = Xtr[log.row]
    t_em = time.perf_counter()
    em = estimate_propensity_em(Xc, clicks=log.clicks, position=log.position, n_positions=k)
    t_em = time.perf_counter() - t_em
    res = {"rows": len(log.row), "ctr": float(log.clicks.mean())}
    res["a"] = _select(sr.RankRLS().fit(Xtr, ytr, qtr), data["vali"], data["test"])
    t0 = time.perf_counter()
    naive = sr.RankRLS(ties="exclude").fit(Xc, log.clicks, log.session)
    t1 = time.perf_counter()
    w = ips_weights(log.clicks, log.position, log.propensity, clip=clip)
    ips = sr.RankRLS(ties="exclude").fit(Xc, log.clicks, log.session, sample_weight=w)
    t2 = time.perf_counter()
    res["b"] = _select(naive, data["vali"], data["test"])
    res["c_true"] = _select(ips, data["vali"], data["test"])
    w_hat = ips_weights(log.clicks, log.position, p_hat, clip=clip)
    res["c_est"] = _select(sr.RankRLS(ties="exclude").fit(Xc, log.clicks, log.session, sample_weight=w_hat),
                           data["vali"], data["test"])
    w_em = ips_weights(log.clicks, log.position, em.theta, clip=clip)
    res["c_em"] = _select(sr.RankRLS(ties="exclude").fit(Xc, log.clicks, log.session, sample_weight=w_em),
                          data["vali"], data["test"])
    res["em_err"] = float(np.max(np.abs(em.theta / log.propensity - 1)[:5]))
    res["em_iter"], res["em_s"] = em.n_iter, t_em
    res["fit_ratio"] = (t2 - t1) / max(t1 - t0, 1e-9)   # weighted vs unweighted fit of the same click log
    res["p_err"] = float(np.max(np.abs(p_hat - log.propensity)))
    res["logging"] = _ndcg_of(logging, data["test"])
    if store:
        res.update(_store_fit(Xc, log, clip))
    if lightgbm:
        v, t = data["vali"], data["test"]
        res["lgb_a"] = _lightgbm(Xtr, ytr, qtr, v, t, seed=seed)
        res["lgb_b"] = _lightgbm(Xc, log.clicks, log.session, v, t, seed=seed)
        res["lgb_c"] = _lightgbm(Xc, log.clicks, log.session, v, t, position=log.position - 1, seed=seed)
    return res


def _ndcg_of(model, split):
    from streamrank.metrics import ndcg

    X, y, q = split
    return float(ndcg(y, model.predict(X), q, k=10))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny run (60 queries, 1 seed, eta 1)")
    ap.add_argument("--fold", type=int, default=1)
    ap.add_argument("--eta", type=float, nargs="+", default=[1.0, 2.0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--random-sessions", type=int, default=5)
    ap.add_argument("--log-queries", type=int, default=10)
    ap.add_argument("--clip", type=float, default=0.01)
    ap.add_argument("--lightgbm", action=argparse.BooleanOptionalAction, default=None,
                    help="also LightGBM lambdarank with and without its position-bias correction (default: when "
                         "lightgbm is installed, pip install 'streamrank[bench]')")
    args = ap.parse_args(argv)
    if args.lightgbm is None:
        import importlib.util

        args.lightgbm = importlib.util.find_spec("lightgbm") is not None
        if not args.lightgbm:
            print("lightgbm is not installed (pip install 'streamrank[bench]'): the LightGBM rows are left out")
    limit = None
    if args.smoke:
        args.eta, args.seeds, args.sessions, args.random_sessions, limit = [1.0], 1, 5, 3, 1500
    data = load_mq2008(args.fold, limit)
    print(f"MQ2008 fold {args.fold}: train {data['train'][0].shape[0]} rows, "
          f"{np.unique(data['train'][2]).size} queries; k={args.k}, {args.sessions} sessions/query, "
          f"{args.random_sessions} randomized sessions/query, noise 0.1, clip {args.clip}")
    rows, lgb_rows = [], []
    for eta in args.eta:
        runs = [run_one(data, eta=eta, seed=s, k=args.k, sessions=args.sessions,
                        random_sessions=args.random_sessions, log_queries=args.log_queries, clip=args.clip,
                        lightgbm=args.lightgbm, store=(s == 0 and eta == args.eta[0]))
                for s in range(args.seeds)]
        if eta == args.eta[0]:
            st = runs[0]
            store_line = (f"from a GroupStore (click/position columns, {st['rows']} rows, eta {eta:g}, seed 0): "
                          f"IPS / plain fit time = {st['store_ratio']:.2f} (best of 3; plain {st['store_plain_s']:.3f} s), "
                          f"max |coef - in-memory IPS| = {st['store_diff']:.1e}")
        def ms(key):
            v = np.array([r[key] for r in runs])
            return f"{v.mean():.4f} ± {v.std():.4f}"
        share = lambda key: np.mean([(r[key] - r["b"]) / (r["c_true"] - r["b"]) if r["c_true"] != r["b"]  # noqa: E731
                                     else np.nan for r in runs])
        gap = lambda key: np.mean([(r[key] - r["b"]) / (r["a"] - r["b"]) if r["a"] != r["b"] else np.nan  # noqa: E731
                                   for r in runs])
        rows.append({"eta": eta, "logging": ms("logging"), "a": ms("a"), "b": ms("b"), "c_true": ms("c_true"),
                     "c_est": ms("c_est"), "gap_true": gap("c_true"), "gap_est": gap("c_est"),
                     "c_em": ms("c_em"), "gap_em": gap("c_em"), "share_em": share("c_em"),
                     "em_err": np.mean([r["em_err"] for r in runs]), "em_iter": np.mean([r["em_iter"] for r in runs]),
                     "em_s": np.mean([r["em_s"] for r in runs]),
                     "p_err": np.mean([r["p_err"] for r in runs]), "ctr": np.mean([r["ctr"] for r in runs]),
                     "rows": runs[0]["rows"], "fit_ratio": np.mean([r["fit_ratio"] for r in runs])})
        if args.lightgbm:
            lgb_gap = np.mean([(r["lgb_c"] - r["lgb_b"]) / (r["lgb_a"] - r["lgb_b"]) if r["lgb_a"] != r["lgb_b"]
                               else np.nan for r in runs])
            lgb_rows.append({"eta": eta, "a": ms("lgb_a"), "b": ms("lgb_b"), "c": ms("lgb_c"), "gap": lgb_gap,
                             "gap_rls": gap("c_est"), "gap_em": gap("c_em")})
    print_table(rows, [("eta", "eta", ".1f"), ("rows", "click rows", "d"), ("ctr", "CTR", ".3f"),
                       ("logging", "logging", "s"), ("a", "(a) true labels", "s"), ("b", "(b) naive clicks", "s"),
                       ("c_true", "(c) IPS true p", "s"), ("c_est", "(c) IPS est. p", "s"),
                       ("gap_true", "gap closed (true p)", ".2f"), ("gap_est", "gap closed (est. p)", ".2f"),
                       ("p_err", "max |p̂ - p|", ".3f"), ("fit_ratio", "IPS/plain fit time", ".2f")],
               title=f"test NDCG@10 (mean ± std over {args.seeds} seed(s))")
    print_table(rows, [("eta", "eta", ".1f"), ("b", "(b) naive clicks", "s"), ("c_true", "(c) IPS true p", "s"),
                       ("c_em", "(d) IPS EM p (same logs)", "s"), ("gap_em", "gap closed (EM p)", ".2f"),
                       ("share_em", "EM share of (c)-(b)", ".2f"), ("em_err", "max_k<=5 |θ/p - 1|", ".3f"),
                       ("em_iter", "EM iterations", ".0f"), ("em_s", "EM seconds", ".1f")],
               title="(d) propensities by regression EM on the click log itself (no randomized traffic; "
                     "streamrank.position_bias.estimate_propensity_em): share = ((d) - (b)) / ((c) - (b))")
    print(store_line)
    if args.lightgbm:
        print_table(lgb_rows, [("eta", "eta", ".1f"), ("a", "(a') LGBM true labels", "s"),
                               ("b", "(b') LGBM clicks", "s"), ("c", "(c') LGBM clicks + position bias", "s"),
                               ("gap", "gap closed (LGBM)", ".2f"), ("gap_rls", "gap closed (IPS RankRLS, est. p)", ".2f"),
                               ("gap_em", "gap closed (IPS RankRLS, EM p)", ".2f")],
                    title="peer: LightGBM lambdarank, test NDCG@10 (same click logs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

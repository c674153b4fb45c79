"""streamrank against the boosted-tree rankers people use now (issue 8, "Peers").

Learners, each with its hyperparameters chosen on the validation split:

* XGBoost ``XGBRanker`` objective ``rank:pairwise`` and ``rank:ndcg``,
  ``tree_method="hist"``, trees added until NDCG@10 on vali stops improving
  (early stopping), a small grid of ``max_depth``;
* LightGBM ``LGBMRanker`` objective ``lambdarank``, early stopping on vali
  NDCG@10, a small grid of ``num_leaves``;
* streamrank linear ``RankRLS`` (primal; every λ of 2⁻¹⁵…2¹⁵ from one fit via
  ``path``, and ``group_weight`` in {pair, query});
* streamrank sparse ``KernelRankRLS`` (rbf, ``n_basis`` r in a few sizes;
  γ ∈ {1/4, 1, 4} / median squared distance, λ from ``path``);
* streamrank ``PairwiseSGDRanker`` (hinge, a few step sizes).

Reported per learner: NDCG@10 and disagreement error on the test split
(streamrank's metrics for every learner: NDCG gain 2^rel − 1, queries
without a relevant document skipped), the wall time of the final
configuration's fit ("fit s"), the time of the whole hyperparameter search
including that fit ("select s"), and peak RSS.

Data
----
(a) MQ2008 (LETOR 4.0, query-level normalised), all 5 folds, standard
    train / vali / test, read straight from the distribution tar.gz.
(b) Synthetic LETOR-like stores (``streamrank.datasets.synthetic``), default
    1,000,000 training rows × 136 features, vali and test 100,000 rows each,
    drawn from the same hidden model — linear and nonlinear.  streamrank
    learners stream the training store from disk; the peers need the
    training set in memory (its load time is reported separately, "load s").

Peak RSS: on MQ2008 the sampled peak *above* the process RSS when the
learner starts (the data are already loaded); on the synthetic sets every
learner runs in a fresh subprocess (``--isolate``, default there) and the
figure is that process's lifetime peak, data and interpreter included.

Usage::

    python benchmarks/peers_letor.py --smoke            # seconds, tiny data
    python benchmarks/peers_letor.py --part mq2008       # 5 folds
    python benchmarks/peers_letor.py --part synthetic --rows 1000000
    python benchmarks/peers_letor.py                     # both
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from streamrank.datasets._paths import data_path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import (environment, fmt_mib, measure, peer_available,  # noqa: E402
                           print_environment, print_table)

ALPHAS = 2.0 ** np.arange(-15, 16)

# ---------------------------------------------------------------- data access
# A data "spec" is either ("mem", X, y, qid) or the path of a GroupStore (str).


def _read_store(path):
    import streamrank as sr
    from streamrank.io.blocks import vstack_X

    store = sr.GroupStore.open(path)
    Xs, ys, qs = [], [], []
    for b in store.blocks(max_rows=200_000):
        Xs.append(np.asarray(b.X, dtype=np.float32))
        ys.append(np.asarray(b.y, dtype=np.float64))
        qs.append(b.row_qid())
    return np.asarray(vstack_X(Xs), dtype=np.float32), np.concatenate(ys), np.concatenate(qs)


def _arrays(spec):
    if isinstance(spec, tuple):
        return spec[1], spec[2], spec[3]
    return _read_store(spec)


def _source(spec):
    import streamrank as sr

    if isinstance(spec, tuple):
        return sr.as_source(spec[1], spec[2], spec[3])
    return sr.GroupStore.open(spec)


def _group_sizes(qid):
    cut = np.flatnonzero(np.diff(qid) != 0) + 1
    return np.diff(np.concatenate(([0], cut, [len(qid)])))


def _group_index(qid):
    """0, 0, 1, 1, 1, 2, ... — one id per contiguous group (XGBoost wants non-decreasing qid;
    a LETOR fold concatenates files, so its query ids are contiguous but not sorted)."""
    return np.concatenate(([0], np.cumsum(np.diff(qid) != 0))).astype(np.int64) if len(qid) else qid


def _scores(y, s, qid):
    import streamrank as sr

    return dict(ndcg=float(sr.metrics.ndcg(y, s, qid, k=10)),
                disagreement=float(sr.metrics.disagreement(y, s, qid)))


def _median_sq_dist(X, rng, n=2000):
    idx = rng.choice(len(X), size=min(n, len(X)), replace=False)
    A = np.asarray(X[idx], dtype=np.float64)
    d = (A[: len(A) // 2] - A[len(A) // 2: 2 * (len(A) // 2)]) ** 2
    return float(np.median(d.sum(axis=1))) or 1.0


def load_mq2008(fold, split, data_dir, limit_rows=None):
    from streamrank.datasets.letor import DATASETS, iter_letor, letor_member

    path = Path(data_dir) / DATASETS["MQ2008"]["archive"]
    parts = list(iter_letor(path, member=letor_member("MQ2008", fold, split), n_features=46,
                            limit_rows=limit_rows))
    X = np.concatenate([p.X for p in parts]).astype(np.float32)
    return ("mem", X, np.concatenate([p.y for p in parts]), np.concatenate([p.qid for p in parts]))


# --------------------------------------------------------------------- learners
# Each returns a dict: config, vali (NDCG@10), ndcg, disagreement, fit_s, load_s.

def run_rankrls(train, vali, test, group_weights=("pair", "query")):
    import streamrank as sr

    src = _source(train)
    Xv, yv, qv = _arrays(vali)
    Xt, yt, qt = _arrays(test)
    best = None
    for gw in group_weights:
        t0 = time.perf_counter()
        m = sr.RankRLS(alpha=1.0, solver="primal", group_weight=gw).fit(src)
        W = m.path(ALPHAS)                       # every λ from the one pass
        fit_s = time.perf_counter() - t0
        S = Xv @ W.T.astype(Xv.dtype)
        for i, a in enumerate(ALPHAS):
            v = float(sr.metrics.ndcg(yv, S[:, i], qv, k=10))
            if best is None or v > best[0]:
                best = (v, gw, a, W[i], fit_s)
    v, gw, a, w, fit_s = best
    out = _scores(yt, Xt @ w, qt)
    out.update(config=f"{gw}, λ=2^{int(np.log2(a))}", vali=v, fit_s=fit_s, load_s=0.0)
    return out


def run_kernel(train, vali, test, n_basis, gamma_factors=(0.25, 1.0, 4.0), seed=0):
    import streamrank as sr
    from streamrank.kernels import kernel_matrix

    src = _source(train)
    Xv, yv, qv = _arrays(vali)
    Xt, yt, qt = _arrays(test)
    med = _median_sq_dist(Xv, np.random.default_rng(seed))
    best = None
    for gf in gamma_factors:
        gamma = gf / med
        t0 = time.perf_counter()
        m = sr.KernelRankRLS(kernel="rbf", gamma=gamma, alpha=1.0, n_basis=int(n_basis),
                             random_state=seed).fit(src)
        A = m.path(ALPHAS)                       # (n_alphas, r)
        fit_s = time.perf_counter() - t0
        S = kernel_matrix(Xv, m.basis_, kernel="rbf", gamma=gamma) @ A.T
        for i, a in enumerate(ALPHAS):
            v = float(sr.metrics.ndcg(yv, S[:, i], qv, k=10))
            if best is None or v > best[0]:
                best = (v, gf, gamma, a, A[i], m.basis_, fit_s)
    v, gf, gamma, a, coef, basis, fit_s = best
    s = kernel_matrix(Xt, basis, kernel="rbf", gamma=gamma) @ coef
    out = _scores(yt, s, qt)
    out.update(config=f"γ={gf:g}/med, λ=2^{int(np.log2(a))}", vali=v, fit_s=fit_s, load_s=0.0)
    return out


def run_sgd(train, vali, test, n_pairs, eta0s=(0.01, 0.1, 1.0), seed=0):
    import streamrank as sr

    src = _source(train)
    Xv, yv, qv = _arrays(vali)
    Xt, yt, qt = _arrays(test)
    best = None
    for eta0 in eta0s:
        t0 = time.perf_counter()
        m = sr.PairwiseSGDRanker(eta0=eta0, l1=0.0, l2=1e-6, loss="hinge", random_state=seed)
        m.fit(src, n_pairs=int(n_pairs))
        fit_s = time.perf_counter() - t0
        v = float(sr.metrics.ndcg(yv, m.predict(Xv), qv, k=10))
        if best is None or v > best[0]:
            best = (v, eta0, m, fit_s)
    v, eta0, m, fit_s = best
    out = _scores(yt, m.predict(Xt), qt)
    out.update(config=f"hinge, eta0={eta0:g}, {int(n_pairs):,} pairs", vali=v, fit_s=fit_s, load_s=0.0)
    return out


def run_xgb(train, vali, test, objective, max_depths=(4, 6), n_estimators=500, learning_rate=0.1,
            early_stopping=30, threads=2, max_bin=256):
    import xgboost as xgb

    t0 = time.perf_counter()
    X, y, q = _arrays(train)
    load_s = time.perf_counter() - t0 if not isinstance(train, tuple) else 0.0
    Xv, yv, qv = _arrays(vali)
    Xt, yt, qt = _arrays(test)
    import streamrank as sr

    best = None
    for depth in max_depths:
        m = xgb.XGBRanker(objective=objective, tree_method="hist", n_estimators=n_estimators,
                          learning_rate=learning_rate, max_depth=depth, n_jobs=threads, max_bin=max_bin,
                          eval_metric="ndcg@10", early_stopping_rounds=early_stopping, random_state=0)
        t0 = time.perf_counter()
        m.fit(X, y, qid=_group_index(q), eval_set=[(Xv, yv)], eval_qid=[_group_index(qv)], verbose=False)
        fit_s = time.perf_counter() - t0
        v = float(sr.metrics.ndcg(yv, m.predict(Xv), qv, k=10))
        if best is None or v > best[0]:
            best = (v, depth, m, fit_s)
    v, depth, m, fit_s = best
    out = _scores(yt, m.predict(Xt), qt)
    out.update(config=f"depth {depth}, {m.best_iteration + 1} trees", vali=v, fit_s=fit_s, load_s=load_s)
    return out


def run_lgbm(train, vali, test, num_leaves=(15, 63), n_estimators=500, learning_rate=0.1,
             early_stopping=30, threads=2, max_bin=255):
    import lightgbm as lgb

    t0 = time.perf_counter()
    X, y, q = _arrays(train)
    load_s = time.perf_counter() - t0 if not isinstance(train, tuple) else 0.0
    Xv, yv, qv = _arrays(vali)
    Xt, yt, qt = _arrays(test)
    import streamrank as sr

    best = None
    for leaves in num_leaves:
        m = lgb.LGBMRanker(objective="lambdarank", n_estimators=n_estimators, learning_rate=learning_rate,
                           num_leaves=leaves, n_jobs=threads, max_bin=max_bin, random_state=0, verbose=-1)
        t0 = time.perf_counter()
        ev = (dict(eval_X=(Xv,), eval_y=(yv.astype(np.int32),)) if "eval_X" in _fit_params(m)
              else dict(eval_set=[(Xv, yv.astype(np.int32))]))
        m.fit(X, y.astype(np.int32), group=_group_sizes(q), eval_group=[_group_sizes(qv)], eval_at=[10], **ev,
              callbacks=[lgb.early_stopping(early_stopping, verbose=False)])
        fit_s = time.perf_counter() - t0
        v = float(sr.metrics.ndcg(yv, m.predict(Xv), qv, k=10))
        if best is None or v > best[0]:
            best = (v, leaves, m, fit_s)
    v, leaves, m, fit_s = best
    out = _scores(yt, m.predict(Xt), qt)
    out.update(config=f"{leaves} leaves, {m.best_iteration_} trees", vali=v, fit_s=fit_s, load_s=load_s)
    return out


def _fit_params(model):
    import inspect

    return inspect.signature(model.fit).parameters


def learner_plan(args, smoke):
    """(name, function, kwargs, peer module or None, kind) for every learner."""
    d = dict(threads=args.threads, learning_rate=args.lr, early_stopping=args.early_stopping)
    if args.max_bin is not None:
        d["max_bin"] = args.max_bin
    n_est = 5 if smoke else args.trees
    plan = [
        ("XGBoost rank:pairwise", run_xgb,
         dict(objective="rank:pairwise", n_estimators=n_est, max_depths=(4, 6) if not smoke else (3,), **d),
         "xgboost", "peer"),
        ("XGBoost rank:ndcg", run_xgb,
         dict(objective="rank:ndcg", n_estimators=n_est, max_depths=(4, 6) if not smoke else (3,), **d),
         "xgboost", "peer"),
        ("LightGBM lambdarank", run_lgbm,
         dict(n_estimators=n_est, num_leaves=(15, 63) if not smoke else (7,), **d), "lightgbm", "peer"),
        ("streamrank RankRLS linear", run_rankrls, {}, None, "ours"),
    ]
    for r in args.n_basis:
        plan.append((f"streamrank KernelRankRLS rbf r={r}", run_kernel, dict(n_basis=r), None, "ours"))
    plan.append(("streamrank PairwiseSGDRanker", run_sgd, dict(n_pairs=args.pairs), None, "ours"))
    if args.only:
        plan = [p for p in plan if any(o.lower() in p[0].lower() for o in args.only)]
    return plan


def _run_plan(plan, train, vali, test, isolate, label):
    rows = []
    for name, fn, kw, peer, kind in plan:
        if peer is not None and not peer_available(peer):
            rows.append(dict(learner=name, kind=kind, config=f"{peer} not installed"))
            continue
        print(f"  [{label}] {name} ...", flush=True)
        try:
            out, wall, peak = measure(fn, train, vali, test, isolate=isolate, **kw)
        except Exception as exc:  # report every learner, even a failing one
            msg = str(exc).strip().splitlines()
            rows.append(dict(learner=name, kind=kind, config=f"FAILED: {msg[0] if msg else type(exc).__name__}"))
            continue
        out.update(learner=name, kind=kind, select_s=wall - out.get("load_s", 0.0), peak=peak)
        rows.append(out)
    return rows


COLUMNS = [("learner", "learner", "s"), ("ndcg", "NDCG@10", ".4f"), ("disagreement", "disagr.", ".4f"),
           ("vali", "vali NDCG", ".4f"), ("fit_s", "fit s", ".2f"), ("select_s", "select s", ".2f"),
           ("load_s", "load s", ".2f"), ("peak", "peak RSS", fmt_mib), ("config", "chosen", "s")]


def _verdict(rows, title):
    ok = [r for r in rows if "ndcg" in r]
    ours = [r for r in ok if r["kind"] == "ours"]
    peers = [r for r in ok if r["kind"] == "peer"]
    if not ours or not peers:
        print(f"{title}: not enough learners ran for a comparison")
        return None
    bo = max(ours, key=lambda r: r["ndcg"])
    bp = max(peers, key=lambda r: r["ndcg"])
    rel = bo["ndcg"] / bp["ndcg"] - 1.0
    ratio = bo["fit_s"] / bp["fit_s"] if bp["fit_s"] > 0 else float("nan")
    verdict = "MET" if rel >= -0.01 else "NOT met"
    print(f"{title}: best streamrank {bo['learner']} NDCG@10 {bo['ndcg']:.4f} vs best peer {bp['learner']} "
          f"{bp['ndcg']:.4f} ({100 * rel:+.2f} %); fit time {bo['fit_s']:.2f} s vs {bp['fit_s']:.2f} s "
          f"({ratio:.2f}x). Goal 'within 1 % NDCG@10 of the best boosted model': {verdict}")
    return dict(ours=bo["learner"], peer=bp["learner"], rel=rel, time_ratio=ratio)


def _mean_rows(per_fold):
    names = [r["learner"] for r in per_fold[0]]
    out = []
    for i, name in enumerate(names):
        rs = [f[i] for f in per_fold if i < len(f) and "ndcg" in f[i]]
        if len(rs) < len(per_fold):
            out.append(dict(learner=name, kind=per_fold[0][i]["kind"],
                            config=per_fold[0][i].get("config", "") + f" ({len(rs)}/{len(per_fold)} folds ran)"))
            if not rs:
                continue
        row = dict(learner=name, kind=rs[0]["kind"])
        for k in ("ndcg", "disagreement", "vali", "fit_s", "select_s", "load_s"):
            row[k] = float(np.mean([r[k] for r in rs]))
        row["peak"] = max(r["peak"] for r in rs)
        row["config"] = "mean of folds" + (f" ({len(rs)}/{len(per_fold)})" if len(rs) < len(per_fold) else "")
        if len(rs) == len(per_fold):
            out.append(row)
        else:
            out[-1] = row
    return out


def part_mq2008(args, smoke):
    plan = learner_plan(args, smoke)
    per_fold = []
    folds = [1] if smoke else args.folds
    limit = 300 if smoke else None
    for fold in folds:
        t0 = time.perf_counter()
        train, vali, test = (load_mq2008(fold, s, args.data_dir, limit) for s in ("train", "vali", "test"))
        print(f"MQ2008 Fold{fold}: train {len(train[2]):,} rows / {len(np.unique(train[3]))} queries, vali "
              f"{len(vali[2]):,}, test {len(test[2]):,} (read in {time.perf_counter() - t0:.1f} s)", flush=True)
        rows = _run_plan(plan, train, vali, test, isolate=False, label=f"Fold{fold}")
        print_table(rows, COLUMNS, title=f"MQ2008 Fold{fold} (test split; λ / hyperparameters chosen on vali)")
        per_fold.append(rows)
    mean = _mean_rows(per_fold)
    print_table(mean, COLUMNS, title=f"MQ2008 mean over {len(folds)} fold(s)")
    verdict = _verdict(mean, "MQ2008")
    return dict(per_fold=per_fold, mean=mean, verdict=verdict)


def _synthetic_store(path, n_rows, n_features, nonlinear, seed):
    import streamrank as sr
    from streamrank.datasets.synthetic import write_letor_like_store

    spec = dict(n_rows=n_rows, n_features=n_features, nonlinear=nonlinear, seed=seed)
    marker = Path(path) / "bench_spec.json"
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return str(path)
    write_letor_like_store(path, n_rows, n_features, overwrite=True, nonlinear=nonlinear, random_state=seed,
                           chunk_rows=100_000)
    marker.write_text(json.dumps(spec))
    sr.GroupStore.open(path)
    return str(path)


def part_synthetic(args, smoke):
    rows_n = 2_000 if smoke else args.rows
    small = 1_000 if smoke else args.eval_rows
    nf = 20 if smoke else args.features
    plan = learner_plan(args, smoke)
    if not smoke:  # keep the big runs affordable: one tree configuration per peer
        for name, fn, kw, peer, kind in plan:
            if fn is run_xgb:
                kw["max_depths"] = (args.depth,)
            if fn is run_lgbm:
                kw["num_leaves"] = (args.leaves,)
            if fn is run_kernel:
                kw["gamma_factors"] = tuple(args.gamma_factors)
    base = Path(args.work_dir)
    base.mkdir(parents=True, exist_ok=True)
    out = {}
    hidden = [False, True] if args.hidden == "both" else [args.hidden == "nonlinear"]
    for nonlinear in hidden[:1] if smoke else hidden:
        kind = "nonlinear" if nonlinear else "linear"
        t0 = time.perf_counter()
        stores = [_synthetic_store(base / f"letor_{kind}_{n}_{nf}_{seed}.zarr", n, nf, nonlinear, seed)
                  for n, seed in ((rows_n, 0), (small, 1), (small, 2))]
        print(f"synthetic {kind}: {rows_n:,} train rows x {nf} features, vali/test {small:,} rows "
              f"(stores ready in {time.perf_counter() - t0:.1f} s under {base})", flush=True)
        rows = _run_plan(plan, *stores, isolate=args.isolate and not smoke, label=kind)
        print_table(rows, COLUMNS, title=f"Synthetic LETOR-like, {kind} hidden model, {rows_n:,} x {nf} "
                                         f"(test {small:,} rows)")
        out[kind] = dict(rows=rows, verdict=_verdict(rows, f"synthetic {kind}"))
    return out


def build_parser():
    p = argparse.ArgumentParser(prog="benchmarks/peers_letor.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny data, seconds (for the test suite)")
    p.add_argument("--part", choices=("all", "mq2008", "synthetic"), default="all")
    p.add_argument("--folds", type=int, nargs="+", default=[1, 2, 3, 4, 5], help="MQ2008 folds (default 1..5)")
    p.add_argument("--data-dir", default=str(data_path("letor")), help="directory of MQ2008_QueryLevelNorm.tar.gz")
    p.add_argument("--rows", type=int, default=1_000_000, help="synthetic training rows (default 1,000,000)")
    p.add_argument("--eval-rows", type=int, default=100_000, help="synthetic vali and test rows (default 100,000)")
    p.add_argument("--features", type=int, default=136, help="synthetic features (default 136)")
    p.add_argument("--hidden", choices=("both", "linear", "nonlinear"), default="both")
    p.add_argument("--n-basis", type=int, nargs="+", default=[100, 300, 1000], help="sparse kernel basis sizes")
    p.add_argument("--pairs", type=int, default=1_000_000, help="pairs for PairwiseSGDRanker")
    p.add_argument("--gamma-factors", type=float, nargs="+", default=[0.5, 2.0],
                   help="synthetic: sparse kernel γ grid, in units of 1/median squared distance (default 0.5 2)")
    p.add_argument("--trees", type=int, default=500, help="max boosting rounds (early stopping on vali)")
    p.add_argument("--threads", type=int, default=2, help="threads of the peers")
    p.add_argument("--lr", type=float, default=0.1, help="learning rate of the boosted peers (default 0.1)")
    p.add_argument("--early-stopping", type=int, default=30,
                   help="boosting rounds without vali NDCG@10 improvement before stopping (default 30)")
    p.add_argument("--max-bin", type=int, default=None,
                   help="histogram bins of XGBoost and LightGBM (default: their own, 256 / 255)")
    p.add_argument("--depth", type=int, default=6, help="synthetic: XGBoost max_depth (default 6)")
    p.add_argument("--leaves", type=int, default=63, help="synthetic: LightGBM num_leaves (default 63)")
    p.add_argument("--work-dir", default="/tmp/streamrank_bench", help="where synthetic stores are written")
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=True,
                   help="synthetic: run each learner in a fresh subprocess (default on)")
    p.add_argument("--only", nargs="+", default=None, metavar="NAME",
                   help="run only the learners whose name contains one of these (e.g. KernelRankRLS)")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    smoke = args.smoke
    if smoke:
        args.n_basis = [20]
        args.pairs = 2_000
        args.threads = 1
        args.work_dir = str(Path(args.work_dir) / "smoke")
    env = environment()
    print_environment(env)
    print("command: python benchmarks/peers_letor.py " + " ".join(argv if argv is not None else sys.argv[1:]))
    res = dict(env=env)
    if args.part in ("all", "mq2008"):
        res["mq2008"] = part_mq2008(args, smoke)
    if args.part in ("all", "synthetic"):
        res["synthetic"] = part_synthetic(args, smoke)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())

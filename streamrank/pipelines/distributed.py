"""Fit a learner on a dask cluster from a store on shared storage.

::

    streamrank distributed --store STORE --model OUT \\
        [--scheduler tcp://HOST:PORT | --workers N] --learner rankrls|sparse-kernel|sgd-bilinear|sgd-pairwise

Connects to ``--scheduler`` or starts a LocalCluster of ``--workers``
single-threaded processes (default: one per core).  The workers open STORE
themselves (a path every worker can reach); the client plans blocks, receives
only reduced statistics (O(n²) per reduction, independent of the rows) and
solves.  ``--alphas GRID`` chooses λ by k-fold group CV from fold statistics
reduced on the workers (no second pass).  ``--validation STORE`` evaluates
the model on the workers (NDCG@10, disagreement).  The model is saved with
``sr.save(model, OUT)``; a summary line goes to stdout and ``--report FILE``
writes the JSON report.  ``--learner sgd-bilinear`` reads a TupleStore and
runs data-parallel rounds (``--rounds``, ``--steps-per-round``; ``--refit``
adds as many refit rounds, SGD without L1 on the support of W);
``sgd-pairwise`` does the same with pairs sampled within the groups of the
GroupStore's blocks.  With ``--compare-single`` the report carries the
quality (tuple error / NDCG@10) of one machine taking as many steps.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

import streamrank as sr
from streamrank import distributed as srd

__all__ = ["main", "run", "build_estimator"]

LEARNERS = ("rankrls", "sparse-kernel", "sgd-bilinear", "sgd-pairwise")


def _opts(args):
    """``--storage-options`` (None when not given, or for a namespace built without it)."""
    return getattr(args, "storage_options", None)


def _check_model_out(args):
    """Refuse an existing model unless ``--overwrite``, as ``streamrank fit`` does, before any work."""
    from streamrank.cli import check_model_out

    check_model_out(args.model, overwrite=getattr(args, "overwrite", False), storage_options=_opts(args))


def build_estimator(args):
    normalize = getattr(args, "normalize", None)
    if args.learner == "rankrls":
        return sr.RankRLS(alpha=args.alpha, solver=args.solver, group_weight=args.group_weight,
                          ties=getattr(args, "ties", "include"), normalize=normalize)
    if args.learner == "sparse-kernel":
        return sr.KernelRankRLS(kernel=args.kernel, gamma=args.gamma, alpha=args.alpha, n_basis=args.n_basis,
                                group_weight=args.group_weight, ties=getattr(args, "ties", "include"),
                                random_state=args.seed, normalize=normalize)
    sgd = {k: v for k, v in (("eta0", args.eta0), ("l1", args.l1)) if v is not None}
    if args.learner == "sgd-bilinear":
        return sr.SparseSGDRanker(auto_refit=bool(getattr(args, "refit", False)), normalize=normalize, **sgd)
    return sr.PairwiseSGDRanker(random_state=args.seed, normalize=normalize, **sgd)


def _tuple_quality(model, store):
    """Tuple error of ``model`` on every tuple of a TupleStore (streamed in batches)."""
    from streamrank.metrics import tuple_error

    from streamrank.pipelines.nightly import tuple_range

    n = store.n_tuples
    pos, neg = [], []
    for a in range(0, n, 65_536):
        Q, Dp, Dn = tuple_range(store, a, min(a + 65_536, n))
        pos.append(model.predict(Q, Dp))
        neg.append(model.predict(Q, Dn))
    return float(tuple_error(np.concatenate(pos), np.concatenate(neg)))


def run_sgd(args, out):
    """Data-parallel SGD rounds; quality against one machine taking the same number of steps."""
    from streamrank.distributed import refit_round_task, round_task

    store = sr.TupleStore.open(args.store, storage_options=_opts(args))
    est = build_estimator(args)
    steps = args.steps_per_round
    report = {"store": str(args.store), "tuples": store.n_tuples, "learner": args.learner,
              "model": str(args.model), "rounds": args.rounds, "steps_per_round": steps}
    t0 = time.perf_counter()
    with srd.get_client(args.scheduler, n_workers=args.workers) as client:
        k = len(client.scheduler_info()["workers"])
        srd.fit(est, store, client, rounds=args.rounds, steps_per_round=steps, n_shards=k)
    report.update(workers=k, fit_seconds=time.perf_counter() - t0, t=est.t_, nnz=est.nnz_, refit=bool(est.auto_refit),
                  refit_t=est.refit_t_)
    sr.save(est, args.model, storage_options=_opts(args))
    val = sr.TupleStore.open(args.validation, storage_options=_opts(args)) if args.validation else store
    report["tuple_error"] = _tuple_quality(est, val)
    if args.compare_single:  # one machine, the same tuples in the same per-shard order, one after another
        single = build_estimator(args)
        single.init_state(int(store.n_query_features), int(store.n_item_features))
        t1 = time.perf_counter()
        for r in range(args.rounds):
            for shard in range(k):      # the round task itself, run here shard after shard (bounded reads)
                single = round_task(shard, store, single, k, r, steps, 4096)
        if single.auto_refit:
            for r in range(args.rounds):
                for shard in range(k):
                    single = refit_round_task(shard, store, single, k, r, steps, 4096)
        report["single_seconds"] = time.perf_counter() - t1
        report["single_tuple_error"] = _tuple_quality(single, val)
    line = (f"distributed {args.learner}: {args.rounds} rounds x {k} shards x {steps} steps in "
            f"{report['fit_seconds']:.2f} s, tuple error {report['tuple_error']:.4f}")
    if "single_tuple_error" in report:
        line += f" (one machine, same tuples: {report['single_tuple_error']:.4f} in {report['single_seconds']:.2f} s)"
    out.write(line + f" -> {args.model}\n")
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=1, sort_keys=True))
    return report


def run(args, out=None):
    """Fit (and validate) on the cluster; returns the report dict."""
    from streamrank._phases import phase
    from streamrank.rankrls.selection import select_from_fold_statistics

    out = sys.stdout if out is None else out
    _check_model_out(args)
    if args.learner == "sgd-bilinear":
        return run_sgd(args, out)
    if args.learner == "sgd-pairwise":
        return run_pairwise(args, out)
    store = sr.GroupStore.open(args.store, storage_options=_opts(args))
    est = build_estimator(args)
    report = {"store": str(args.store), "rows": store.n_rows, "groups": store.n_groups,
              "learner": args.learner, "model": str(args.model)}
    t0 = time.perf_counter()
    with srd.get_client(args.scheduler, n_workers=args.workers) as client:
        report["workers"] = len(client.scheduler_info()["workers"])
        if args.alphas is not None:
            if args.learner != "rankrls" or est.solver_for(store) != "primal":
                raise ValueError("--alphas selects λ from fold statistics: primal RankRLS only")
            folds = srd.statistics(est, store, client, max_rows=args.max_rows, split_every=args.split_every,
                                   folds=args.folds)
            res, total = select_from_fold_statistics(est, folds, args.alphas)
            est.alpha = res.best_alpha     # the saved model carries the chosen λ
            with phase(f"solve ({store.n_features:,} features, alpha={res.best_alpha:.4g})"):
                est.fit_statistics(total, y_1d=store.n_outputs == 1)
            est.record_selection(res)
            est.fold_stats_ = folds
            report["selection"] = {"alphas": [float(a) for a in args.alphas],
                                   "cv_squared": [float(s) for s in res.scores], "alpha": res.best_alpha}
        else:
            srd.fit(est, store, client, max_rows=args.max_rows, split_every=args.split_every)
        report["fit_seconds"] = time.perf_counter() - t0
        if args.validation:
            res = srd.evaluate(est, args.validation, client, k=10, metrics=("ndcg", "disagreement"),
                               max_rows=args.max_rows, split_every=args.split_every)
            report["validation"] = {k: float(v.value) for k, v in res.items()}
    sr.save(est, args.model, storage_options=_opts(args))
    report["alpha"] = float(est.alpha)
    line = (f"distributed {args.learner}: {store.n_rows} rows / {store.n_groups} groups on "
            f"{report['workers']} worker(s) in {report['fit_seconds']:.2f} s, alpha={est.alpha:.4g}")
    if "validation" in report:
        line += " " + " ".join(f"{k} {v:.4f}" for k, v in report["validation"].items())
    out.write(line + f" -> {args.model}\n")
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=1, sort_keys=True))
    return report


def run_pairwise(args, out):
    """PairwiseSGDRanker rounds over a GroupStore; NDCG@10 against one machine on as many pairs."""
    from streamrank.metrics import evaluate

    store = sr.GroupStore.open(args.store, storage_options=_opts(args))
    est = build_estimator(args)
    steps = args.steps_per_round
    report = {"store": str(args.store), "rows": store.n_rows, "learner": args.learner, "model": str(args.model),
              "rounds": args.rounds, "steps_per_round": steps}
    t0 = time.perf_counter()
    with srd.get_client(args.scheduler, n_workers=args.workers) as client:
        k = len(client.scheduler_info()["workers"])
        srd.fit(est, store, client, rounds=args.rounds, steps_per_round=steps, n_shards=k,
                max_rows=args.max_rows)
        report.update(workers=k, fit_seconds=time.perf_counter() - t0, t=est.t_)
        val = args.validation or store
        report["ndcg@10"] = float(srd.evaluate(est, val, client, k=10, metrics=("ndcg",),
                                               max_rows=args.max_rows)["ndcg@10"].value)
    sr.save(est, args.model, storage_options=_opts(args))
    line = (f"distributed {args.learner}: {args.rounds} rounds x {k} shards x {steps} pairs in "
            f"{report['fit_seconds']:.2f} s, ndcg@10 {report['ndcg@10']:.4f}")
    if args.compare_single:
        t1 = time.perf_counter()
        single = build_estimator(args).fit(store, n_pairs=args.rounds * k * steps, max_rows=args.max_rows)
        report["single_seconds"] = time.perf_counter() - t1
        vsrc = sr.GroupStore.open(val, storage_options=_opts(args)) if isinstance(val, str) else val
        report["single_ndcg@10"] = float(evaluate(vsrc, single, k=10, metrics=("ndcg",))["ndcg@10"].value)
        line += f" (one machine, as many pairs: {report['single_ndcg@10']:.4f} in {report['single_seconds']:.2f} s)"
    out.write(line + f" -> {args.model}\n")
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=1, sort_keys=True))
    return report


def build_parser():
    from streamrank.cli import parse_storage_options

    from streamrank.pipelines.nightly import _parse_alphas

    p = argparse.ArgumentParser(prog="streamrank distributed", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", required=True,
                   help="GroupStore (TupleStore for sgd learners) path reachable by every worker")
    p.add_argument("--model", required=True, metavar="OUT", help="where sr.save writes the model")
    p.add_argument("--overwrite", action="store_true", help="replace an existing model at --model (else refused)")
    p.add_argument("--storage-options", metavar="JSON", type=parse_storage_options, default=None,
                   help="for a --store, --validation or --model at a URL: the filesystem's options as a JSON "
                        "object, e.g. '{\"endpoint_url\": \"http://minio:9000\"}'")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT", help="dask scheduler address")
    where.add_argument("--workers", type=int, default=None, metavar="N",
                       help="LocalCluster worker processes (default: one per core)")
    p.add_argument("--learner", required=True, choices=LEARNERS)
    p.add_argument("--alpha", type=float, default=1.0, help="λ (ignored with --alphas)")
    p.add_argument("--alphas", type=_parse_alphas, default=None, metavar="GRID",
                   help="choose λ by k-fold group CV from fold statistics: 'a,b,c' or '2^-15:2^15'")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--solver", default="auto", choices=("auto", "primal", "cg"), help="RankRLS solver")
    p.add_argument("--group-weight", default="pair", choices=("pair", "query", "size"))
    p.add_argument("--ties", default="include", choices=("include", "exclude"),
                   help="rankrls / sparse-kernel: tied pairs (exclude drops them exactly)")
    p.add_argument("--kernel", default="rbf", help="sparse-kernel: kernel name")
    p.add_argument("--gamma", type=float, default=1.0, help="sparse-kernel: kernel width")
    p.add_argument("--n-basis", type=int, default=500, help="sparse-kernel: basis rows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--normalize", choices=("standard", "minmax"), default=None,
                   help="scale the features (every learner; the moments are reduced on the cluster; sgd-bilinear "
                        "scales only, no centring): the same model as the local fit with normalize=")
    p.add_argument("--rounds", type=int, default=10, help="sgd: averaging rounds")
    p.add_argument("--steps-per-round", type=int, default=10_000, help="sgd: steps per shard and round")
    p.add_argument("--eta0", type=float, default=None,
                   help="sgd: C of eta_t = C / sqrt(t) (default: the learner's, 200 bilinear / 0.1 pairwise)")
    p.add_argument("--l1", type=float, default=None, help="sgd: L1 strength (default: the learner's)")
    p.add_argument("--refit", action="store_true",
                   help="sgd-bilinear: refit rounds after the main rounds (SGD without L1 on the support of W)")
    p.add_argument("--compare-single", action="store_true",
                   help="sgd: also run one machine on the same tuples and report both qualities")
    p.add_argument("--max-rows", type=int, default=srd.DEFAULT_BLOCK_ROWS, help="block budget (rows)")
    p.add_argument("--split-every", type=int, default=srd.DEFAULT_SPLIT_EVERY, help="tree reduction fan-in")
    p.add_argument("--validation", default=None, metavar="STORE", help="evaluate on this store")
    p.add_argument("--report", default=None, metavar="FILE", help="write the JSON report here")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines (the result line is still printed)")
    p.add_argument("-v", "--verbose", action="store_true", help="print the traceback of an error")
    return p


def main(argv=None) -> int:
    """Run; every failure is one line on stderr and an exit code (:mod:`streamrank.pipelines._errors`)."""
    from streamrank.pipelines._errors import run_main

    from streamrank.cli import progress_reporting

    args = build_parser().parse_args(argv)

    def go():
        # the phases (statistics per shard, reduction, solve, CV folds, cg iterations) on stderr
        with progress_reporting(f"distributed {args.learner}", quiet=args.quiet):
            return run(args)
    return run_main("streamrank distributed", args.verbose, go)


if __name__ == "__main__":
    sys.exit(main())

"""The do-it-yourself pairwise ranker against ``PairwiseSGDRanker`` (issue 8, "Peers").

The common home-made ranker: sample preference pairs within queries, feed
the differences ``x⁺ − x⁻`` to scikit-learn's ``SGDClassifier`` (hinge loss,
L1 penalty, no intercept, ``learning_rate="invscaling"`` with
``power_t=0.5`` — the same η_t = η₀/√t schedule as streamrank) through
``partial_fit`` one chunk of queries at a time, as one must when the data do
not fit in memory.  Each pair enters once with a random sign (label ±1), so
both learners take one hinge step per pair.

``PairwiseSGDRanker.partial_fit(X, y, qid)`` gets the same chunks of
queries.  Reported for a few L1 strengths: NDCG@10 and disagreement on a
test set, wall time, and the model's sparsity (nonzero weights, and how many
of the informative features are among them).  One reference row trains
``SGDClassifier.fit`` on all pairs at once (in memory) to show what the
chunking costs it.

Equal settings.  Both minimise ``mean hinge + λ ||w||_1`` with the same
η_t = η₀/√t, the same step (``w += η_t (x⁺ − x⁻)`` when the margin is < 1)
and the same L1 rule: streamrank's default ``l1_rule="cumulative"`` is the
cumulative penalty of Tsuruoka et al. (2009) that scikit-learn implements
(``alpha`` = λ: scikit-learn adds ``alpha·η_t`` to its ``u`` per step, as
streamrank adds ``l1·η_t``); on the same pairs in one call the two give the
same weights to 1e-9 (``tests/sgd/test_sgd_pairwise_l1.py``).  The one
difference left is the chunking: scikit-learn restarts ``u`` and ``q`` at
every ``partial_fit`` call (``_plain_sgd`` allocates them per call), which
forgives each weight the penalty it owes at every chunk; streamrank
continues them, so its chunked model is the one-call model.

A third row, ``l1_rule="window"``, is the sparse-SGD paper's rule (soft
threshold of every weight by λ Σ η over each window of T = 100 steps, Chen
et al. 2010 eq. 7), which earlier versions used for this learner: the same
λ per step, but a noise weight survives whenever its walk over one window
(~√T η) beats λ T η, so it is far less sparse than the L1 minimiser.
``--lp-pairs N`` solves the exact minimiser of ``mean hinge + λ ||w||_1``
on the first N pairs (a linear program, HiGHS; minutes for N = 20,000) and
runs both rules on the same pairs in one pass, to show which is faithful.

Data: synthetic LETOR-like groups (``streamrank.datasets.synthetic``,
linear hidden model) on ``--informative`` features, plus ``--noise``
standard-normal features that carry nothing — so a good L1 model is sparse.

Usage::

    python benchmarks/peers_sgd.py --smoke
    python benchmarks/peers_sgd.py                    # 200,000 rows, 20 + 180 features
    python benchmarks/peers_sgd.py --l1 0.01 0.1 --lp-pairs 20000   # + exact minimiser (minutes)
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import environment, fmt_mib, measure, peer_available, print_environment, print_table  # noqa: E402


def make_data(n_rows, informative, noise, seed):
    from streamrank.datasets.synthetic import make_letor_like

    X, y, qid = make_letor_like(n_rows, informative, random_state=seed, group_size=(10, 30))
    rng = np.random.default_rng([seed, 99])
    Z = rng.normal(size=(len(y), noise)).astype(np.float32)
    return np.hstack([X, Z]), y, qid


def _chunks(X, y, qid, chunk_rows):
    """Whole query groups, about chunk_rows rows per chunk."""
    cut = np.flatnonzero(np.diff(qid) != 0) + 1
    starts = np.concatenate(([0], cut))
    a = 0
    while a < len(y):
        b = starts[np.searchsorted(starts, a + chunk_rows)] if a + chunk_rows < len(y) and \
            np.searchsorted(starts, a + chunk_rows) < len(starts) else len(y)
        yield X[a:b], y[a:b], qid[a:b]
        a = b


def _pairs(X, y, qid, n_pairs, rng):
    """Sampled pair differences with random signs (pairs_from_groups: uniform query, then pair)."""
    import streamrank as sr

    D, lab = [], []
    for pb in sr.pairs_from_groups((X, y, qid), n_pairs=n_pairs, random_state=rng, batch_size=1 << 20):
        d = np.asarray(pb.X_pos, dtype=np.float64) - np.asarray(pb.X_neg, dtype=np.float64)
        s = rng.choice([-1.0, 1.0], size=len(d))
        D.append(d * s[:, None])
        lab.append(s)
    if not D:
        return None, None
    return np.vstack(D), np.concatenate(lab)


def _quality(model_scores, test, informative):
    import streamrank as sr

    Xt, yt, qt = test
    return dict(ndcg=float(sr.metrics.ndcg(yt, model_scores(Xt), qt, k=10)),
                disagreement=float(sr.metrics.disagreement(yt, model_scores(Xt), qt)))


def _sparsity(coef, informative):
    coef = np.ravel(coef)
    nz = np.flatnonzero(coef != 0)
    return dict(nnz=int(len(nz)), n=len(coef), hit=int(np.sum(nz < informative)))


def run_sklearn(train, test, l1, eta0, chunk_rows, pairs_per_row, informative, chunked=True, seed=0):
    from sklearn.linear_model import SGDClassifier

    X, y, q = train
    rng = np.random.default_rng(seed)
    clf = SGDClassifier(loss="hinge", penalty="l1" if l1 > 0 else None, alpha=max(l1, 1e-12),
                        fit_intercept=False, learning_rate="invscaling", eta0=eta0, power_t=0.5,
                        random_state=seed, shuffle=False)
    t_pairs = 0.0
    t0 = time.perf_counter()
    if chunked:
        for Xc, yc, qc in _chunks(X, y, q, chunk_rows):
            ta = time.perf_counter()
            D, lab = _pairs(Xc, yc, qc, int(pairs_per_row * len(yc)), rng)
            t_pairs += time.perf_counter() - ta
            if D is not None:
                clf.partial_fit(D, lab, classes=np.array([-1.0, 1.0]))
    else:
        ta = time.perf_counter()
        D, lab = _pairs(X, y, q, int(pairs_per_row * len(y)), rng)
        t_pairs += time.perf_counter() - ta
        clf.set_params(max_iter=1, tol=None)
        clf.fit(D, lab)
    fit_s = time.perf_counter() - t0
    w = clf.coef_.ravel()
    out = _quality(lambda Z: np.asarray(Z, dtype=np.float64) @ w, test, informative)
    out.update(_sparsity(w, informative), fit_s=fit_s, pairs_s=t_pairs)
    return out


def run_streamrank(train, test, l1, eta0, chunk_rows, pairs_per_row, informative, seed=0, l1_rule="cumulative"):
    import streamrank as sr

    X, y, q = train
    model = sr.PairwiseSGDRanker(eta0=eta0, l1=l1, l2=0.0, loss="hinge", random_state=seed, l1_rule=l1_rule)
    t0 = time.perf_counter()
    for Xc, yc, qc in _chunks(X, y, q, chunk_rows):
        try:
            model.partial_fit(Xc, yc, qc, n_pairs=int(pairs_per_row * len(yc)))
        except TypeError:  # partial_fit without an n_pairs argument: its own default per batch
            model.partial_fit(Xc, yc, qc)
    fit_s = time.perf_counter() - t0
    w = np.ravel(model.coef_)
    out = _quality(model.predict, test, informative)
    out.update(_sparsity(w, informative), fit_s=fit_s, pairs_s=None)
    out["steps"] = int(getattr(model, "t_", 0) or 0)
    return out


COLUMNS = [("learner", "learner", "s"), ("l1", "L1 λ", "g"), ("ndcg", "NDCG@10", ".4f"),
           ("disagreement", "disagr.", ".4f"), ("fit_s", "fit s", ".2f"), ("pairs_s", "of it pair sampling s", ".2f"),
           ("nnz", "nonzero w", "d"), ("hit", "informative kept", "d"), ("peak", "peak RSS", fmt_mib),
           ("note", "note", "s")]


def build_parser():
    p = argparse.ArgumentParser(prog="benchmarks/peers_sgd.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny data, seconds")
    p.add_argument("--rows", type=int, default=200_000, help="training rows (default 200,000)")
    p.add_argument("--test-rows", type=int, default=50_000)
    p.add_argument("--informative", type=int, default=20, help="features of the hidden model (default 20)")
    p.add_argument("--noise", type=int, default=180, help="extra pure-noise features (default 180)")
    p.add_argument("--chunk-rows", type=int, default=10_000, help="rows per partial_fit call (whole queries)")
    p.add_argument("--pairs-per-row", type=float, default=1.0, help="sampled pairs per training row")
    p.add_argument("--l1", type=float, nargs="+", default=[0.0, 1e-4, 1e-3, 1e-2], help="L1 strengths")
    p.add_argument("--eta0", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lp-pairs", type=int, default=0,
                   help="also solve the exact L1 minimiser on this many training pairs (0: skip)")
    return p


def lp_check(train, l1s, eta0, n_pairs, informative, seed=0):
    """Exact minimiser of mean hinge + λ||w||_1 on n_pairs sampled pairs vs both SGD rules (one pass)."""
    import scipy.sparse as sp
    from scipy.optimize import linprog

    import streamrank as sr

    X, y, q = train
    D, lab = _pairs(X, y, q, n_pairs, np.random.default_rng([seed, 5]))
    Dp = D * lab[:, None]  # x+ - x-
    n, f = Dp.shape
    A = sp.hstack([sp.csr_matrix(-Dp), sp.csr_matrix(Dp), -sp.eye(n)]).tocsr()
    rows = []
    for l1 in l1s:
        def obj(w):
            return float(np.mean(np.maximum(0.0, 1.0 - Dp @ w)) + l1 * np.abs(w).sum())

        t0 = time.perf_counter()
        res = linprog(np.concatenate([np.full(2 * f, l1), np.full(n, 1.0 / n)]), A_ub=A, b_ub=-np.ones(n),
                      bounds=(0, None), method="highs")
        w = res.x[:f] - res.x[f:2 * f]
        w[np.abs(w) <= 1e-9] = 0.0
        lp_s = time.perf_counter() - t0
        rows.append(dict(method="exact minimiser (LP)", l1=l1, objective=obj(w), **_sparsity(w, informative),
                         s=lp_s))
        for rule in ("cumulative", "window"):
            t0 = time.perf_counter()
            m = sr.PairwiseSGDRanker(eta0=eta0, l1=l1, l1_rule=rule).partial_fit_pairs(Dp, np.zeros_like(Dp))
            rows.append(dict(method=f"PairwiseSGDRanker l1_rule={rule!r}, one pass", l1=l1,
                             objective=obj(m.coef_), **_sparsity(m.coef_, informative),
                             s=time.perf_counter() - t0))
    return rows


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.smoke:
        args.rows, args.test_rows, args.noise, args.chunk_rows, args.l1 = 3_000, 1_000, 30, 1_000, [1e-3]
        args.lp_pairs = min(args.lp_pairs, 300)
    env = environment(peers=("sklearn",))
    print_environment(env)
    print("command: python benchmarks/peers_sgd.py " + " ".join(argv if argv is not None else sys.argv[1:]))
    train = make_data(args.rows, args.informative, args.noise, args.seed)
    test = make_data(args.test_rows, args.informative, args.noise, args.seed + 1)
    nf = train[0].shape[1]
    print(f"{args.rows:,} training rows ({len(np.unique(train[2])):,} queries), {nf} features "
          f"({args.informative} informative), chunks of ~{args.chunk_rows:,} rows, "
          f"{args.pairs_per_row:g} sampled pair(s) per row, eta0 {args.eta0:g}")
    common = dict(eta0=args.eta0, chunk_rows=args.chunk_rows, pairs_per_row=args.pairs_per_row,
                  informative=args.informative, seed=args.seed)
    rows = []
    have_sk = peer_available("sklearn")
    for l1 in args.l1:
        plan = [("streamrank PairwiseSGDRanker partial_fit", run_streamrank, {}, True),
                ("streamrank partial_fit, l1_rule='window' (paper eq. 7, T=100)", run_streamrank,
                 dict(l1_rule="window"), True)]
        if have_sk:
            plan += [("sklearn SGDClassifier partial_fit", run_sklearn, dict(chunked=True), True),
                     ("sklearn SGDClassifier fit, all pairs in memory", run_sklearn, dict(chunked=False), True)]
        for name, fn, kw, _ in plan:
            try:
                out, _, peak = measure(fn, train, test, l1, **common, **kw)
            except Exception as exc:
                msg = str(exc).strip().splitlines()
                rows.append(dict(learner=name, l1=l1, note=f"FAILED: {msg[0] if msg else type(exc).__name__}"))
                continue
            out.update(learner=name, l1=l1, peak=peak, note=f"{out['nnz']}/{out['n']} nonzero")
            rows.append(out)
    if not have_sk:
        print("scikit-learn is not installed: only streamrank ran")
    print_table(rows, COLUMNS, title="Pairwise hinge SGD with L1, trained chunk by chunk (test set "
                                     f"{args.test_rows:,} rows; peak RSS above start, in-process)")
    if args.lp_pairs:
        lp_rows = lp_check(train, [l for l in args.l1 if l > 0], args.eta0, args.lp_pairs, args.informative,
                           args.seed)
        print_table(lp_rows, [("l1", "L1 λ", "g"), ("method", "model", "s"), ("objective", "mean hinge + λ|w|₁", ".5f"),
                              ("nnz", "nonzero w", "d"), ("hit", "informative kept", "d"), ("s", "s", ".1f")],
                    title=f"Which L1 rule minimises the objective? {args.lp_pairs:,} training pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Position bias from ordinary click logs (issue 37): θ recovery at 10⁶ impressions, pass cost, memory.

Logs: ``streamrank.datasets.clicks.simulate_position_bias`` — 2000 queries ×
30 documents, 10 N(0, 1) features, relevance γ = σ(b + x·β), examination
θ_k = (1/k)^eta over 10 positions; ONE deterministic production ranker
(a noisy copy of x·β, no randomization) for the EM rows, four such rankers
for the harvesting rows.

Rows, per eta (0.5, 1, 2):

* EM — ``streamrank.position_bias.estimate_propensity_em`` on the in-memory
  log: max over k <= 5 of |θ̂_k / θ_k - 1| (the issue's bar: 5 %), iterations,
  streamed passes, whether the objective ever decreased (it must not), time;
* naive — CTR(k) / CTR(1) of the same log (what ignoring relevance gives);
* harvest — ``harvest_propensity`` on a 4-ranker log of the same size, with
  the share of k <= 10 whose 95 % interval holds the truth.

From a GroupStore (eta 1, click/position columns): one EM pass over the
store against one ``RankRLS.fit`` of the same store (the plain streaming
pass; best of 3 each), and tracemalloc's peak of three EM passes at a quarter
of the impressions and at all of them (memory flat in impressions: both
many blocks).

Usage::

    python benchmarks/position_bias_em.py --smoke    # seconds: 2·10⁴ impressions
    python benchmarks/position_bias_em.py            # 10⁶ impressions (a few minutes)
"""
from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import print_table  # noqa: E402


def _sim(n, eta, rankers, seed):
    from streamrank.datasets.clicks import simulate_position_bias

    return simulate_position_bias(n_queries=2000, docs_per_query=30, n_features=10, n_sessions=n // 10, k=10,
                                  eta=eta, n_rankers=rankers, random_state=seed)


def run_eta(n, eta, seed):
    from streamrank.position_bias import estimate_propensity_em, harvest_propensity

    log = _sim(n, eta, 1, seed)
    t0 = time.perf_counter()
    em = estimate_propensity_em(log.X, clicks=log.clicks, position=log.position)
    t_em = time.perf_counter() - t0
    ctr = np.array([log.clicks[log.position == k].mean() for k in range(1, 11)])
    many = _sim(n, eta, 4, seed + 100)
    t0 = time.perf_counter()
    h = harvest_propensity(key=many.doc, clicks=many.clicks, position=many.position, ranker=many.ranker)
    t_h = time.perf_counter() - t0
    err = lambda th: float(np.max(np.abs(th[:5] / log.theta[:5] - 1)))  # noqa: E731
    return {"eta": eta, "n": len(log.clicks), "em_err": err(em.theta), "naive_err": err(ctr / ctr[0]),
            "iters": em.n_iter, "passes": em.n_passes, "monotone": "yes" if np.all(np.diff(em.objective) >= 0) else "NO",
            "em_s": t_em, "pass_s": float(np.median(em.seconds)), "h_err": err(h.theta),
            "h_cover": float(np.mean((h.lower <= many.theta) & (many.theta <= h.upper))), "h_s": t_h,
            "theta": " ".join(f"{v:.3f}" for v in em.theta[:5])}


def store_costs(n, seed, max_rows=65536):
    import tempfile

    import streamrank as sr
    from streamrank.position_bias import estimate_propensity_em

    log = _sim(n, 1.0, 1, seed)
    out = {}
    with tempfile.TemporaryDirectory() as d:
        peaks = {}
        for frac, m in (("quarter", n // 4), ("all", n)):
            path = f"{d}/{frac}.zarr"
            s = sr.GroupStore.create(path, log.X.shape[1], row_columns=("click", "position"))
            s.append(log.X[:m], log.clicks[:m], log.session[:m], click=log.clicks[:m], position=log.position[:m])
            s = sr.GroupStore.open(path)
            tracemalloc.start()
            em = estimate_propensity_em(s, max_iter=3, max_rows=max_rows)
            peaks[frac] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            if frac == "all":
                em_pass = min(em.seconds)
                fits = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    sr.RankRLS(alpha=1.0).fit(s, max_rows=max_rows)
                    fits.append(time.perf_counter() - t0)
                for _ in range(2):
                    em_pass = min(em_pass, min(estimate_propensity_em(s, max_iter=2, max_rows=max_rows).seconds))
                out.update(em_pass=em_pass, fit=min(fits), rows=m)
        out.update(peak_quarter=peaks["quarter"] / 2 ** 20, peak_all=peaks["all"] / 2 ** 20)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="2·10⁴ impressions, eta 1")
    ap.add_argument("--impressions", type=int, default=1_000_000)
    ap.add_argument("--eta", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.smoke:
        args.impressions, args.eta = 20_000, [1.0]
    rows = [run_eta(args.impressions, eta, args.seed) for eta in args.eta]
    print_table(rows, [("eta", "eta", ".1f"), ("n", "impressions", "d"), ("theta", "EM θ̂_1..5", "s"),
                       ("em_err", "EM max_k<=5 |θ̂/θ-1|", ".4f"), ("naive_err", "naive CTR ratio", ".4f"),
                       ("iters", "EM iters", "d"), ("passes", "passes", "d"), ("monotone", "objective monotone", "s"),
                       ("em_s", "EM s", ".1f"), ("pass_s", "s/pass", ".3f"),
                       ("h_err", "harvest (4 rankers) max_k<=5", ".4f"), ("h_cover", "95% CI covers", ".2f"),
                       ("h_s", "harvest s", ".1f")],
               title="position bias from ordinary logs: one deterministic ranker (EM), four rankers (harvest)")
    c = store_costs(args.impressions, args.seed)
    print(f"from a GroupStore ({c['rows']} rows, 10 features, eta 1): one EM pass {c['em_pass']:.3f} s / one "
          f"RankRLS.fit pass {c['fit']:.3f} s = {c['em_pass'] / c['fit']:.2f} (best of 3); tracemalloc peak of 3 EM "
          f"passes: {c['peak_quarter']:.1f} MiB at {c['rows'] // 4} rows, {c['peak_all']:.1f} MiB at {c['rows']} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())

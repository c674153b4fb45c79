"""Nightly data checks (issue 36): how often a good day is quarantined, and what the checks cost.

Two questions, each its own section:

1. **False quarantines.** 20 random sequences of five good days each, from two sources: MQ2008 (the
   784 queries of S1..S5 in a random order, cut into five days of ~157 queries) and the synthetic recipe
   (:func:`streamrank.datasets.synthetic.make_letor_like`, 46 features, days of a random 3,000-6,000
   rows, one hidden model).  Every night runs ``run_night`` with the default thresholds; the figure is
   quarantined good days / days checked against a baseline (nights 2-5).  Target: 0.
2. **Cost.** A night that ingests a 1,000,000-row day (46 features, ``.npz``) after a first night of
   as many rows, with the checks and with ``checks=None``, each on a fresh copy of the same store and
   models directory.  The checks' share is the time the night itself spent in them
   (``report["checks"]["seconds"]``: the profile's work in the ingest pass — moments, label counts, group
   hashes, the current model's scores — and the checks) over the same night's wall time, which a loaded
   machine slows alike; the end-to-end difference (best of ``--repeat``) is printed too.  Target: <= 10 %.

Usage::

    python benchmarks/nightly_checks.py --smoke     # seconds: 2 sequences, a 100,000-row day
    python benchmarks/nightly_checks.py             # 20 sequences, a 1,000,000-row day
"""
from __future__ import annotations

import argparse
import io
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "pipelines"))

ALPHAS = 2.0 ** np.arange(-4, 9, 2)


def _night(store, models, day, **kw):
    from streamrank.pipelines import nightly

    return nightly.run_night(store, [day], models, alphas=ALPHAS, plot=False, out=io.StringIO(), **kw)


def _mq_sequences(tmp, n, rng):
    from mq_days import ARCHIVE, read_queries

    if not ARCHIVE.exists():
        return
    queries = []
    for i in range(1, 6):
        lines, starts = read_queries(f"MQ2008/S{i}.txt")
        queries += ["".join(lines[starts[q]:starts[q + 1]]) for q in range(len(starts) - 1)]
    for s in range(n):
        order = rng.permutation(len(queries))
        days = []
        for d, part in enumerate(np.array_split(order, 5)):
            p = tmp / f"mq{s}-{d}.txt"
            p.write_text("".join(queries[q] for q in part))
            days.append(p)
        yield f"mq2008 #{s}", days


def _synthetic_sequences(tmp, n, rng):
    from streamrank.datasets.synthetic import make_letor_like

    for s in range(n):
        days = []
        for d in range(5):
            X, y, q = make_letor_like(int(rng.integers(3000, 6001)), 46, random_state=1000 * s + d,
                                      model_seed=0, qid_offset=1_000_000 * d)
            p = tmp / f"syn{s}-{d}.npz"
            np.savez(p, X=X, y=y, qid=q)
            days.append(p)
        yield f"synthetic #{s}", days


def false_quarantines(n_sequences, seed=0):
    from streamrank.pipelines._nightly_checks import DEFAULTS

    rng = np.random.default_rng(seed)
    rows = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for source in (_mq_sequences, _synthetic_sequences):
            for name, days in source(tmp, n_sequences, rng):
                store, models = tmp / "s.zarr", tmp / "m"
                shutil.rmtree(store, ignore_errors=True)
                shutil.rmtree(models, ignore_errors=True)
                checked = quarantined = 0
                worst = {}
                for day in days:
                    rep = _night(store, models, day)
                    for d in rep["checks"]["days"]:
                        if any(c["status"] != "skipped" for k, c in d["checks"].items() if k != "schema"):
                            checked += 1
                        quarantined += d["decision"] == "quarantined"
                        ag = d["checks"].get("agreement", {})
                        if ag.get("ndcg") is not None and ag.get("median_ndcg") is not None:
                            m = ag["ndcg"] - (ag["median_ndcg"] - DEFAULTS["max_ndcg_drop"])
                            worst["ndcg margin"] = min(worst.get("ndcg margin", 1.0), m)
                        if ag.get("disagreement") is not None and ag.get("median_disagreement") is not None:
                            m = ag["median_disagreement"] + DEFAULTS["max_disagreement_rise"] - ag["disagreement"]
                            worst["disagreement margin"] = min(worst.get("disagreement margin", 1.0), m)
                        vol = d["checks"].get("volume", {}).get("ratios")
                        if vol:
                            worst["volume ratio max"] = max(worst.get("volume ratio max", 0.0), *vol.values())
                            worst["volume ratio min"] = min(worst.get("volume ratio min", 9.9), *vol.values())
                        for k, c in d["checks"].items():
                            if k != "agreement" and isinstance(c.get("figure"), float) and isinstance(c.get("threshold"), float) \
                                    and c["threshold"] > 0:
                                worst[k] = max(worst.get(k, 0.0), c["figure"] / c["threshold"])
                rows.append((name, checked, quarantined, worst))
    return rows


def cost(n_rows, repeat):
    from streamrank.datasets.synthetic import make_letor_like
    from streamrank.pipelines._nightly_checks import DayProfile
    from streamrank.pipelines._nightly_ingest import iter_day

    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        X, y, q = make_letor_like(n_rows, 46, random_state=1, model_seed=0)
        first = tmp / "first.npz"
        np.savez(first, X=X, y=y, qid=q)
        X, y, q = make_letor_like(n_rows, 46, random_state=2, model_seed=0, qid_offset=10_000_000)
        big = tmp / "big.npz"
        np.savez(big, X=X, y=y, qid=q)
        del X, y, q
        base_s, base_m = tmp / "s0.zarr", tmp / "m0"
        _night(base_s, base_m, first)
        times = {"checks": [], "none": []}
        shares = []
        for r in range(repeat):
            for mode in (("none", "checks") if r % 2 == 0 else ("checks", "none")):     # alternate the order
                s, m = tmp / f"s-{mode}-{r}.zarr", tmp / f"m-{mode}-{r}"
                shutil.copytree(base_s, s)
                shutil.copytree(base_m, m)
                t0 = time.perf_counter()
                rep = _night(s, m, big, **({"checks": None} if mode == "none" else {}))
                times[mode].append(time.perf_counter() - t0)
                assert rep["status"] == "promoted", rep["status"]
                if mode == "checks":
                    assert rep["checks"]["days"][0]["decision"] == "accepted", rep["checks"]
                    shares.append(rep["checks"]["seconds"] / times[mode][-1])   # measured inside the same night
                    print(f"  night {times[mode][-1]:.2f} s: checks {rep['checks']['seconds']:.2f} s, of which "
                          f"profiles {rep['checks']['profile_seconds']:.2f} s", flush=True)
                shutil.rmtree(s)
                shutil.rmtree(m)
        import streamrank as sr

        model = sr.load(base_m / "current")
        prof_t = []
        for _ in range(repeat):
            chunks = list(iter_day(big))
            p = DayProfile(model)
            t0 = time.perf_counter()
            for X, y, q in chunks:
                p.add(X, y, q)
            p.agreement()
            prof_t.append(time.perf_counter() - t0)
        return min(times["checks"]), min(times["none"]), min(prof_t), shares


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="2 sequences and a 100,000-row day")
    ap.add_argument("--sequences", type=int, default=None)
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--skip-rate", action="store_true")
    ap.add_argument("--skip-cost", action="store_true")
    a = ap.parse_args(argv)
    n_seq = a.sequences or (2 if a.smoke else 20)
    n_rows = a.rows or (100_000 if a.smoke else 1_000_000)
    if not a.skip_rate:
        print(f"== 1. false quarantines: {n_seq} random good-day sequences of 5 days per source, default thresholds")
        rows = false_quarantines(n_seq)
        for src in ("mq2008", "synthetic"):
            mine = [r for r in rows if r[0].startswith(src)]
            if not mine:
                print(f"{src}: not available")
                continue
            checked = sum(r[1] for r in mine)
            bad = sum(r[2] for r in mine)
            keys = sorted({k for r in mine for k in r[3]})
            worst = {k: (min if ("margin" in k or k.endswith("min")) else max)(r[3][k] for r in mine if k in r[3])
                     for k in keys}
            print(f"{src:10s} sequences {len(mine):3d}  days checked {checked:4d}  quarantined {bad:3d}  "
                  f"false-quarantine rate {bad / max(checked, 1):.4f}")
            print("           over all days: largest figure / threshold, smallest agreement margin "
                  "(NDCG@10 - threshold; threshold - disagreement), volume ratio extremes: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in worst.items()))
    if not a.skip_cost:
        print(f"== 2. cost: a night ingesting a {n_rows:,}-row day (46 features) after a night of as many, "
              f"best of {a.repeat}")
        with_c, without, prof, shares = cost(n_rows, a.repeat)
        print(f"time inside the checks (profiles in the ingest pass + the checks), over the same night's wall "
              f"time: {', '.join(f'{x:.1%}' for x in shares)} (median {np.median(shares):.1%})")
        print(f"the profile of the day alone (in this process, best of {a.repeat}): {prof:.2f} s")
        print(f"end to end, best of {a.repeat} (noisy on a shared machine): with checks {with_c:.2f} s, without "
              f"{without:.2f} s ({(with_c - without) / with_c:+.1%})")


if __name__ == "__main__":
    main()

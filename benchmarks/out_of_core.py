"""Scale: stores of 10⁶, 10⁷ (and, with ``--huge``, 10⁸) rows × 50 features streamed from disk.

Question (issue 8, "Scale"): does peak memory stay flat and throughput hold as
the data grow?  For each size a synthetic LETOR-like GroupStore (linear
hidden model, groups of 5–40 rows, float32; written streaming, chunk by
chunk — the 10⁸-row store is ~20 GB on disk) goes through

* a raw read of every block (the baseline: what reading the store costs),
* ``RankRLS`` primal (one pass accumulating XᵀLX, XᵀLy; λ fixed),
* sparse ``KernelRankRLS`` rbf, r = 500 basis rows (reservoir pass +
  statistics pass),
* ``PairwiseSGDRanker`` on as many sampled within-group pairs as there are rows
  (``--sgd-pairs N`` caps that number; the table then says so),

each in a fresh subprocess, so "peak RSS" is that process's lifetime maximum
(interpreter, imports, buffers, model).  Reported: wall time, rows/s, ratio
to the raw read, peak RSS, the 1-minute load average before / after the
learner (the machine may be shared: a figure taken under load says so), the
store's O(groups) metadata held in memory (``group_ptr`` + ``qid``, 16 bytes
a group), and NDCG@10 / disagreement on a 100,000-row test store from the
same hidden model (to show the fit is a real one).

Memory and the C allocator: the blocks are ~20 MB arrays allocated by zarr's
decode threads and the prefetch thread and freed by the consumer; glibc's
per-thread arenas and its *dynamic* mmap threshold (raised to the size of
every large block freed, so later blocks come from the arenas) make RSS
creep for the first few dozen blocks before it levels off.
``--malloc tuned`` runs the learners with ``MALLOC_MMAP_THRESHOLD_=1 MiB``
(which also switches the dynamic threshold off) and ``MALLOC_ARENA_MAX=2``
so that large buffers go back to the OS on free; ``default`` leaves glibc
alone (see README, "Scale").

Usage::

    python benchmarks/out_of_core.py --smoke         # seconds
    python benchmarks/out_of_core.py                 # 10^6 and 10^7 rows
    python benchmarks/out_of_core.py --huge          # + 10^8 rows (~20 GB, long)
    python benchmarks/out_of_core.py --sizes 1000000 # any sizes

Stores are written under ``--work-dir`` (default /tmp/streamrank_bench) and
reused when the same size is asked again; ``--clean`` deletes them after use.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import environment, fmt_mib, measure, print_environment, print_table  # noqa: E402

N_FEATURES = 50

#: glibc settings of ``--malloc tuned`` (environment of the learner subprocesses)
MALLOC_TUNED = {"MALLOC_MMAP_THRESHOLD_": str(1 << 20), "MALLOC_ARENA_MAX": "2"}


def _load() -> float:
    """1-minute load average (nan where the OS has none)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):  # pragma: no cover
        return float("nan")


def _du(path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def write_store(path, n_rows, n_features, seed, chunk_rows=200_000):
    """Write (or reuse) a synthetic store; returns seconds spent writing (0 when reused)."""
    from streamrank.datasets.synthetic import write_letor_like_store

    spec = dict(n_rows=n_rows, n_features=n_features, seed=seed)
    marker = Path(path) / "bench_spec.json"
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return 0.0
    t0 = time.perf_counter()
    write_letor_like_store(path, n_rows, n_features, overwrite=True, random_state=seed, chunk_rows=chunk_rows)
    marker.write_text(json.dumps(spec))
    return time.perf_counter() - t0


def _evaluate(model, test_path, max_rows):
    import streamrank as sr

    res = sr.metrics.evaluate(sr.GroupStore.open(test_path), model, k=10, metrics=("ndcg", "disagreement"),
                              max_rows=max_rows)
    return float(res["ndcg@10"].value), float(res["disagreement"].value)


def _meta_bytes(store) -> int:
    """O(groups) arrays the store handle holds: group_ptr (8 bytes a group), plus qid when loaded."""
    q = getattr(store, "_qid_cache", None)
    return int(store.group_ptr.nbytes + (q.nbytes if q is not None else 0))


def _log_progress(store, log_path, t0):
    """Append ``seconds rows_read rss_mib`` to ``log_path`` after every block the learner reads.

    Shadows the store handle's ``read_block`` (every pass reads through it), so a
    run that cannot finish still shows its rows/s and RSS so far (several passes:
    rows_read counts past n_rows).
    """
    import psutil

    proc, read, done = psutil.Process(), store.read_block, [0]
    f = open(log_path, "a", buffering=1)
    f.write(f"# {time.strftime('%H:%M:%S', time.gmtime())} UTC start; n_rows {store.n_rows}\n")

    def read_block(r0, r1, g0, g1):
        b = read(r0, r1, g0, g1)
        done[0] += r1 - r0
        f.write(f"{time.perf_counter() - t0:.1f} {done[0]} {proc.memory_info().rss / 2**20:.0f} "
                f"{_load():.1f}\n")
        return b

    store.read_block = read_block


def run_learner(name, path, test_path, max_rows, n_basis, sgd_pairs=None, progress=None):
    """One learner on one store (run in its own process); returns figures."""
    import streamrank as sr

    store = sr.GroupStore.open(path)
    t0 = time.perf_counter()
    if progress:
        _log_progress(store, progress, t0)
    if name == "read":
        n = 0
        for b in store.blocks(max_rows=max_rows):
            n += b.n_rows
        return dict(fit_s=time.perf_counter() - t0, rows=n, meta=_meta_bytes(store))
    if name == "rankrls":
        model = sr.RankRLS(alpha=1.0, solver="primal").fit(store, max_rows=max_rows)
    elif name == "kernel":
        model = sr.KernelRankRLS(kernel="rbf", gamma=1.0 / (2.5 * N_FEATURES), alpha=1.0, n_basis=n_basis,
                                 random_state=0).fit(store)   # its own budget: (4 Mi entries / r) rows of Φ
    elif name == "sgd":
        model = sr.PairwiseSGDRanker(eta0=0.1, l1=0.0, l2=1e-6, loss="hinge", random_state=0)
        pairs = store.n_rows if sgd_pairs is None else min(int(sgd_pairs), store.n_rows)
        model.fit(store, n_pairs=pairs)
    else:  # pragma: no cover
        raise ValueError(name)
    fit_s = time.perf_counter() - t0
    nd, dis = _evaluate(model, test_path, max_rows) if test_path else (float("nan"), float("nan"))
    out = dict(fit_s=fit_s, rows=store.n_rows, ndcg=nd, disagreement=dis, meta=_meta_bytes(store))
    if name == "sgd":
        out["pairs"] = pairs
    return out


LEARNERS = [("read", "raw read of every block (baseline)"),
            ("rankrls", "RankRLS primal"),
            ("kernel", "KernelRankRLS rbf sparse r={r}"),
            ("sgd", "PairwiseSGDRanker hinge, pairs = rows")]

COLUMNS = [("learner", "learner", "s"), ("rows", "rows", ",d"), ("fit_s", "wall s", ".2f"),
           ("rows_s", "rows/s", ",.0f"), ("vs_read", "x read", ".2f"), ("peak", "peak RSS", fmt_mib),
           ("meta", "groups meta", fmt_mib), ("load", "load before/after", "s"),
           ("ndcg", "NDCG@10", ".4f"), ("disagreement", "disagr.", ".4f"), ("note", "note", "s")]


def build_parser():
    p = argparse.ArgumentParser(prog="benchmarks/out_of_core.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny stores, in-process, seconds")
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000], help="rows per store")
    p.add_argument("--huge", action="store_true", help="add the 10^8-row store (~20 GB on disk, long)")
    p.add_argument("--learners", nargs="+", default=[k for k, _ in LEARNERS], choices=[k for k, _ in LEARNERS])
    p.add_argument("--n-basis", type=int, default=500, help="basis rows of the sparse kernel model (default 500)")
    p.add_argument("--max-rows", type=int, default=100_000, help="block budget in rows (default 100,000)")
    p.add_argument("--test-rows", type=int, default=100_000, help="rows of the test store (default 100,000)")
    p.add_argument("--work-dir", default="/tmp/streamrank_bench", help="where the stores are written")
    p.add_argument("--clean", action="store_true", help="delete the stores afterwards")
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=True,
                   help="each learner in a fresh subprocess (default on; off in --smoke)")
    p.add_argument("--sgd-pairs", type=int, default=None,
                   help="cap the sampled pairs of the SGD ranker (default: as many pairs as rows)")
    p.add_argument("--malloc", choices=("default", "tuned"), default="default",
                   help="glibc allocator of the learner subprocesses: default, or tuned = "
                        "MALLOC_MMAP_THRESHOLD_=1MiB MALLOC_ARENA_MAX=2 (see the module docstring)")
    p.add_argument("--progress-dir", default=None,
                   help="write a per-block progress log (seconds, rows read, RSS MiB, load) of every "
                        "learner run here, as <learner>_<rows>.log")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    sizes = list(args.sizes)
    if args.huge and 100_000_000 not in sizes:
        sizes.append(100_000_000)
    test_rows, n_basis, max_rows, isolate = args.test_rows, args.n_basis, args.max_rows, args.isolate
    work = Path(args.work_dir)
    if args.smoke:
        sizes, test_rows, n_basis, max_rows, isolate = [3_000, 6_000], 1_000, 20, 1_000, False
        work = work / "smoke"
    work.mkdir(parents=True, exist_ok=True)
    if args.progress_dir:
        Path(args.progress_dir).mkdir(parents=True, exist_ok=True)
    env = environment(peers=())
    if args.malloc == "tuned":
        if not isolate:
            print("--malloc tuned applies to the learner subprocesses only (ignored with --no-isolate / --smoke)")
        os.environ.update(MALLOC_TUNED)    # read by glibc at start-up of each spawned learner
        env["malloc"] = " ".join(f"{k}={v}" for k, v in MALLOC_TUNED.items())
    else:
        env["malloc"] = "glibc default"
    print_environment(env)
    print("command: python benchmarks/out_of_core.py " + " ".join(argv if argv is not None else sys.argv[1:]))
    free = shutil.disk_usage(work).free
    need = sum(sizes) * N_FEATURES * 4 * 1.1
    print(f"disk: {free / 2**30:,.1f} GiB free under {work}; the stores need about {need / 2**30:,.1f} GiB")
    if need > free:
        print("not enough disk space for these sizes; drop the largest (--sizes) and retry")
        return 2
    test_path = work / f"ooc_test_{test_rows}.zarr"
    write_store(test_path, test_rows, N_FEATURES, seed=12345)
    rows, results = [], []
    for n in sizes:
        path = work / f"ooc_{n}.zarr"
        t_write = write_store(path, n, N_FEATURES, seed=0)
        size_b = _du(path)
        print(f"store {n:,} rows: {'written in %.1f s (%s rows/s), ' % (t_write, format(int(n / t_write), ',')) if t_write else 'reused, '}"
              f"{size_b / 2**30:.2f} GiB on disk", flush=True)
        base = None
        for key, label in LEARNERS:
            if key not in args.learners:
                continue
            label = label.format(r=n_basis)
            load0 = _load()
            print(f"  {n:,}: {label} ... (load {load0:.1f}, {time.strftime('%H:%M:%S', time.gmtime())} UTC)",
                  flush=True)
            try:
                out, wall, peak = measure(run_learner, key, str(path), None if key == "read" else str(test_path),
                                          max_rows, n_basis, args.sgd_pairs,
                                          str(Path(args.progress_dir) / f"{key}_{n}.log") if args.progress_dir
                                          else None, isolate=isolate)
            except Exception as exc:
                msg = str(exc).strip().splitlines()
                rows.append(dict(learner=f"{label} [{n:,}]", rows=n, note=f"FAILED: {msg[0] if msg else exc}"))
                continue
            if key == "read":
                base = out["fit_s"]
            note = f"store {size_b / 2**30:.2f} GiB" if key == "read" else ""
            work_rows = n
            if key == "sgd" and out.get("pairs", n) != n:
                work_rows = out["pairs"]
                note = f"{work_rows:,} pairs (capped), rows/s = pairs/s"
            r = dict(learner=f"{label} [{n:,}]", rows=n, fit_s=out["fit_s"], rows_s=work_rows / out["fit_s"],
                     vs_read=out["fit_s"] / base if base else None, peak=peak, ndcg=out.get("ndcg"),
                     disagreement=out.get("disagreement"), meta=out.get("meta"),
                     load=f"{load0:.1f}/{_load():.1f}", note=note)
            print(f"    {out['fit_s']:.1f} s, {r['rows_s']:,.0f} rows/s, peak {fmt_mib(peak)}, load {r['load']}"
                  + (f", NDCG@10 {r['ndcg']:.4f}, disagreement {r['disagreement']:.4f}" if key != "read" else ""),
                  flush=True)
            rows.append(r)
            results.append(dict(r, key=key, size=n))
    print_table(rows, COLUMNS, title=f"Out of core: {N_FEATURES} features, block budget {max_rows:,} rows, "
                                     f"peak RSS = {'lifetime peak of a fresh process per learner' if isolate else 'peak above start (in-process)'}")
    # flatness checks (issue: peak RSS flat, rows/s not falling)
    for key, label in LEARNERS:
        rs = [r for r in results if r["key"] == key]
        if len(rs) < 2:
            continue
        a, b = rs[0], rs[-1]
        print(f"{label.format(r=n_basis)}: {a['size']:,} -> {b['size']:,} rows: peak RSS x{b['peak'] / max(a['peak'], 1):.2f}"
              f", rows/s x{b['rows_s'] / a['rows_s']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(env=env, results=results), indent=1, default=float))
    if args.clean:
        for n in sizes:
            shutil.rmtree(work / f"ooc_{n}.zarr", ignore_errors=True)
        shutil.rmtree(test_path, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Nightly day-file ingest: peak memory of chunked ingest vs reading the day whole (issue 6).

Question: does ``streamrank.pipelines._nightly_ingest.ingest`` (chunks of whole query
groups, ``--chunk-mb`` of input per append) keep memory bounded whatever the
size of the day file, for ``.npz`` (``np.savez`` stored and
``np.savez_compressed`` deflated members, read as row streams by
``streamrank.io.npz.iter_npz``) and svmlight/LETOR text?  Baseline, in the
same script: the old path — the day read whole (``np.load`` of every
member / ``read_svmlight``) and appended in one batch.

Every measurement runs in a fresh child process; the memory figure is its
peak RSS (``VmHWM``) minus the peak of the same ingest of a 2,000-row day
(fixed costs: imports, compiled kernels, zarr).
Prints, per format: day size, peak extra RSS whole vs chunked and their
ratio, and the times.

Usage::

    python benchmarks/nightly_ingest.py --smoke        # seconds
    python benchmarks/nightly_ingest.py                # 1,000,000-row npz days, 200,000-row text day
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
mode, day, store, chunk = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
import numpy as np
import streamrank as sr
from streamrank.pipelines import nightly
t0 = time.perf_counter()
if mode == "whole":
    if day.endswith(".npz"):
        with np.load(day, allow_pickle=False) as z:
            X, y, qid = z["X"], z["y"], z["qid"]
    else:
        from streamrank.io.svmlight import read_svmlight
        X, y, qid = read_svmlight(day, dense=True)
    s = sr.GroupStore.create(store, n_features=X.shape[1])
    s.append(X, y, qid, batch_id="whole")
elif mode == "chunked":
    nightly.ingest(store, [day], chunk_bytes=chunk)
dt = time.perf_counter() - t0
# VmHWM: peak RSS of this process image (ru_maxrss would carry the forking parent's peak over exec)
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({{"seconds": dt, "maxrss_kib": hwm}}))
"""


def _child(mode, day, store, chunk_bytes, glibc_defaults=False):
    import os

    code = CHILD.format(root=str(ROOT))
    env = dict(os.environ)
    if not glibc_defaults:   # freed block-sized buffers go back to the OS (glibc keeps them otherwise)
        env["MALLOC_MMAP_THRESHOLD_"] = str(1 << 20)
    p = subprocess.run([sys.executable, "-c", code, mode, str(day), str(store), str(chunk_bytes)],
                       capture_output=True, text=True, timeout=3600, env=env)
    if p.returncode:
        raise RuntimeError(p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def _day(rows, n_features, seed=0, group=20):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, n_features)).astype(np.float32)
    y = np.round(X[:, :3].sum(axis=1)).astype(np.float64)
    qid = np.arange(rows, dtype=np.int64) // group
    return X, y, qid


def _write_text(path, X, y, qid, piece=20_000):
    with open(path, "w") as fh:
        for a in range(0, len(y), piece):
            lines = []
            for i in range(a, min(a + piece, len(y))):
                lines.append(f"{y[i]:g} qid:{qid[i]} " + " ".join(f"{j + 1}:{v:.4g}" for j, v in enumerate(X[i])))
            fh.write("\n".join(lines) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="rows of the .npz days")
    p.add_argument("--text-rows", type=int, default=200_000, help="rows of the text day")
    p.add_argument("--features", type=int, default=20)
    p.add_argument("--chunk-mb", type=float, default=8.0, help="input per append of the chunked ingest")
    p.add_argument("--glibc-defaults", action="store_true",
                   help="run the children with glibc's malloc defaults (default: MALLOC_MMAP_THRESHOLD_=1MiB, "
                        "so RSS shows what is held, not what glibc kept of freed buffers)")
    p.add_argument("--smoke", action="store_true", help="tiny days, a few seconds; no RSS baseline run")
    args = p.parse_args(argv)
    if args.smoke:
        args.rows, args.text_rows, args.chunk_mb = 20_000, 5_000, 0.25
    chunk = max(1, int(args.chunk_mb * 2**20))
    with tempfile.TemporaryDirectory(prefix="sr-ingest-bench-") as tmp:
        tmp = Path(tmp)
        days, tiny = {}, {}
        # --smoke has no 2,000-row twin runs (below), so it writes no tiny days either
        for tag, rows in (("", args.rows),) + (() if args.smoke else (("tiny-", 2_000),)):
            X, y, qid = _day(rows, args.features)
            d = days if not tag else tiny
            d["npz (stored)"] = tmp / f"{tag}stored.npz"
            d["npz (deflated)"] = tmp / f"{tag}deflated.npz"
            d["svmlight text"] = tmp / f"{tag}day.txt"
            np.savez(d["npz (stored)"], X=X, y=y, qid=qid)
            np.savez_compressed(d["npz (deflated)"], X=X, y=y, qid=qid)
            n = min(rows, args.text_rows)
            _write_text(d["svmlight text"], X[:n], y[:n], qid[:n])
            del X, y, qid
        print(f"malloc: {'glibc defaults' if args.glibc_defaults else 'MALLOC_MMAP_THRESHOLD_=1MiB'}; "
              f"chunk {args.chunk_mb:g} MiB of input per append; MiB = peak RSS of the ingest minus the peak of "
              "the same ingest of a 2,000-row day (imports, compiled kernels, zarr: fixed costs)")
        print(f"{'day file':16s} {'rows':>10s} {'MiB':>8s} {'whole MiB':>10s} {'chunked MiB':>12s} {'ratio':>7s} "
              f"{'whole s':>8s} {'chunked s':>10s}")
        for i, (name, day) in enumerate(days.items()):
            rows = min(args.text_rows, args.rows) if name.startswith("svm") else args.rows
            res = {}
            for mode in ("whole", "chunked"):
                big = _child(mode, day, tmp / f"{mode}{i}.zarr", chunk, args.glibc_defaults)
                # --smoke: no 2,000-row twin (half the child processes; its MiB column reads 0)
                small = big if args.smoke else _child(mode, tiny[name], tmp / f"{mode}{i}-tiny.zarr", chunk,
                                                      args.glibc_defaults)
                res[mode] = (max(big["maxrss_kib"] - small["maxrss_kib"], 0) / 1024, big["seconds"])
            (wm, ws), (cm, cs) = res["whole"], res["chunked"]
            print(f"{name:16s} {rows:10,d} {day.stat().st_size / 2**20:8.1f} {wm:10.1f} {cm:12.1f} "
                  f"{cm / max(wm, 1e-9):6.2f}x {ws:8.2f} {cs:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

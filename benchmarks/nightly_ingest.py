"""Nightly day-file ingest: peak memory of chunked ingest vs reading the day whole (issue 6).

Question: does ``pipelines/_nightly_ingest.ingest`` (chunks of whole query
groups, ``--chunk-mb`` of input per append) keep memory bounded whatever the
size of the day file, for ``.npz`` (``np.savez`` stored and
``np.savez_compressed`` deflated members, read as row streams by
``streamrank.io.npz.iter_npz``) and svmlight/LETOR text?  Baseline, in the
same script: the old path — the day read whole (``np.load`` of every
member / ``read_svmlight``) and appended in one batch.

Every measurement runs in a fresh child process (peak RSS = ``ru_maxrss``
of that child minus the RSS of a child that only imports streamrank).
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
import json, resource, sys, time
sys.path.insert(0, {root!r})
mode, day, store, chunk = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
import numpy as np
import streamrank as sr
from pipelines import nightly
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
print(json.dumps({{"seconds": dt, "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}}))
"""


def _child(mode, day, store, chunk_bytes):
    code = CHILD.format(root=str(ROOT))
    p = subprocess.run([sys.executable, "-c", code, mode, str(day), str(store), str(chunk_bytes)],
                       capture_output=True, text=True, timeout=3600)
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
    p.add_argument("--smoke", action="store_true", help="tiny days, a few seconds")
    args = p.parse_args(argv)
    if args.smoke:
        args.rows, args.text_rows, args.chunk_mb = 20_000, 5_000, 0.25
    chunk = max(1, int(args.chunk_mb * 2**20))
    with tempfile.TemporaryDirectory(prefix="sr-ingest-bench-") as tmp:
        tmp = Path(tmp)
        X, y, qid = _day(args.rows, args.features)
        days = {"npz (stored)": tmp / "stored.npz", "npz (deflated)": tmp / "deflated.npz",
                "svmlight text": tmp / "day.txt"}
        np.savez(days["npz (stored)"], X=X, y=y, qid=qid)
        np.savez_compressed(days["npz (deflated)"], X=X, y=y, qid=qid)
        n = args.text_rows
        _write_text(days["svmlight text"], X[:n], y[:n], qid[:n])
        del X, y, qid
        base = _child("import", tmp / "x", tmp / "none.zarr", chunk)["maxrss_kib"]
        print(f"chunk {args.chunk_mb:g} MiB of input per append; baseline RSS of an importing child "
              f"{base / 1024:.0f} MiB (subtracted)")
        print(f"{'day file':16s} {'rows':>10s} {'MiB':>8s} {'whole MiB':>10s} {'chunked MiB':>12s} {'ratio':>7s} "
              f"{'whole s':>8s} {'chunked s':>10s}")
        for i, (name, day) in enumerate(days.items()):
            rows = args.text_rows if name.startswith("svm") else args.rows
            w = _child("whole", day, tmp / f"w{i}.zarr", chunk)
            c = _child("chunked", day, tmp / f"c{i}.zarr", chunk)
            wm, cm = (w["maxrss_kib"] - base) / 1024, (c["maxrss_kib"] - base) / 1024
            print(f"{name:16s} {rows:10,d} {day.stat().st_size / 2**20:8.1f} {wm:10.1f} {cm:12.1f} "
                  f"{cm / max(wm, 1e-9):6.2f}x {w['seconds']:8.2f} {c['seconds']:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

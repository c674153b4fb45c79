"""Parquet ingest: rows/s against pyarrow's own read + zarr's write, and peak RSS vs the number of files (issue 18).

Question: does ``streamrank.io.parquet.ingest_parquet`` (pyarrow row groups ->
chunks of whole queries -> atomic GroupStore appends) run near the speed of
the two things it cannot avoid — pyarrow reading the same files into numpy
arrays, and zarr writing those arrays — and does its memory stay flat as the
number of files grows?

Data: ``--rows`` rows x ``--features`` float32 features, a float label and a
string query id (``"q00001234"``, ~20 rows a query, queries straddle row
groups and files), written as ``--files`` Parquet files of row groups of
``--row-group`` rows.

Measured, each in a fresh child process (peak RSS = its ``VmHWM``), after a
warm-up that takes the fixed costs (imports, numba's cache load at a store's
first open: seconds) out of the clock:

* baseline: for every file, ``ParquetFile.iter_batches`` -> a float32 (rows,
  features) array + label + qid arrays (pyarrow's read), then the arrays
  appended to a plain zarr array with the store's chunking and compressor,
  65,536 rows at a time like the ingest (zarr's write); the two times are
  reported and summed;
* streamrank: ``ingest_parquet`` of the same files into a new GroupStore;
* memory: streamrank's ingest of the first quarter, half and all of the files (all: the timed run).

Prints rows/s of each, the ratio streamrank / (read + write) (target >= 0.6)
and the peak RSS per file count (target: flat, < 1 GiB).

Usage::

    python benchmarks/parquet_ingest.py --smoke                      # seconds
    python benchmarks/parquet_ingest.py                              # 10^7 rows x 136 in 200 files (~6 GB)
    python benchmarks/parquet_ingest.py --rows 1000000 --files 200   # a size for a laptop
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
mode, store, files = sys.argv[1], sys.argv[2], sys.argv[3:]
import numpy as np
import pyarrow.parquet as pq
import zarr
from streamrank.io.parquet import ingest_parquet
from streamrank.io.schema import compressors, rows_per_chunk
import streamrank as sr, tempfile, os
# fixed costs out of the clock (imports, numba's cache load on a store's first open): a tiny store first
_w = sr.GroupStore.create(os.path.join(tempfile.mkdtemp(), "w.zarr"), 2)
_w.append(np.ones((2, 2)), [1.0, 0.0], ["a", "a"], batch_id="w"); sr.GroupStore.open(_w.path)
t0 = time.perf_counter()
out = {{}}
if mode == "baseline":
    read = write = 0.0
    arr = None
    pending = []
    m = 0
    for f in files:
        a = time.perf_counter()
        pf = pq.ParquetFile(f)
        names = pf.schema_arrow.names
        feats = [c for c in names if c.startswith("f_")]
        parts = []
        for rb in pf.iter_batches(batch_size=65536, columns=feats + ["label", "qid"]):
            X = np.empty((rb.num_rows, len(feats)), np.float32)
            for j in range(len(feats)):
                X[:, j] = rb.column(j).to_numpy()
            parts.append((X, rb.column(len(feats)).to_numpy(), rb.column(len(feats) + 1).to_numpy(zero_copy_only=False)))
        b = time.perf_counter()
        read += b - a
        if arr is None:
            n = parts[0][0].shape[1]
            rpc = rows_per_chunk(4 * n)
            root = zarr.open_group(store, mode="w")
            arr = root.create_array("X", shape=(0, n), chunks=(rpc, n), dtype="float32",
                                    compressors=compressors(4), fill_value=0)
            yarr = root.create_array("y", shape=(0,), chunks=(rpc,), dtype="float64",
                                     compressors=compressors(8), fill_value=0)
        pending.extend(parts)
        last = f == files[-1]
        if sum(p[0].shape[0] for p in pending) >= 65536 or last:   # the ingest's append size
            X = np.concatenate([p[0] for p in pending]); y = np.concatenate([p[1] for p in pending])
            pending = []
            k = X.shape[0]
            arr.resize((m + k, arr.shape[1])); arr[m:m + k] = X
            yarr.resize((m + k,)); yarr[m:m + k] = y
            m += k
        write += time.perf_counter() - b
    out.update(read_s=read, write_s=write, rows=m)
else:
    c = ingest_parquet(store, files, label="label", qid="qid", feature_prefix="f_")
    out.update(rows=c["rows"])
out["seconds"] = time.perf_counter() - t0
out["maxrss_kib"] = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps(out))
"""


def write_files(d: Path, rows: int, n_features: int, n_files: int, row_group: int, seed: int = 0) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    per = -(-rows // n_files)
    files = []
    names = [f"f_{j}" for j in range(n_features)]
    q_next, left_in_q = 0, 0
    for i in range(n_files):
        k = min(per, rows - i * per)
        if k <= 0:
            break
        qid = np.empty(k, dtype=np.int64)
        r = 0
        while r < k:                      # query sizes 5..35, continuing across files
            if left_in_q == 0:
                q_next += 1
                left_in_q = int(rng.integers(5, 36))
            t = min(left_in_q, k - r)
            qid[r:r + t] = q_next
            r += t
            left_in_q -= t
        X = rng.standard_normal((k, n_features), dtype=np.float32)
        cols = {"qid": pa.array(np.char.add("q", np.char.zfill(qid.astype(str), 8))),
                "label": pa.array(rng.integers(0, 5, k).astype(np.float64))}
        cols.update({n: pa.array(X[:, j]) for j, n in enumerate(names)})
        f = d / f"day-{i:04d}.parquet"
        pq.write_table(pa.table(cols), f, row_group_size=row_group, compression="snappy")
        files.append(str(f))
    return files


def run_child(mode, store, files):
    code = CHILD.format(root=str(ROOT))
    p = subprocess.run([sys.executable, "-c", code, mode, str(store), *files], capture_output=True, text=True,
                       check=False)
    if p.returncode:
        raise RuntimeError(f"{mode} child failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--features", type=int, default=136)
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--row-group", type=int, default=16_384)
    ap.add_argument("--smoke", action="store_true", help="20,000 rows x 136 in 8 files")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.rows, args.files, args.row_group = 20_000, 8, 1_000
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        d = Path(tmp)
        t0 = time.perf_counter()
        files = write_files(d, args.rows, args.features, args.files, args.row_group)
        size = sum(Path(f).stat().st_size for f in files)
        print(f"wrote {args.rows:,} rows x {args.features} float32 in {len(files)} files "
              f"({size / 2**20:.0f} MiB Parquet) in {time.perf_counter() - t0:.1f} s")
        base = run_child("baseline", d / "baseline.zarr", files)
        ours = run_child("ingest", d / "store.zarr", files)
        assert ours["rows"] == base["rows"] == args.rows, (ours, base)
        floor = base["read_s"] + base["write_s"]
        print(f"pyarrow read            {base['read_s']:8.2f} s  {args.rows / base['read_s']:12,.0f} rows/s")
        print(f"zarr write              {base['write_s']:8.2f} s  {args.rows / base['write_s']:12,.0f} rows/s")
        print(f"read + write (baseline) {floor:8.2f} s  {args.rows / floor:12,.0f} rows/s  "
              f"peak RSS {base['maxrss_kib'] / 1024:,.0f} MiB")
        print(f"streamrank ingest       {ours['seconds']:8.2f} s  {args.rows / ours['seconds']:12,.0f} rows/s  "
              f"peak RSS {ours['maxrss_kib'] / 1024:,.0f} MiB")
        print(f"ratio ingest / (read + write) rows/s: {floor / ours['seconds']:.2f}  (target >= 0.6)")
        peaks = []
        for frac in (4, 2, 1):
            sub = files[: max(1, len(files) // frac)]
            # all the files: the timed ingest above was that run already (a fresh child, the same files)
            r = ours if len(sub) == len(files) else run_child("ingest", d / f"mem{frac}.zarr", sub)
            peaks.append((len(sub), r["maxrss_kib"] / 1024))
        print("peak RSS by number of files: " + ", ".join(f"{n} files {m:,.0f} MiB" for n, m in peaks)
              + f"; largest / smallest {peaks[-1][1] / peaks[0][1]:.2f} (target: flat, < 1024 MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

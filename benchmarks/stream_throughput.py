"""Throughput of ``GroupStore.blocks()`` against a raw zarr read, and peak memory.

Questions answered in one run (section numbers as printed):

1. **Overhead** — rows/s and MB/s of ``store.blocks(max_rows)`` (with and
   without prefetch) against a raw read of the *same* zarr arrays over the
   *same* row ranges (``X[r0:r1]``, ``y[r0:r1]`` with ``zarr.open_array``),
   timed back to back in rounds; prints the median ratio (target >= 0.7).
   MB counts the decompressed bytes of X and y delivered.
2. **Overlap** — read + a per-block computation (X^T X) with and without
   prefetch, against raw reads + the same computation.
3. **CSR overhead** (``--sparse``) — section 1 on a CSR store (raw: indptr,
   then indices and data).
4. **Memory** — peak RSS (Linux VmHWM) of a fresh process streaming stores
   of 10x, 20x and 40x the block budget (same budget): flat in the store
   size means memory follows the block, not the data.  Run twice: with
   glibc's default malloc (whose dynamic mmap threshold keeps freed ~10 MB
   block buffers in its arenas, so RSS settles at a few blocks' worth plus
   fragmentation) and with ``MALLOC_MMAP_THRESHOLD_=1MiB`` (buffers go back
   to the OS: RSS is the working set — block, decompressed chunks, the
   prefetched next block).
5. **Codec** (``--codecs``) — read speed and size of blosc lz4+shuffle (the
   store default) against blosc zstd+shuffle on the same X.
6. **Read checks** — the cost of checking every block read from a store
   (:mod:`streamrank.io._read_checks`: finite values, CSR offsets and column
   indices) as a share of a block pass (no prefetch), dense and CSR, in the
   same process: the process CPU time (blosc's threads included) of reading
   every block of a pass with the checks over without, each block read both
   ways back to back from freshly opened stores, median over rounds (the
   figure the 5 % target is about: pairing per block takes out the load of
   the rest of a shared machine); the same from whole passes alternating
   (unpaired: it swings by +-20 % on a loaded machine), wall time
   (noisier on a shared machine, and unchecked chunks are decoded by
   blosc's threads when read from the main thread), and the extra thread
   CPU of decoding + checking every chunk of the checked arrays over
   decoding them unchecked, as a share of an unchecked pass (isolates the
   checks from the rest of the pass).  Each chunk is decoded whole by
   numcodecs' blosc (one thread: zarr sets ``numcodecs.blosc.use_threads =
   False`` when imported) and checked right after.  All of this is the
   check kernels' cost (every read runs them).  Section 6c gives
   each check kernel's own speed on one 512 KiB block in cache against
   numpy's ``max`` of it: a
   kernel that has lost its vectorisation shows there first.

The data are random normal float32 features (incompressible: a worst case for
disk, a best case for decompression cost) in groups of 20-180 rows, read back
from the page cache (the store was just written), so the figures measure
CPU-side overhead, not the disk.

    python benchmarks/stream_throughput.py              # 3,000,000 x 50, ~1 GB on disk
    python benchmarks/stream_throughput.py --smoke      # a few seconds
    python benchmarks/stream_throughput.py --rows 5000000 --codecs --sparse
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import scratch_dir  # noqa: E402


def write_store(path, n_rows, n_features, *, seed=0, batch_rows=250_000, sparse=False):
    import streamrank as sr

    rng = np.random.default_rng(seed)
    store = sr.GroupStore.create(path, n_features, sparse=sparse, overwrite=True)
    r, qid = 0, 0
    while r < n_rows:
        k = min(batch_rows, n_rows - r)
        sizes = rng.integers(20, 181, k // 20 + 2)
        sizes = sizes[: int(np.searchsorted(np.cumsum(sizes), k)) + 1]
        sizes[-1] -= int(sizes.sum()) - k
        sizes = sizes[sizes > 0]
        q = np.repeat(np.arange(qid, qid + len(sizes)), sizes)
        qid += len(sizes)
        if sparse:  # about 10% nonzeros per row, like hashed text features
            X = sp.random(k, n_features, density=0.1, format="csr", dtype=np.float32, random_state=rng)
        else:
            X = rng.standard_normal((k, n_features), dtype=np.float32)
        y = rng.integers(0, 5, k).astype(np.float64)
        store.append(X, y, q, batch_id=f"batch-{r}")
        r += k
    return store


def _time_store(store, max_rows, prefetch):
    t0 = time.perf_counter()
    rows = nbytes = 0
    for b in store.blocks(max_rows=max_rows, prefetch=prefetch):
        rows += b.n_rows
        nbytes += _nbytes(b.X) + b.y.nbytes
    return time.perf_counter() - t0, rows, nbytes


def _nbytes(X):
    if sp.issparse(X):
        return X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    return X.nbytes


def _time_raw(path, plan):
    """The same row ranges read straight from the zarr arrays (CSR: indptr, then indices/data)."""
    import zarr

    y = zarr.open_array(os.path.join(path, "y"), mode="r")
    t0 = time.perf_counter()
    rows = nbytes = 0
    if os.path.exists(os.path.join(path, "X", "indptr")):
        ip = zarr.open_array(os.path.join(path, "X", "indptr"), mode="r")
        ind = zarr.open_array(os.path.join(path, "X", "indices"), mode="r")
        dat = zarr.open_array(os.path.join(path, "X", "data"), mode="r")
        for r0, r1, _g0, _g1 in plan:
            p = ip[r0 : r1 + 1]
            a, c, b = ind[p[0] : p[-1]], dat[p[0] : p[-1]], y[r0:r1]
            rows += r1 - r0
            nbytes += p.nbytes + a.nbytes + c.nbytes + b.nbytes
        return time.perf_counter() - t0, rows, nbytes
    X = zarr.open_array(os.path.join(path, "X"), mode="r")
    for r0, r1, _g0, _g1 in plan:
        a, b = X[r0:r1], y[r0:r1]
        rows += r1 - r0
        nbytes += a.nbytes + b.nbytes
    return time.perf_counter() - t0, rows, nbytes


def _gram(X):
    """Stand-in for a learner's per-block work: the float64 Gram matrix X^T X."""
    X = np.asarray(X, dtype=np.float64)
    return X.T @ X


def bench_overlap(path, max_rows, repeat):
    """Read + compute: prefetch should hide part of the read behind the compute."""
    import streamrank as sr

    store = sr.GroupStore.open(path)
    plan = store.plan(max_rows)

    def raw_then_compute():
        import zarr

        X = zarr.open_array(os.path.join(path, "X"), mode="r")
        t0 = time.perf_counter()
        for r0, r1, _g0, _g1 in plan:
            _gram(X[r0:r1])
        return time.perf_counter() - t0

    def blocks_compute(prefetch):
        t0 = time.perf_counter()
        for b in store.blocks(max_rows=max_rows, prefetch=prefetch):
            _gram(b.X)
        return time.perf_counter() - t0

    best = {"raw zarr + compute": np.inf, "blocks(prefetch) + compute": np.inf,
            "blocks(no prefetch) + compute": np.inf}
    for _ in range(repeat):
        best["raw zarr + compute"] = min(best["raw zarr + compute"], raw_then_compute())
        best["blocks(prefetch) + compute"] = min(best["blocks(prefetch) + compute"], blocks_compute(True))
        best["blocks(no prefetch) + compute"] = min(best["blocks(no prefetch) + compute"], blocks_compute(False))
    print(f"\n2. read + per-block compute (float64 X^T X), {store.n_rows:,} rows, best of {repeat}")
    for name, t in best.items():
        print(f"   {name:<32}{t:8.3f} s{store.n_rows / t:14,.0f} rows/s  ratio to raw {best['raw zarr + compute'] / t:5.2f}")


def bench_overhead(path, max_rows, repeat, label="1"):
    """Best time of each reader, and the median of the per-round ratios.

    Each round times the three readers back to back (in a rotating order), so
    a ratio compares runs made under the same load from the other users of
    the machine; the median of the rounds is the figure to quote.
    """
    import streamrank as sr

    store = sr.GroupStore.open(path)
    plan = store.plan(max_rows)
    names = ("raw zarr", "blocks (prefetch)", "blocks (no prefetch)")
    fns = {"raw zarr": lambda: _time_raw(path, plan),
           "blocks (prefetch)": lambda: _time_store(store, max_rows, True),
           "blocks (no prefetch)": lambda: _time_store(store, max_rows, False)}
    times = {k: [] for k in names}
    info = {}
    for r in range(repeat):
        for name in names[r % 3:] + names[: r % 3]:
            t, rows, nbytes = fns[name]()
            assert rows == store.n_rows
            times[name].append(t)
            info[name] = (rows, nbytes)
    raw = np.asarray(times["raw zarr"])
    kind = f"CSR (nnz {store.nnz:,})" if store.sparse else "dense"
    print(f"\n{label}. block stream vs raw zarr read: {store.n_rows:,} rows x {store.n_features} float32 {kind}, "
          f"max_rows={max_rows:,} ({len(plan)} blocks), {repeat} rounds")
    print(f"   {'reader':<22}{'best s':>9}{'rows/s':>14}{'MB/s':>9}{'median ratio':>14}{'ratio of bests':>16}")
    ratios = {}
    for name in names:
        t = np.asarray(times[name])
        rows, nbytes = info[name]
        ratios[name] = float(np.median(raw / t))
        print(f"   {name:<22}{t.min():9.3f}{rows / t.min():14,.0f}{nbytes / t.min() / 1e6:9.0f}"
              f"{ratios[name]:14.2f}{raw.min() / t.min():16.2f}")
    return ratios


def _check_decoders(path, sparse):
    """The chunk decoders of the arrays a block pass checks, each with the check the store gives it."""
    from streamrank.io import _read_checks as RC
    from streamrank.io._chunk_files import ChunkFileDecoder

    import streamrank as sr

    n_features = sr.GroupStore.open(path).n_features
    specs = ([("X/indices", RC.entries_check(path, "X/indices", n_features)), ("X/data", RC.entries_check(path, "X/data"))]
             if sparse else [("X", RC.finite_rows_check(path, "X"))]) + [("y", RC.finite_rows_check(path, "y"))]
    out = []
    for name, check in specs:
        dec = ChunkFileDecoder.for_array(path, name)
        if dec is not None:
            dec.check = check
            out.append(dec)
    return out


def bench_read_checks(path, max_rows, repeat, label="6"):
    """Share of a block pass (no prefetch) spent on the read checks (their kernels); see section 6 of the
    docstring."""
    import zarr

    import streamrank as sr
    from streamrank.io import _read_checks as RC

    store = sr.GroupStore.open(path)

    def one_pass(check):
        RC.CHECK_READS = check
        fresh = sr.GroupStore.open(path)     # no decoded chunk cached from the previous pass
        cpu0, t0 = time.process_time(), time.perf_counter()
        try:
            _t, rows, _ = _time_store(fresh, max_rows, False)
        finally:
            RC.CHECK_READS = True
        assert rows == store.n_rows
        return time.process_time() - cpu0, time.perf_counter() - t0

    def chunk_round(decoders, r):
        """Extra process CPU (blosc threads included) of decoding every committed chunk of the checked arrays
        with the checks over decoding it without; each chunk decoded both ways back to back (alternating which
        goes first), so the two see the same load from the rest of the machine."""
        spent = {True: 0.0, False: 0.0}
        try:
            for dec in decoders:
                n = zarr.open_array(os.path.join(path, dec.name), mode="r").shape[0]
                out = np.empty(dec.chunk_shape, dtype=dec.dtype)
                for c in range(-(-n // dec.chunk_shape[0])):
                    for check in ((True, False) if (c + r) % 2 else (False, True)):
                        RC.CHECK_READS = check
                        c0 = time.process_time()
                        dec.decode(c, out, min(dec.chunk_shape[0], n - c * dec.chunk_shape[0]))
                        spent[check] += time.process_time() - c0
        finally:
            RC.CHECK_READS = True
        return spent[True] - spent[False]

    ways = ("unchecked", "checked")

    def paired_blocks(r):
        """Process CPU of reading every block of a pass unchecked and checked,
        each block read every way back to back (rotating which goes first) from freshly
        opened stores (no chunk cached): the ratios of the sums are the checked / unchecked CPU of a block pass,
        with the load of the rest of the machine paired away."""
        spent = dict.fromkeys(ways, 0.0)
        try:
            for i, entry in enumerate(store.plan(max_rows)):
                k = (i + r) % len(ways)
                for way in ways[k:] + ways[:k]:
                    RC.CHECK_READS = way != "unchecked"
                    fresh = sr.GroupStore.open(path)
                    c0 = time.process_time()
                    fresh.read_block(*entry)
                    spent[way] += time.process_time() - c0
        finally:
            RC.CHECK_READS = True
        return [spent[w] / spent["unchecked"] for w in ways[1:]]

    one_pass(True)   # compile / warm the page cache
    one_pass(False)
    decoders = _check_decoders(path, store.sparse)
    cpu = {True: [], False: []}
    wall = {True: [], False: []}
    ratios, wall_ratios, extra, block_ratios = [], [], [], []
    for r in range(max(3, repeat)):
        order = (True, False) if r % 2 else (False, True)
        for c in order:
            p_cpu, p_wall = one_pass(c)
            cpu[c].append(p_cpu)
            wall[c].append(p_wall)
        ratios.append(cpu[True][-1] / cpu[False][-1])
        wall_ratios.append(wall[True][-1] / wall[False][-1])
        extra.append(chunk_round(decoders, r))
        block_ratios.append(paired_blocks(r))
    kind = f"CSR (nnz {store.nnz:,})" if store.sparse else "dense"
    block_ratios = np.array(block_ratios)
    share = float(np.median(block_ratios[:, 0])) - 1.0
    isolated = float(np.median(extra)) / float(np.median(cpu[False]))
    fused = "after decoding whole chunks"
    short = "CSR" if store.sparse else "dense"
    print(f"\n{label}. read checks on {store.n_rows:,} rows x {store.n_features} float32 {kind}, "
          f"max_rows={max_rows:,}, {len(ratios)} rounds, checks {fused}; load average {os.getloadavg()[0]:.1f}")
    print(f"   unchecked pass: CPU {np.median(cpu[False]):.3f} s, wall {np.median(wall[False]):.3f} s (medians)")
    print(f"   CPU of checked / unchecked blocks, paired per block: {100 * share:+.1f} % {short}"
          "   (median of rounds; the 5 % target)")
    print(f"   extra CPU of decode+check over decode, per chunk:     {100 * isolated:+.1f} % {short}"
          "   (/ unchecked pass CPU, median of rounds)")
    print(f"   CPU of a checked pass / unchecked pass - 1      {100 * (float(np.median(ratios)) - 1):+7.2f} %  "
          "(median of rounds; unpaired, swings with the machine's load)")
    print(f"   wall of a checked pass / unchecked pass - 1     {100 * (float(np.median(wall_ratios)) - 1):+7.2f} %  "
          "(median; unpaired)")
    print(f"   {'meets' if share <= 0.05 else 'ABOVE'} the 5 % target (CPU of a block pass, paired per block)")
    return share


def bench_check_kernels(repeat, label="6c"):
    """GB/s of each read-check kernel on one 512 KiB blosc block in cache, against numpy's ``max`` on it.

    What the kernels of section 6 run per block, isolated from the decode: a kernel far below numpy's max
    (which reads the block once with vector loads) has lost its vectorisation -- as the stride loops did when
    LLVM compiled their loads as gathers (10-12x slower on an AMD Zen 4, issue 16).
    """
    from streamrank.io._check_kernels import first_nonfinite, first_out_of_range

    m = 128 * 1024                                   # float32 / int32 values of a 512 KiB block
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 1000, m).astype(np.uint32)
    vals = rng.normal(size=m).astype(np.float32)
    runs = {"numpy max (baseline)": (np.max, (idx,)),
            "column index range (first_out_of_range)": (first_out_of_range, (idx, 1000)),
            "finite values (first_nonfinite)": (first_nonfinite, (vals,))}
    n_calls = 100
    print(f"\n{label}. check kernels on one 512 KiB block in cache, best of {max(3, repeat)} x {n_calls} calls")
    base = None
    for what, (fn, args) in runs.items():
        fn(*args)                                # compile / load
        best = float("inf")
        for _ in range(max(3, repeat)):
            t0 = time.perf_counter()
            for _ in range(n_calls):
                fn(*args)
            best = min(best, (time.perf_counter() - t0) / n_calls)
        base = best if base is None else base
        print(f"   {what:58s} {m * 4 / best / 1e9:6.1f} GB/s   time / numpy max {best / base:5.2f}")


def _child_stream(path, max_rows):
    """Run in a fresh process: stream the store, print peak RSS figures as JSON."""
    import psutil

    import streamrank as sr

    store = sr.GroupStore.open(path)
    proc = psutil.Process()
    base = proc.memory_info().rss
    peak = base
    s = 0.0
    for b in store.blocks(max_rows=max_rows):
        s += float(b.X[:, 0].sum())  # touch the data
        peak = max(peak, proc.memory_info().rss)
    print(json.dumps({"rows": store.n_rows, "base": base, "peak_sampled": peak, "hwm": _vm_hwm()}))


def _vm_hwm():
    """Peak RSS of this process image (Linux ``VmHWM``).

    Not ``getrusage().ru_maxrss``: on Linux that survives fork + exec, so a
    child started by a big parent reports the parent's size.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def bench_memory(workdir, n_features, max_rows, factors=(10, 20, 40, 80)):
    print(f"\n4. peak RSS of a fresh process streaming the store (block budget {max_rows:,} rows "
          f"= {max_rows * n_features * 4 / 1e6:.0f} MB of X)")
    print(f"   {'store rows':>12}{'x budget':>10}{'store MB':>10}{'RSS after open':>16}{'peak RSS':>10}"
          f"{'peak - open':>13}{'peak (mmap)':>16}{'- open':>13}")
    out = []
    for f in factors:
        path = os.path.join(workdir, f"mem-{f}.zarr")
        write_store(path, f * max_rows, n_features, seed=f)
        row = []
        for env in ({}, {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)}):
            res = subprocess.run([sys.executable, os.path.abspath(__file__), "--_child", path, str(max_rows)],
                                 capture_output=True, text=True, check=True, env={**os.environ, **env})
            d = json.loads(res.stdout.strip().splitlines()[-1])
            row.append((d["base"], max(d["peak_sampled"], d["hwm"])))
        (b0, p0), (b1, p1) = row
        print(f"   {d['rows']:>12,}{f:>10}{f * max_rows * n_features * 4 / 1e6:>10.0f}"
              f"{b0 / 1e6:>14.0f}MB{p0 / 1e6:>8.0f}MB{(p0 - b0) / 1e6:>11.0f}MB"
              f"{p1 / 1e6:>14.0f}MB{(p1 - b1) / 1e6:>11.0f}MB")
        out.append((p0, p1))
        shutil.rmtree(path)
    print("   (last two columns: same run with MALLOC_MMAP_THRESHOLD_=1MiB, i.e. glibc returns freed\n"
          "    block buffers to the OS instead of keeping them in its arenas)")
    print(f"   peak RSS at {factors[-1]}x / at {factors[0]}x the budget: {out[-1][0] / out[0][0]:.2f} "
          f"(default malloc), {out[-1][1] / out[0][1]:.2f} (fixed mmap threshold); 1.00 = flat")
    return out


def bench_codecs(workdir, n_rows, n_features, repeat):
    import zarr
    from zarr.codecs import BloscCodec, BloscShuffle

    rng = np.random.default_rng(1)
    X = rng.standard_normal((n_rows, n_features), dtype=np.float32)
    # a second, compressible variant: LETOR-like features quantised to 3 decimals in [0, 1]
    Xq = np.round(rng.random((n_rows, n_features), dtype=np.float32), 3)
    chunk = max(1024, (4 << 20) // (4 * n_features))
    print(f"\n5. codecs, {n_rows:,} x {n_features} float32, chunks of {chunk:,} rows, best of {repeat}")
    print(f"   {'data':<18}{'codec':<22}{'MB on disk':>11}{'read MB/s':>11}")
    for label, data in (("normal(0, 1)", X), ("3-decimal [0, 1]", Xq)):
        speeds = {}
        for cname in ("lz4", "zstd"):
            path = os.path.join(workdir, f"codec-{cname}.zarr")
            a = zarr.create_array(store=path, shape=data.shape, chunks=(chunk, n_features), dtype="float32",
                                  compressors=(BloscCodec(typesize=4, cname=cname, clevel=5,
                                                          shuffle=BloscShuffle.shuffle),), overwrite=True)
            a[:] = data
            size = sum(os.path.getsize(os.path.join(r, f)) for r, _d, fs in os.walk(path) for f in fs)
            best = np.inf
            for _ in range(repeat):
                t0 = time.perf_counter()
                for r in range(0, n_rows, 100_000):
                    a[r : r + 100_000]
                best = min(best, time.perf_counter() - t0)
            speeds[cname] = data.nbytes / best / 1e6
            print(f"   {label:<18}{'blosc ' + cname + ' + shuffle':<22}{size / 1e6:>11.1f}{speeds[cname]:>11.0f}")
            shutil.rmtree(path)
        print(f"   {'':<18}lz4 / zstd read speed: {speeds['lz4'] / speeds['zstd']:.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=3_000_000, help="rows of the overhead store")
    ap.add_argument("--features", type=int, default=50)
    ap.add_argument("--max-rows", type=int, default=100_000, help="block budget (rows)")
    ap.add_argument("--mem-max-rows", type=int, default=50_000, help="block budget of the memory test")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--codecs", action="store_true", help="also compare lz4 and zstd")
    ap.add_argument("--sparse", action="store_true",
                    help="also measure a CSR store (10%% density, --features x 20 columns)")
    ap.add_argument("--dir", default=None, help="working directory (default: a temporary one)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, runs in seconds")
    ap.add_argument("--_child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._child:
        _child_stream(args._child[0], int(args._child[1]))
        return 0
    if args.smoke:
        args.rows, args.features, args.max_rows, args.mem_max_rows, args.repeat = 60_000, 10, 10_000, 5_000, 1
    with scratch_dir("sr-bench-", dir=args.dir) as workdir:
        path = os.path.join(workdir, "throughput.zarr")
        t0 = time.perf_counter()
        write_store(path, args.rows, args.features)
        t = time.perf_counter() - t0
        print(f"wrote {args.rows:,} rows x {args.features} features in {t:.1f} s "
              f"({args.rows / t:,.0f} rows/s, appends of 250,000 rows)")
        ratios = bench_overhead(path, args.max_rows, args.repeat)
        bench_overlap(path, args.max_rows, max(1, args.repeat // 2))
        bench_read_checks(path, args.max_rows, args.repeat, label="6a")
        shutil.rmtree(path)
        if args.sparse or args.smoke:
            n_sp = max(args.rows // 3, 1000)
            write_store(path, n_sp, args.features * 20, sparse=True)
            bench_overhead(path, args.max_rows, args.repeat, label="3")
            bench_read_checks(path, args.max_rows, args.repeat, label="6b")
            shutil.rmtree(path)
        bench_check_kernels(args.repeat)
        bench_memory(workdir, args.features, args.mem_max_rows)
        if args.codecs or args.smoke:
            bench_codecs(workdir, min(args.rows, 1_000_000), args.features, args.repeat)
        ok = ratios["blocks (prefetch)"] >= 0.7
        print(f"\nblocks(prefetch) / raw zarr = {ratios['blocks (prefetch)']:.2f} "
              f"({'meets' if ok else 'BELOW'} the 0.7 target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Streaming from object storage against local disk, and what an append costs in requests (issue 19).

A real S3 server runs on loopback (moto's standalone server in its own
process, the one the tests use: ``tests/_s3_server.py``); the same store
(``--rows`` x ``--features`` float32, groups of 20-180 rows, appended in
``--batches`` batches) is written once to a local directory and once to
``s3://``.  Printed:

1. **Streaming** — rows/s of ``store.blocks(max_rows)`` (prefetch on) from
   local disk and from the S3 server with 1, 4 and 16 chunk requests in
   flight (``RemoteChunkDecoder.requests_in_flight``), and the ratio
   remote / local.  The median of ``--repeat`` passes each, timed back to
   back.  Local reads come from the page cache; remote reads go through
   HTTP on loopback to a Python server, so the ratio is a lower bound of
   what a real object store with more bandwidth per connection gives, and
   the gain from more requests in flight is the point.
   A last line fetches the same chunk objects raw (no decoding, 16 at a
   time): the server's own ceiling, to tell its limit from streamrank's.
2. **Append** — the requests one ``append`` of a batch sends (counted by
   the server: every request line it logs), by HTTP method, and per MiB
   appended; plus the requests of opening the store.

    python benchmarks/object_store.py                # 1,000,000 x 50 (~200 MB), a few minutes
    python benchmarks/object_store.py --smoke        # seconds
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))       # the test suite's S3 server (one implementation, not two)

_REQUEST = re.compile(rb'"(GET|PUT|POST|HEAD|DELETE) [^"]*" (\d{3})')


def _batches(n_rows, n_features, n_batches, seed=0):
    """(X, y, qid) of each batch: random float32 features, groups of 20-180 rows."""
    rng = np.random.default_rng(seed)
    per = -(-n_rows // n_batches)
    r = qid = 0
    while r < n_rows:
        k = min(per, n_rows - r)
        sizes = rng.integers(20, 181, k // 20 + 2)
        sizes = sizes[: int(np.searchsorted(np.cumsum(sizes), k)) + 1]
        sizes[-1] -= int(sizes.sum()) - k
        sizes = sizes[sizes > 0]
        q = np.repeat(np.arange(qid, qid + len(sizes)), sizes)
        qid += len(sizes)
        yield rng.standard_normal((k, n_features), dtype=np.float32), rng.integers(0, 5, k).astype(np.float64), q
        r += k


class RequestCounter:
    """Counts the requests the S3 server handled (its request log), by method."""

    def __init__(self, server):
        self._log = server._log
        self._pos = self._end()

    def _end(self):
        self._log.flush()
        self._log.seek(0, os.SEEK_END)
        return self._log.tell()

    def take(self) -> collections.Counter:
        """Requests since the last call."""
        time.sleep(0.2)                       # the server writes its log line after answering
        end = self._end()
        self._log.seek(self._pos)
        text = self._log.read(end - self._pos)
        self._pos = end
        return collections.Counter(m.group(1).decode() for m in _REQUEST.finditer(text))


def _stream(store, max_rows):
    t0 = time.perf_counter()
    rows = 0
    for b in store.blocks(max_rows=max_rows, prefetch=True):
        rows += b.n_rows
    return time.perf_counter() - t0, rows


def main(argv=None, server=None) -> int:
    """``server``: a running :class:`S3Server` to use (the test suite's), else one is started and stopped."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--features", type=int, default=50)
    ap.add_argument("--batches", type=int, default=10, help="appends that write the store")
    ap.add_argument("--max-rows", type=int, default=100_000, help="block budget of the streaming pass")
    ap.add_argument("--in-flight", default="1,4,16", help="chunk requests in flight to compare")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="tiny data (seconds)")
    a = ap.parse_args(argv)
    if a.smoke:
        a.rows, a.features, a.batches, a.max_rows, a.repeat = 20_000, 10, 2, 5_000, 1
    in_flight = [int(v) for v in a.in_flight.split(",")]

    import streamrank as sr
    from _s3_server import S3Server
    from streamrank.io._remote_chunks import RemoteChunkDecoder

    print(f"object_store: {a.rows:,} x {a.features} float32 in {a.batches} batch(es), blocks of {a.max_rows:,} rows")
    own = server is None
    server = S3Server() if own else server
    work = tempfile.mkdtemp(prefix="sr-object-store-")
    default_in_flight = RemoteChunkDecoder.requests_in_flight
    try:
        so = server.storage_options
        url = server.new_bucket("bench") + "/train.zarr"
        local_path = os.path.join(work, "train.zarr")
        counter = RequestCounter(server)
        local = sr.GroupStore.create(local_path, a.features)
        remote = sr.GroupStore.create(url, a.features, storage_options=so)
        created = counter.take()
        appends, mib = [], []
        for i, (X, y, q) in enumerate(_batches(a.rows, a.features, a.batches)):
            local.append(X, y, q, batch_id=f"b{i}")
            counter.take()
            remote.append(X, y, q, batch_id=f"b{i}")
            appends.append(counter.take())
            mib.append((X.nbytes + y.nbytes + q.nbytes) / 2**20)
        counter.take()
        local = sr.GroupStore.open(local_path)
        remote = sr.GroupStore.open(url, storage_options=so)
        opened = counter.take()
        if remote.n_rows != local.n_rows:
            print(f"FAILED: the remote store has {remote.n_rows} rows, the local one {local.n_rows}")
            return 1

        print("\n1. streaming rows/s (median of %d pass(es), after one untimed pass: compilation, page cache)"
              % a.repeat)
        _stream(local, a.max_rows)
        _stream(sr.GroupStore.open(url, storage_options=so), a.max_rows)
        t_local = statistics.median(_stream(local, a.max_rows)[0] for _ in range(a.repeat))
        print(f"   {'local disk':<28} {a.rows / t_local:>14,.0f} rows/s   1.00")
        best = None
        for k in in_flight:
            RemoteChunkDecoder.requests_in_flight = k
            times = []
            for _ in range(a.repeat):
                st = sr.GroupStore.open(url, storage_options=so)   # fresh: nothing cached from the last pass
                t, rows = _stream(st, a.max_rows)
                if rows != a.rows:
                    print(f"FAILED: streamed {rows} rows of {a.rows}")
                    return 1
                times.append(t)
            t = statistics.median(times)
            print(f"   {'s3 loopback, %2d in flight' % k:<28} {a.rows / t:>14,.0f} rows/s   "
                  f"{t_local / t:.2f} of local")
            if k == max(in_flight):
                best = t
        # the server's own ceiling: the store's chunk objects (Icechunk's chunks/, every array's: X and y are
        # nearly all of it) fetched raw through fsspec (no Icechunk, no decoding), 16 and 64 requests at a time;
        # the faster of the two is the ceiling
        from streamrank.io._remote import Remote

        rem = Remote(url, so)
        keys = [k for k in rem.list() if k.startswith("chunks/")]
        ceiling = None
        for width in (16, 64):
            t0 = time.perf_counter()
            nbytes = 0
            for i in range(0, len(keys), width):
                nbytes += sum(len(b) for b in rem.read_many(keys[i:i + width]))
            t = time.perf_counter() - t0
            ceiling = t if ceiling is None else min(ceiling, t)
            print(f"   {'raw GETs of the chunks, %d' % width:<28} {a.rows / t:>14,.0f} rows/s   {t_local / t:.2f} of "
                  f"local ({nbytes / t / 2**20:.0f} MiB/s of stored bytes: the loopback server's ceiling)")
        if best is not None:
            print(f"   streaming at {max(in_flight)} in flight / raw GET ceiling: {ceiling / best:.2f} "
                  "(issue 39: >= 0.9)")
        counter.take()

        print("\n2. requests (counted by the server)")
        per = collections.Counter()
        for c in appends:
            per.update(c)
        n = len(appends)
        total = sum(per.values())
        print(f"   create: {sum(created.values())} ({dict(created)}); open: {sum(opened.values())} ({dict(opened)})")
        print(f"   append: {total / n:.1f} requests per batch of {a.rows // n:,} rows "
              f"({np.mean(mib):.1f} MiB): " + ", ".join(f"{m} {v / n:.1f}" for m, v in sorted(per.items())))
        print(f"   append: {total / sum(mib):.2f} requests per MiB appended (the previous lease layout: 1.95); per batch: "
              + ", ".join(str(sum(c.values())) for c in appends))
    finally:
        RemoteChunkDecoder.requests_in_flight = default_in_flight
        if own:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``streamrank info --verify`` re-reads every committed batch against its checksum.

A deleted chunk file reads back as zeros (zarr's fill value), so only the
checksum in the append log can tell; ``--verify`` is how a cron job asks.
"""
import subprocess
import sys

import numpy as np

import streamrank as sr


def _run(*args):
    return subprocess.run([sys.executable, "-m", "streamrank.cli", *args], capture_output=True, text=True,
                          timeout=120)


def test_info_verify_passes_then_names_the_damaged_batch(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "s.zarr"
    store = sr.GroupStore.create(path, 4, chunk_rows=50)
    for b in range(3):
        X = rng.normal(size=(100, 4)) + 1.0          # no all-zero chunk: every chunk file exists
        store.append(X, rng.integers(0, 3, 100).astype(float), np.repeat(np.arange(10) + 10 * b, 10),
                     batch_id=f"day-{b}")
    ok = _run("info", str(path), "--verify", "--json")
    assert ok.returncode == 0, ok.stderr
    assert '"verified_batches": 3' in ok.stdout

    chunks = sorted(p for p in (path / "X").rglob("*") if p.is_file() and p.name != "zarr.json")
    assert len(chunks) >= 6
    chunks[3].unlink()                                  # rows 150..199: batch day-1
    plain = _run("info", str(path))                     # without --verify nothing reads the rows
    assert plain.returncode == 0
    bad = _run("info", str(path), "--verify")
    assert bad.returncode == 4, (bad.stdout, bad.stderr)
    assert "day-1" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1

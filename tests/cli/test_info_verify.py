"""``streamrank info --verify`` re-reads every committed batch against its checksum.

A deleted chunk file reads back as zeros (zarr's fill value), so only the
checksum in the append log can tell; ``--verify`` is how a cron job asks.
"""
import numpy as np
import pytest
from _cli_inproc import run_cli

import streamrank as sr


@pytest.mark.slow   # info and verify on a damaged store, in process: ~4 CPU-s
def test_info_verify_passes_then_names_the_damaged_batch(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "s.zarr"
    store = sr.GroupStore.create(path, 4, chunk_rows=50)
    for b in range(3):
        X = rng.normal(size=(100, 4)) + 1.0          # no all-zero chunk: every chunk file exists
        store.append(X, rng.integers(0, 3, 100).astype(float), np.repeat(np.arange(10) + 10 * b, 10),
                     batch_id=f"day-{b}")
    rc, out, err = run_cli("info", path, "--verify", "--json")
    assert rc == 0, err
    assert '"verified_batches": 3' in out

    chunks = sorted(p for p in (path / "X").rglob("*") if p.is_file() and p.name != "zarr.json")
    assert len(chunks) >= 6
    chunks[3].unlink()                                  # rows 150..199: batch day-1
    assert run_cli("info", path)[0] == 0               # without --verify nothing reads the rows
    rc, out, err = run_cli("info", path, "--verify")
    assert rc == 4, (out, err)
    assert "day-1" in err and len(err.strip().splitlines()) == 1

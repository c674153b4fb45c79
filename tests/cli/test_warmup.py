"""``streamrank warmup`` (issue 22): it fills numba's cache, and a later process loads from it instead of compiling.

The cache test runs real processes with their own empty ``NUMBA_CACHE_DIR`` (a cache is per process tree, and
this test process has loaded the kernels already); the argument tests run ``cli.main`` in process.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from _cli_inproc import run_cli

from streamrank.cli._warmup import PARTS


def test_help_lists_every_part():
    rc, out, _ = run_cli("warmup", "--help")
    assert rc == 0
    for name, (fn, _) in PARTS.items():
        assert f"  {name} " in out and fn.__doc__ in out


@pytest.mark.parametrize("parts", ["nosuch", "stores,nosuch", ","])
def test_an_unknown_part_is_a_usage_error_naming_the_parts(parts):
    rc, _, err = run_cli("warmup", "--parts", parts)
    assert rc == 2
    assert "unknown part" in err and ", ".join(PARTS) in err


def test_jobs_below_one_is_an_error():
    rc, _, err = run_cli("warmup", "--jobs", "0", "--parts", "stores")
    assert rc == 2 and "--jobs must be at least 1" in err     # a usage error, as for every command


def _warmup(cache, *args):
    env = dict(os.environ, **({"NUMBA_CACHE_DIR": str(cache)} if cache else {}))
    res = subprocess.run([sys.executable, "-m", "streamrank.cli", "warmup", *args], capture_output=True,
                         text=True, env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return {m[0]: (int(m[1]), int(m[2])) for m in re.findall(
        r"^warmup (\w+): [\d.]+ s, (\d+) signatures compiled, (\d+) loaded from the cache$", res.stderr, re.M)}


@pytest.mark.slow
def test_a_warmed_cache_is_loaded_not_compiled_by_the_next_process(tmp_path):
    first = _warmup(tmp_path / "cache", "--jobs", "1", "--parts", "kernel")    # the smallest part, in an empty cache
    assert first["kernel"][0] > 0, first
    again = _warmup(tmp_path / "cache", "--jobs", "1", "--parts", "kernel")
    assert again["kernel"][0] == 0 and again["kernel"][1] > 0, again


@pytest.mark.slow
def test_worker_processes_take_the_parts_and_report_each():
    got = _warmup(None, "--jobs", "2", "--parts", "kernel,stores")   # the suite's cache: mostly loads
    assert set(got) == {"kernel", "stores"}, got

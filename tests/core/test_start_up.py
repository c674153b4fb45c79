"""Start-up cost (issue 22): what a fresh process imports, and that every numba kernel is cacheable.

Imports are checked in fresh interpreters (this test process has imported
everything already).  Timings are not asserted here: ``benchmarks/cold_start.py``
measures them.
"""
from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

import numpy as np
import pytest

import streamrank

HEAVY = ("numba", "zarr", "dask", "distributed", "scipy.sparse", "scipy.linalg", "tqdm", "matplotlib")
LEARNERS = tuple(streamrank.LEARNER_MODULES)


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    probe = code + "\nimport json, sys\nprint('\\nMODULES=' + json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out.rsplit("MODULES=", 1)[1]))


@pytest.mark.parametrize("argv", [
    ["--help"],
    ["fit", "--help"],
    ["fit", "--store", "s.zarr", "--model", "m.zarr", "--learner", "no-such-learner"],
    ["evaluate", "--model", "m.zarr"],                   # missing --store
    ["fit", "--store", "s", "--model", "m", "--learner", "rankrls", "--alphas", "2^x"],  # bad GRID
    ["recipe", "--help"],                                # lists the recipes without importing them
    ["evaluate", "--model", "m.zarr", "--store", "s.zarr", "--metrics", "ndcg@x"],   # a bad metric name
])
def test_help_and_usage_errors_import_no_learner_and_no_heavy_dependency(argv):
    code = ("import contextlib, io\nfrom streamrank.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            f"    rc = main({argv!r})\n"
            "assert rc in (0, 2), rc\n")
    mods = _modules_after(code)
    assert not [m for m in HEAVY + LEARNERS if m in mods], sorted(m for m in HEAVY + LEARNERS if m in mods)
    assert not [m for m in mods if m.startswith(("streamrank.rankrls", "streamrank.sgd", "streamrank.io",
                                                 "streamrank.pipelines", "streamrank.recipes.", "streamrank.metrics"))]


#: what none of the everyday commands (ingest, fit --learner rankrls, evaluate) may import: they are used by the
#: distributed pipelines, progress bars, plots and Parquet/ONNX input/output only
NOT_ON_THE_EVERYDAY_PATH = ("dask", "distributed", "tqdm", "matplotlib", "pyarrow", "pandas", "onnx",
                            "streamrank.distributed", "streamrank.plot", "streamrank.exporters",
                            "streamrank.pipelines", "streamrank.recipes", "streamrank.sgd")


def test_ingest_fit_evaluate_import_only_what_they_use(tmp_path):
    """The warm path of the three everyday commands (issue 22), run for real in one fresh interpreter.

    ``NUMBA_DISABLE_JIT`` keeps it cheap (no compile on a cold cache); the
    imports are the same, numba included.  The learner ``fit`` uses is the
    only learner imported, and ``evaluate`` loads only the model's.
    """
    rng = np.random.default_rng(1)
    for part, n_groups in (("train", 4), ("test", 2)):
        lines = [f"{int(rng.integers(0, 3))} qid:{q} " + " ".join(f"{j}:{rng.normal():.4f}" for j in range(1, 5))
                 for q in range(1, n_groups + 1) for _ in range(5)]
        (tmp_path / f"{part}.txt").write_text("\n".join(lines) + "\n")
    commands = [["ingest", "train.txt", "--store", "train.zarr", "-q"],
                ["ingest", "test.txt", "--store", "test.zarr", "-q"],
                ["fit", "--store", "train.zarr", "--model", "m.zarr", "--learner", "rankrls", "-q"],
                ["evaluate", "--model", "m.zarr", "--store", "test.zarr", "-q"]]
    code = ("import contextlib, io, os\nfrom streamrank.cli import main\n"
            f"os.chdir({str(tmp_path)!r})\n"
            f"for argv in {commands!r}:\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        assert main(argv) == 0, argv\n")
    env = dict(__import__("os").environ, NUMBA_DISABLE_JIT="1")
    probe = code + "\nimport json, sys\nprint('\\nMODULES=' + json.dumps(sorted(sys.modules)))\n"
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    mods = set(json.loads(res.stdout.rsplit("MODULES=", 1)[1]))
    # the commands did run
    assert "streamrank.io.svmlight" in mods and "streamrank.metrics" in mods
    unexpected = sorted(m for m in mods if m.startswith(NOT_ON_THE_EVERYDAY_PATH))
    assert not unexpected, unexpected
    assert [m for m in LEARNERS if m in mods] == ["streamrank.rankrls.linear"]


def test_import_streamrank_is_cheap():
    mods = _modules_after("import streamrank")
    assert not [m for m in HEAVY if m in mods]


def test_load_imports_only_the_learner_it_needs(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    model = streamrank.RankRLS(alpha=1.0).fit(X, X @ [1.0, -1.0, 0.5], np.repeat([0, 1, 2], 10))
    streamrank.save(model, tmp_path / "m.zarr")
    mods = _modules_after(f"import streamrank as sr\nm = sr.load({str(tmp_path / 'm.zarr')!r})\n"
                          "assert type(m).__name__ == 'RankRLS'\n")
    assert "streamrank.rankrls.linear" in mods
    assert not [m for m in LEARNERS if m != "streamrank.rankrls.linear" and m in mods]


def _all_dispatchers():
    from numba.core.registry import CPUDispatcher

    from streamrank._numba import LazyKernel

    found = {}
    for info in pkgutil.walk_packages(streamrank.__path__, "streamrank."):
        if info.name.rsplit(".", 1)[-1] in ("__main__",):
            continue
        try:
            mod = importlib.import_module(info.name)
        except ImportError as exc:  # an optional dependency (onnx, matplotlib...) is missing
            if "streamrank" in str(exc):
                raise
            continue
        for attr, obj in vars(mod).items():
            if isinstance(obj, LazyKernel):
                obj = obj.dispatcher()
            if isinstance(obj, CPUDispatcher) and obj.__module__ == info.name:
                found[f"{info.name}.{attr}"] = obj
    return found


def test_every_numba_kernel_is_cacheable():
    """``cache=True`` (a FunctionCache, not the NullCache) on a module-level function without a closure.

    A kernel that is not cacheable is compiled again by every process: every
    CLI command, every cron run and every CI job would pay it.
    """
    from numba.core.caching import FunctionCache

    dispatchers = _all_dispatchers()
    assert len(dispatchers) > 20  # the walk found the kernel modules
    bad = {name: type(d._cache).__name__ for name, d in dispatchers.items()
           if not isinstance(d._cache, FunctionCache)}
    assert not bad, f"kernels without cache=True: {bad}"
    closures = [name for name, d in dispatchers.items()
                if d.py_func.__closure__ is not None or "<locals>" in d.py_func.__qualname__]
    assert not closures, f"kernels defined inside functions (their cache is not reused): {closures}"
    from streamrank._numba import _LockedCacheFile, fcntl

    unlocked = [name for name, d in dispatchers.items() if not isinstance(d._cache._cache_file, _LockedCacheFile)]
    assert fcntl is None or not unlocked, f"kernels whose cache saves are not locked (not made by _numba.jit): {unlocked}"


def test_kernels_import_and_cache_when_no_cache_place_is_writable(tmp_path):
    """Read-only site-packages and no writable home: numba alone raises at import; streamrank caches in $TMPDIR.

    The module's own ``__pycache__`` is a regular file (no directory can be
    made there, even by root) and so is the parent of ``XDG_CACHE_HOME``.
    """
    pkg = tmp_path / "site"
    pkg.mkdir()
    (pkg / "__pycache__").write_text("not a directory")
    (pkg / "kern_mod.py").write_text("from streamrank._numba import jit\n\n\n@jit\ndef plus_one(x):\n    return x + 1\n")
    (tmp_path / "blocker").write_text("a file")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in __import__("os").environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(PYTHONPATH=str(pkg), XDG_CACHE_HOME=str(tmp_path / "blocker" / "cache"), TMPDIR=str(tmp),
               HOME=str(tmp_path / "blocker"))
    code = "import kern_mod\nprint(kern_mod.plus_one(41))\n"
    for _run in range(2):  # the second process loads what the first cached
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == "42"
        assert "set NUMBA_CACHE_DIR" in res.stderr
    cached = list(tmp.glob("streamrank-numba-*/**/*.nbi"))
    assert len(cached) == 1, cached

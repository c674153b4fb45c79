"""Long phases tell the truth and stop on Ctrl-C (issue 24): per-phase progress (decomposition, CV folds,
leave-query-out groups), a memory estimate before an exact kernel fit, and SIGINT honoured within seconds
even inside LAPACK (a real subprocess of the console script, bounded waits)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _cli_inproc import run_cli

from streamrank.datasets._paths import data_path

ARCHIVE = data_path("letor", "MQ2008_QueryLevelNorm.tar.gz")
TRAIN = f"{ARCHIVE}:MQ2008/Fold1/train.txt"
SCRIPT = Path(sys.executable).parent / "streamrank"

pytestmark = pytest.mark.skipif(not ARCHIVE.exists(), reason="MQ2008 archive not available")


def main(*args, env=None):
    return run_cli(*args, env=env)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("phases")
    assert main("ingest", TRAIN, "--store", d / "s.zarr", "--limit", 500, "-q")[0] == 0
    return d


def test_phases_are_reported_with_their_own_counts(small, tmp_path):
    env = {"STREAMRANK_PROGRESS_SECONDS": "0"}
    rc, _, err = main("fit", "--store", small / "s.zarr", "--model", tmp_path / "a", "--learner", "rankrls",
                      "--alphas", "1,4", "--cv", "query", env=env)
    assert rc == 0, err
    n_groups = int(err.split("leave-query-out: 0/")[1].split(" ")[0])
    assert f"leave-query-out: {n_groups}/{n_groups} groups (100%)" in err
    assert "groups (1" not in err.replace("(100%)", "")        # never more than 100 % (passes inside a phase)
    # the slice is one block: the count still moves inside it (per class of equal-size groups)
    assert any(f"leave-query-out: {i}/{n_groups} groups" in err for i in range(1, n_groups)), err
    rc, _, err = main("fit", "--store", small / "s.zarr", "--model", tmp_path / "b", "--learner", "rankrls",
                      "--alphas", "1,4", "--cv", "3", env=env)
    assert rc == 0 and "CV folds: 3/3 folds (100%)" in err, err
    rc, _, err = main("fit", "--store", small / "s.zarr", "--model", tmp_path / "k", "--learner", "kernel",
                      "--gamma", "0.05", "--alphas", "1,4,16", "--cv", "query", env=env)
    assert rc == 0, err
    lines = err.splitlines()
    start = next(i for i, s in enumerate(lines) if "decomposition (" in s and s.endswith("started"))
    done = next(i for i, s in enumerate(lines) if "decomposition (" in s and "done in" in s)
    cv = next(i for i, s in enumerate(lines) if "cross-validation: 3/3 λ (100%)" in s)
    assert start < done < cv
    assert "exact kernel fit of" in err and "32·m² bytes" in err       # the estimate comes first
    assert err.index("exact kernel fit of") < err.index("decomposition (")


def test_cg_reports_its_cv_folds_and_iterations_against_max_iter_and_the_tolerance(small, tmp_path):
    env = {"STREAMRANK_PROGRESS_SECONDS": "0"}
    rc, _, err = main("fit", "--store", small / "s.zarr", "--model", tmp_path / "cg", "--learner", "cg",
                      "--alphas", "1,4", "--cv", "3", env=env)
    assert rc == 0, err
    assert "CV folds: 3/3 folds (100%)" in err
    # each fold's solves are shown inside the fold's position, one per λ (largest first, warm-started)
    for f in (1, 2, 3):
        for lam in ("4", "1"):
            assert f"CV folds {f}/3 > cg iterations (λ={lam}): 0/" in err, err
    import streamrank as sr

    model = sr.load(tmp_path / "cg")
    n_features = sr.GroupStore.open(small / "s.zarr").n_features
    finals = [s for s in err.splitlines() if "cg iterations" in s and " in 0:" in s]
    assert len(finals) == 3 * 2 + 1                  # 3 folds x 2 λ, then the refit at the chosen λ
    for line in finals:                              # each stopped by the tolerance before max_iter
        k, total = map(int, re.search(r": (\d+)/(\d+) iterations", line).groups())
        r, tol = map(float, re.search(r"\[residual (\S+), tol (\S+)\]", line).groups())
        assert total == min(10 * n_features, 1000) and 0 < k < total and r <= tol == 1e-6, line
    k_refit = int(re.search(r": (\d+)/", finals[-1]).group(1))
    assert k_refit == model.n_iter_                  # the count is the iterations the solve ran
    # leave-query-out is the exact solve's: refused before any pass
    rc, _, err = main("fit", "--store", small / "s.zarr", "--model", tmp_path / "q", "--learner", "cg",
                      "--alphas", "1,4", "--cv", "query")
    assert rc == 6 and "--cv K" in err


def test_sparse_kernel_k_fold_reports_fold_statistics_folds_and_held_out_pass(small, tmp_path):
    env = {"STREAMRANK_PROGRESS_SECONDS": "0"}
    rc, out, err = main("fit", "--store", small / "s.zarr", "--model", tmp_path / "sk", "--learner",
                      "sparse-kernel", "--n-basis", "40", "--gamma", "0.05", "--alphas", "1,4,16", "--cv", "3",
                        "--scoring", "ndcg@10", env=env)
    assert rc == 0, err
    import streamrank as sr

    m = sr.GroupStore.open(small / "s.zarr").n_rows
    assert f"fold statistics (3 folds, one pass): {m:,}/{m:,} rows (100%)" in err
    assert "CV folds (the model without each, 3 λ): 3/3 folds (100%)" in err
    assert f"held-out ndcg of 3 λ (one pass): {m:,}/{m:,} rows (100%)" in err
    assert err.index("fold statistics") < err.index("CV folds (") < err.index("held-out ndcg")
    assert "by 3-fold CV (ndcg@10" in out


def test_exact_kernel_memory_bound_refuses_and_suggests_the_sparse_kernel(small, tmp_path):
    rc, _, err = main("fit", "--store", small / "s.zarr", "--model", tmp_path / "k", "--learner", "kernel",
                      "--max-memory-mb", "1")
    assert rc == 6 and "needs about" in err and "--learner sparse-kernel --n-basis" in err, err
    assert not (tmp_path / "k").exists()
    rc, _, err = main("fit", "--store", small / "s.zarr", "--model", tmp_path / "r", "--learner", "rankrls",
                      "--max-memory-mb", "1")
    assert rc == 2 and "--max-memory-mb does not apply to --learner rankrls" in err
    from streamrank.cli._fit import dual_memory_bytes

    assert dual_memory_bytes(9630, 46) > 2.9e9          # the 9,630-row fit used ~3 GB


@pytest.mark.skipif(not SCRIPT.exists() or not hasattr(os, "fork"), reason="needs the console script and fork")
def test_ctrl_c_inside_the_eigendecomposition_stops_within_seconds(tmp_path):
    """The exact fit of 4,000 rows spends seconds (32·m² = 512 MB) in one scipy.linalg.eigh call (it holds the GIL: Python
    sees no signal until it returns).  Ctrl-C while it runs must end the command within a few seconds."""
    assert main("ingest", TRAIN, "--store", tmp_path / "s.zarr", "--limit", 4000, "-q")[0] == 0
    env = dict(os.environ, STREAMRANK_PROGRESS_SECONDS="0")
    proc = subprocess.Popen([str(SCRIPT), "fit", "--store", str(tmp_path / "s.zarr"), "--model",
                             str(tmp_path / "k"), "--learner", "kernel", "--gamma", "0.05"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    seen = []
    try:
        t0 = time.monotonic()
        while True:
            line = proc.stderr.readline()
            assert line and time.monotonic() - t0 < 300, "".join(seen)
            seen.append(line)
            if "decomposition (" in line and line.rstrip().endswith("started"):
                break
        import psutil

        # the console script runs the command in a child process (cli/_supervise.py): the parent only waits
        assert psutil.Process(proc.pid).children(), "the console script did not supervise the command"
        sent = time.monotonic()                # inside eigh now (or, on a fast idle machine, just after it)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        took = time.monotonic() - sent
        err = "".join(seen) + proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert took < 3, f"exited {took:.1f} s after Ctrl-C\n{err}"
    assert "interrupted" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]                    # no model, no leftovers


def _interrupt_when_ready(forks, code, check=None):
    """Run ``python -c code`` (a real process forked from the pre-imported fork server, tests/_forked.py); once
    it prints its first line, (``check(proc)`` and) send SIGINT and wait.
    Returns ``(proc, first line, seconds from the signal to the exit, stderr)``."""
    proc = forks.popen(["-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first_line = proc.stdout.readline().strip()
        if check is not None:
            check(proc)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        took = time.monotonic() - sent
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc, first_line, took, err


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_that_ignores_ctrl_c_is_killed_after_the_grace(fork_server):
    """The kill path, deterministically: the command's process blocks SIGINT (as a long native call that
    never returns to Python does) and would sleep 60 s; the supervisor stops it about 1 s after Ctrl-C."""
    code = ("import signal, sys, time\n"
            "from streamrank.cli._supervise import supervised\n"
            "def run():\n"
            "    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})\n"
            "    print('ready', flush=True)\n"
            "    time.sleep(60)\n"
            "    return 0\n"
            "sys.exit(supervised(run, 'fit'))\n")
    proc, first_line, took, err = _interrupt_when_ready(fork_server, code)
    assert first_line == "ready"
    assert proc.returncode == 130 and 0.9 < took < 3, (took, err)
    assert "stopped inside native code after 1 s" in err and "nothing half-written" in err


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_delegated_commands_are_supervised_with_the_processes_they_started(fork_server):
    """`streamrank nightly|distributed|recipe` run under the same supervisor: a command stuck in native code
    (SIGINT blocked) and the process it started (as a LocalCluster starts its workers) are both gone about
    1 s after Ctrl-C.  Without supervision the script would sleep 60 s; killing only the child would leave
    the grandchild running."""
    code = ("import signal, subprocess, sys, time\n"
            "from streamrank.cli import _app\n"
            "def stuck(argv):\n"
            "    assert argv[0] == 'nightly', argv\n"
            "    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})\n"
            "    worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],\n"
            "                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "    print(worker.pid, flush=True)\n"
            "    time.sleep(60)\n"
            "    return 0\n"
            "_app.run_delegated = stuck\n"
            "sys.argv = ['streamrank', 'nightly', '--models', 'nowhere']\n"
            "sys.exit(_app.main())\n")
    import psutil

    def in_a_child(proc):
        assert psutil.Process(proc.pid).children(), "the delegated command did not run in a child"

    proc, first_line, took, err = _interrupt_when_ready(fork_server, code, check=in_a_child)
    worker = int(first_line)
    assert proc.returncode == 130 and 0.9 < took < 3, (took, err)
    assert "streamrank nightly: interrupted" in err
    t0 = time.monotonic()
    while psutil.pid_exists(worker) and psutil.Process(worker).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() - t0 < 5, "the process the command started survived the kill"
        time.sleep(0.05)


def _gone(pid):
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_killed_parent_leaves_no_child_computing(fork_server):
    """kill -9 of the console script's process (the supervising parent): the command's process -- busy in one
    C call that holds the GIL, as a numba kernel or LAPACK does -- and the process it started are SIGKILLed by
    the watchdog within seconds, not left running as orphans."""
    code = ("import itertools, os, signal, subprocess, sys\n"
            "from streamrank.cli._supervise import supervised\n"
            "def run():\n"
            "    worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],\n"
            "                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "    print(os.getpid(), worker.pid, flush=True)\n"
            "    return sum(itertools.repeat(1, 10**12))   # minutes in C, the GIL held\n"
            "sys.exit(supervised(run, 'fit'))\n")
    proc = fork_server.popen(["-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    started = []
    try:
        started = [int(p) for p in proc.stdout.readline().split()]
        child, worker = started
        time.sleep(0.2)
        assert not _gone(child) and not _gone(worker)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        t0 = time.monotonic()
        while not (_gone(child) and _gone(worker)):
            assert time.monotonic() - t0 < 5, "the command's processes outlived the killed parent"
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in started:                     # (only if the test failed)
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_supervised_command_that_ends_leaves_no_process_behind(fork_server):
    """The watchdog of a command that ended (normally, or killed after the grace) exits and is reaped: the
    console script has no child left, and the command's exit code is returned."""
    code = ("import sys, psutil\n"
            "from streamrank.cli._supervise import supervised\n"
            "codes = [supervised(lambda: 3, 'fit'), supervised(lambda: 0, 'fit')]\n"
            "print(codes, psutil.Process().children(recursive=True), flush=True)\n")
    proc = fork_server.popen(["-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.strip() == "[3, 0] []"

"""Shared fixtures.  Store fixtures (prefix ``store_``) are owned by the storage engineer."""
from __future__ import annotations

import itertools

import numpy as np
import pytest


@pytest.fixture
def store_factory(tmp_path):
    """``make(X, y, qid, *, n_batches=1, chunk_rows=None)`` -> a read-only GroupStore in tmp_path.

    ``X`` dense or CSR (stored as float32); rows are appended in ``n_batches``
    appends cut at group boundaries, so learners' tests can compare a store
    with the same arrays in memory.  ``qid=None`` stores one global group.
    """
    import scipy.sparse as sp

    import streamrank as sr

    counter = itertools.count()

    def make(X, y, qid=None, *, n_batches=1, chunk_rows=None):
        y = np.asarray(y, dtype=np.float64)
        n = y.shape[0]
        q = np.zeros(n, dtype=np.int64) if qid is None else np.asarray(qid)
        path = tmp_path / f"store-{next(counter)}.zarr"
        store = sr.GroupStore.create(path, X.shape[1], sparse=sp.issparse(X),
                                     n_outputs=1 if y.ndim == 1 else y.shape[1], chunk_rows=chunk_rows)
        starts = np.r_[0, np.flatnonzero(q[1:] != q[:-1]) + 1] if n else np.zeros(1, dtype=np.int64)
        idx = np.linspace(0, len(starts), n_batches + 1).astype(int)[1:-1]
        cuts = [0] + [int(starts[i]) for i in idx if i < len(starts)] + [n]
        for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
            if b > a:
                store.append(X[a:b], y[a:b], q[a:b], batch_id=f"batch-{i}")
        return sr.GroupStore.open(path)

    return make


@pytest.fixture
def store_tuple_factory(tmp_path):
    """``make(Q, D, tuples, magnitudes=None)`` -> a read-only TupleStore in tmp_path."""
    import streamrank as sr

    counter = itertools.count()

    def make(Q, D, tuples, magnitudes=None):
        path = tmp_path / f"tuples-{next(counter)}.zarr"
        ts = sr.TupleStore.create(path, Q.shape[1], D.shape[1])
        ts.append(Q, D, tuples, magnitudes=magnitudes, batch_id="all")
        return sr.TupleStore.open(path)

    return make



@pytest.fixture(scope="session")
def s3_server():
    """A real S3 server (moto's, its own process) on 127.0.0.1 for the session: see tests/_s3_server.py."""
    from _s3_server import S3Server

    server = S3Server()
    yield server
    server.stop()


@pytest.fixture
def s3_url(s3_server):
    """``s3://<a new empty bucket>`` on :func:`s3_server` (pass ``s3_server.storage_options``)."""
    return s3_server.new_bucket()

# Run once in the fork server before it forks anything: RankRLS from arrays and from a store, evaluated, so its
# children find these kernels loaded (a forked child that fits a model starts in 5 ms, not 0.7-0.9 s of loading
# numba's cached kernels).  Only serial kernels: no numba thread pool exists at fork.
_FORK_WARM_UP = """
import tempfile, numpy as np, streamrank as sr
X = np.random.default_rng(0).normal(size=(40, 3)); q = np.repeat(np.arange(4), 10)
sr.RankRLS(alpha=1.0).fit(X, X[:, 0], q)
with tempfile.TemporaryDirectory() as d:
    s = sr.GroupStore.create(d + "/s.zarr", 3)
    s.append(X.astype(np.float32), X[:, 0].round(), q, batch_id="w")
    s = sr.GroupStore.open(d + "/s.zarr")
    sr.metrics.evaluate(s, sr.RankRLS(alpha=1.0).fit(s), k=5)
"""


@pytest.fixture(scope="session")
def fork_server():
    """Real child processes forked from one pre-imported Python (tests/_forked.py): the crash, kill and race
    tests pay numpy's, numba's, zarr's and streamrank's imports once per test process, not once per child."""
    from _forked import ForkServer

    server = ForkServer(warm_up=_FORK_WARM_UP)
    yield server
    server.stop()


# Hypothesis: CI runs a fixed set of examples (derandomized) so a submission's
# result does not depend on the draw; locally examples stay random to explore.
import os as _os

from hypothesis import settings as _hsettings

_hsettings.register_profile("ci", derandomize=True, deadline=None, database=None, print_blob=True)
_hsettings.register_profile("explore", deadline=None, max_examples=500)
if _os.environ.get("CI"):
    _hsettings.load_profile("ci")
elif _os.environ.get("HYPOTHESIS_PROFILE"):
    _hsettings.load_profile(_os.environ["HYPOTHESIS_PROFILE"])


# ``pytest -m "not slow"`` is the quick loop (README, "Tests"): besides the tests marked ``@pytest.mark.slow``
# one by one, these start fresh interpreters, dask clusters or whole benchmark/demo runs, where each test pays
# the start-up of numba, zarr and dask again (seconds each) rather than exercising a different code path.
SLOW_FILES = {
    "test_benchmarks_smoke.py", "test_demo.py",                         # whole scripts end to end
    "sgd/test_sgd_benchmarks_smoke.py", "rankrls/test_bench_rankrls_smoke.py",
    "rankrls/test_bench_cg_ties_path_smoke.py", "hardening/test_soak_smoke.py",
    "cli/test_cli.py", "cli/test_cli_export.py", "hardening/test_crash_safety.py",  # real subprocesses
    "hardening/test_security.py", "io/test_store_crash.py", "core/test_start_up.py",
    "pipelines/test_nightly.py", "pipelines/test_nightly_models_dir.py",
    "pipelines/test_nightly_ingest.py", "exporters/test_readme_serving.py",
    "core/test_numba_cache_lock.py", "cli/test_cli_phases.py", "cli/test_predict_partial.py",   # processes, signals
    "hardening/test_fuzz_svmlight.py", "hardening/test_fuzz_store_metadata.py",            # long hypothesis runs
    "hardening/test_property_crashes.py",
    "core/test_lazy_kernels.py",   # fresh interpreters (numba or not)
}
# Tests that use these fixtures start a server or a cluster in its own processes: a real dask LocalCluster
# (tests/pipelines/conftest.py) or the S3 server on loopback (moto, tests/_s3_server.py).
SLOW_FIXTURES = {"client", "s3_server"}
# Single quick-loop tests of about 0.4 s or more on an idle machine (wall on a warm cache, 2 workers, 2026-11-27,
# lead's per-test profile of `make quick`), each in a module whose other tests stay in the quick loop (for a
# parametrized test, its other cells do).  An id without "[" marks every cell of the test.
SLOW_TESTS = {
    **{f"hardening/test_chunk_check_rows.py::test_chunk_check_names_the_row[{cell}]": "0.23 s; [0] stays"
       for cell in (12345, 20000, 39999, 40050)},
    "rankrls/test_rankrls_linear.py::test_two_step_contract_and_clone": "2.3 s",
    "core/test_numba_cache_lock.py::test_a_kernel_whose_callee_was_edited_is_compiled_again": "~10 CPU-s, four "
        "fresh interpreters compiling",
    "sgd/test_sgd_bilinear.py::test_params_and_refit_name": "1.8 s",
    "io/test_source_contract.py::TestDask::test_shuffle_is_reproducible_permutation": "1.5 s; zarr sources keep it",
    "io/test_chunk_files.py::test_row_reader_with_the_decoder_equals_zarr": "0.9 s",
    "io/test_row_columns.py::test_columns_round_trip_are_verified_and_reopen": "0.85 s",
    "cli/test_cli_refusals.py::test_evaluate_a_parquet_file_directly_matches_the_store": "0.7 s",
    "cli/test_cli_refusals.py::test_plot_suggests_only_options_the_learner_takes": "0.6 s",
    "io/test_group_store.py::test_store_factory_fixture": "0.7 s",
    "io/test_group_store.py::test_shipped_to_workers_by_path_and_commit": "0.65 s",
    "io/test_group_store.py::test_roundtrip_several_batches[3-True]": "0.6 s; the other cells stay",
    "io/test_group_store.py::test_reader_keeps_only_group_ptr_in_memory": "0.4 s",
    "rankrls/test_cg_ties_path_cv.py::test_cg_kfold_multi_output_ties_excluded_equals_retraining_and_primal": "0.6 s",
    "core/test_normalize.py::test_cg_cross_validation_with_normalize_equals_prescaled[ndcg@5-minmax]": "0.55 s",
    "core/test_normalize.py::test_cg_cross_validation_with_normalize_equals_prescaled[ndcg@5-standard]": "0.55 s",
    "core/test_normalize.py::test_cg_cross_validation_with_normalize_equals_prescaled[squared-minmax]": "0.5 s",
    "io/test_row_chunks.py::test_any_cutting_equals_the_zarr_slice_and_decodes_each_chunk_once": "0.55 s",
    "recipes/test_parquet.py::test_parquet_errors_are_clear": "0.55 s",
    "rankrls/test_cg_weighted_ties_exclude.py::test_weighted_exclude_cg_cross_validation_equals_primal": "0.5 s",
    "rankrls/test_cg_weighted_split.py::test_weighted_cg_cross_validation_with_split_groups_equals_primal": "0.5 s",
    "io/test_tuple_store.py::test_torn_tail_repair_and_format": "0.5 s",
    "rankrls/test_sparse_rankrls.py::test_block_cuttings_give_the_same_model": "0.5 s",
    "hardening/test_bad_input_cli.py::test_nightly_bad_day_leaves_store_and_model": "0.5 s (a nightly run)",
    "test_persistence_all.py::test_roundtrip_identical_predictions[RankRLS-primal+folds]": "0.5 s",
    "rankrls/test_sample_weight.py::test_weighted_split_groups_any_cutting_any_order": "0.5 s",
    "io/test_row_columns.py::test_sgd_pairwise_and_dual_kernel_take_the_store_weights": "0.45 s",
    "io/test_weights_read_per_block.py::test_cg_split_groups_read_weights_per_block_and_equal_the_in_memory_fit[exclude]":
        "0.4 s; the include cell stays",
    "pipelines/test_nightly_holdout.py::test_pairwise_progressive_validation": "0.4 s",
    "pipelines/test_nightly_holdout.py::test_sparse_kernel_holdout_candidate": "0.4 s",
    "io/test_chunk_files.py::test_group_store_blocks_are_the_same_either_way[True]": "0.4 s",
    "hardening/test_chunk_binding.py::test_appends_across_chunk_boundaries_keep_reading": "0.4 s",
    # session 12's tests (cold CI run of b7a155f, per-test wall): fresh interpreters and the long random ones
    "core/test_model_compat.py::test_every_learner_is_saved_as_5a88973_saved_it_and_its_old_model_loads"
    "[SparseSGDRanker]": "12.9 s cold (the bilinear SGD kernels); the other learners stay",
    "core/test_model_compat.py::test_edited_documents_load_or_give_a_model_format_error_never_a_crash": "4.2 s, "
        "hypothesis; the damage cases stay",
}


def pytest_collection_modifyitems(config, items):
    root = _os.path.dirname(__file__)
    for item in items:
        rel = _os.path.relpath(str(item.path), root).replace(_os.sep, "/")
        test_id = rel + "::" + item.nodeid.split("::", 1)[1] if "::" in item.nodeid else rel
        if (rel in SLOW_FILES or item.get_closest_marker("distributed") is not None
                or SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ()))
                or test_id in SLOW_TESTS or test_id.split("[", 1)[0] in SLOW_TESTS):
            item.add_marker(pytest.mark.slow)


# pytest-xdist with ``--dist loadfile`` (``make test``) keeps the tests of a file on one worker, so module-scoped
# fixtures (dask clusters, stores built by CLI runs) are made once; xdist hands out the files with the most tests
# first.  These files' tests share nothing at module scope, and each is big enough to leave one worker busy long
# after the other has finished: their tests are dealt out one by one, last, and fill the gaps at the end of the run.
SPREAD_FILES = {"hardening/test_bad_input.py"}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    spread = {f"tests/{name}" for name in SPREAD_FILES}

    class _FileOrTestScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid):
            scope = super()._split_scope(nodeid)
            return nodeid if scope in spread else scope

    return _FileOrTestScheduling(config, log)


# CPU seconds of the run, one line before pytest's closing line: the suite's clock on a shared machine is noisy,
# its CPU seconds much less (issue 22).  With pytest-xdist each worker reports its own; the slowest worker's CPU
# is about the wall time of the run on an idle machine with one core per worker.
def _cpu_seconds():
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # subprocesses the tests started and waited for
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the figure to the controller
        workeroutput["streamrank_cpu"] = _cpu_seconds()


_WORKER_CPU = {}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    cpu = getattr(node, "workeroutput", {}).get("streamrank_cpu")
    if cpu is not None:
        _WORKER_CPU[node.gateway.id] = cpu


def pytest_terminal_summary(terminalreporter):
    if getattr(terminalreporter.config, "workeroutput", None) is not None:
        return
    own, kids = _cpu_seconds()
    line = f"CPU seconds: {own + kids:.1f} in all ({kids:.1f} of it in subprocesses)"
    if _WORKER_CPU:
        line += "; per worker with its subprocesses: " + ", ".join(
            f"{w} {a + b:.1f}" for w, (a, b) in sorted(_WORKER_CPU.items()))
    terminalreporter.write_line(line)

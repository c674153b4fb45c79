"""Every benchmark script of issue 8 runs end to end in its ``--smoke`` mode (tiny data, seconds).

The point is that the scripts do not rot: each ``main(["--smoke", ...])``
must return 0, print its table, and report no failed learner.  Peers
(xgboost, lightgbm, scikit-learn) are skipped with ``pytest.importorskip``
when not installed; streamrank parts are never skipped.  Scripts that read
the real datasets skip when the real data directory (``../shared/data`` beside the checkout) is not there.  No timing
is asserted.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from streamrank.datasets._paths import data_dir

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
DATA = data_dir()


def _load(name):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _need(path):
    if not Path(path).exists():
        pytest.skip(f"real dataset {path} not available")


def _run(name, argv, capsys):
    mod = _load(name)
    assert mod.main(argv) == 0
    out = capsys.readouterr().out
    assert "FAILED" not in out, out
    return out


def test_peers_letor_smoke(tmp_path, capsys):
    pytest.importorskip("xgboost")
    pytest.importorskip("lightgbm")
    _need(DATA / "letor" / "MQ2008_QueryLevelNorm.tar.gz")
    out = _run("peers_letor", ["--smoke", "--work-dir", str(tmp_path)], capsys)
    assert "MQ2008 mean over 1 fold(s)" in out
    assert "Synthetic LETOR-like, linear hidden model" in out
    for learner in ("XGBoost rank:pairwise", "XGBoost rank:ndcg", "LightGBM lambdarank",
                    "streamrank RankRLS linear", "streamrank KernelRankRLS rbf r=20",
                    "streamrank PairwiseSGDRanker"):
        assert learner in out


def test_peers_sgd_smoke(capsys):
    pytest.importorskip("sklearn")
    out = _run("peers_sgd", ["--smoke"], capsys)
    assert "streamrank PairwiseSGDRanker partial_fit" in out
    assert "sklearn SGDClassifier partial_fit" in out


def test_out_of_core_smoke(tmp_path, capsys):
    out = _run("out_of_core", ["--smoke", "--work-dir", str(tmp_path)], capsys)
    assert "Out of core: 50 features" in out
    assert "RankRLS primal [6,000]" in out
    assert "KernelRankRLS rbf sparse r=20 [6,000]" in out


def test_out_of_core_refuses_without_disk(tmp_path, capsys):
    mod = _load("out_of_core")
    assert mod.main(["--sizes", str(10**13), "--work-dir", str(tmp_path)]) == 2
    assert "not enough disk space" in capsys.readouterr().out


def test_repro_reuters_smoke(capsys):
    _need(DATA / "reuters21578" / "reuters21578.tar.gz")
    out = _run("repro_reuters", ["--smoke"], capsys)
    assert "RankRLS paper" in out and "MEAN" in out
    assert "ridge-regression check" in out


def test_repro_reuters_regression_design_is_ridge():
    import numpy as np
    import streamrank as sr

    mod = _load("repro_reuters")
    rng = np.random.default_rng(0)
    Phi, Y = rng.normal(size=(30, 4)), rng.normal(size=(30, 2))
    X2, Y2, q2 = mod._regression_design(Phi, Y)
    got = sr.RankRLS(alpha=0.7, solver="primal").fit(X2, Y2, q2).coef_
    ridge = np.linalg.solve(Phi.T @ Phi + 0.7 * np.eye(4), Phi.T @ Y)
    np.testing.assert_allclose(got, ridge, rtol=1e-10, atol=1e-12)


def test_repro_jester_smoke(capsys):
    _need(DATA / "jester" / "jester-data-1.csv.zip")
    out = _run("repro_jester", ["--smoke"], capsys)
    assert "RankRLS (22)" in out and "All sizes paper" in out


def test_repro_jester_disagreement_matches_metric():
    import numpy as np
    import streamrank as sr

    mod = _load("repro_jester")
    rng = np.random.default_rng(1)
    y = np.round(rng.normal(size=25), 1)
    P = np.round(rng.normal(size=(3, 25)), 1)          # score ties included
    got = mod.disagreement_all(y, P)
    want = [sr.metrics.disagreement(y, p) for p in P]
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("name", ["peers_letor", "peers_sgd", "out_of_core", "repro_reuters", "repro_jester"])
def test_help(name, capsys):
    mod = _load(name)
    with pytest.raises(SystemExit) as exc:
        mod.main(["--help"])
    assert exc.value.code == 0
    assert "--smoke" in capsys.readouterr().out


def test_distributed_scaling_smoke(capsys):
    """1 and 2 worker processes of a real LocalCluster on a tiny store; equality with the local fit is printed."""
    out = _run("distributed_scaling", ["--smoke", "--repeat", "1"], capsys)
    assert "speedup 2 workers / 1 worker" in out, out
    assert "coef max relative difference vs local fit" in out, out


def test_nightly_ingest_smoke(capsys):
    out = _run("nightly_ingest", ["--smoke"], capsys)
    assert "chunked" in out.lower(), out


def test_distributed_cg_ties_smoke(capsys):
    out = _run("distributed_cg_ties", ["--smoke"], capsys)
    assert "distributed" in out, out


def test_metrics_vs_trec_eval_smoke(capsys):
    pytest.importorskip("pytrec_eval")
    out = _run("metrics_vs_trec_eval", ["--smoke"], capsys)
    assert "streamrank ties='trec'" in out and "pytrec_eval" in out
    assert "largest per-query difference from trec_eval over 8 measures: 0.0e+00" in out


def test_normalize_and_export_smoke(capsys):
    out = _run("normalize_and_export", ["--smoke"], capsys)
    assert "fit normalized" in out and "export solr" in out


@pytest.mark.slow
def test_parquet_ingest_smoke(capsys):
    pytest.importorskip("pyarrow")
    out = _run("parquet_ingest", ["--smoke"], capsys)
    assert "ratio ingest / (read + write)" in out and "peak RSS by number of files" in out, out


def test_unbiased_clicks_smoke(capsys):
    _need(DATA / "letor" / "MQ2008_QueryLevelNorm.tar.gz")
    out = _run("unbiased_clicks", ["--smoke"], capsys)
    assert "(c) IPS true p" in out and "gap closed" in out
    assert "(d) IPS EM p (same logs)" in out and "EM share of (c)-(b)" in out
    diff = float(out.split("max |coef - in-memory IPS| = ")[1].split()[0])   # the store's IPS fit = in memory
    assert "IPS / plain fit time" in out and diff < 1e-8, out
    import importlib.util

    if importlib.util.find_spec("lightgbm") is not None:     # the peer rows (bench extra)
        assert "(c') LGBM clicks + position bias" in out and "gap closed (LGBM)" in out
    else:
        assert "lightgbm is not installed" in out


def test_position_bias_em_smoke(capsys):
    out = _run("position_bias_em", ["--smoke"], capsys)
    assert "EM max_k<=5" in out and "objective monotone" in out and "one EM pass" in out, out
    assert " NO " not in out, out


def test_cold_start_smoke(tmp_path, capsys):
    _need(DATA / "letor" / "MQ2008_QueryLevelNorm.tar.gz")
    out = _run("cold_start", ["--smoke", "--work-dir", str(tmp_path)], capsys)
    assert 'baseline "import numpy, scipy"' in out
    for figure in ("--help", "ingest", "fit --learner rankrls", "evaluate"):
        assert f"\n{figure} " in out
    help_row = next(line for line in out.splitlines() if line.startswith("--help "))
    cols = help_row.split()  # name, wall, cpu, ratio, cpu ratio, load, compiled, cached, modules, heavy imports
    assert cols[6:8] == ["0", "0"]  # --help neither compiles nor loads a numba kernel
    assert "numba" not in cols[9] and "zarr" not in cols[9]
    table = out.split("where the CPU goes")[1]          # the breakdown: one line per category, a column a command
    rows = {line[:34].strip(): line[34:].split() for line in table.splitlines()[2:] if line[:34].strip()}
    # --help runs no kernel; ingest, fit and evaluate run theirs (loaded from the cache, or compiled once)
    assert rows["import numba"][0] == "0" and all(float(v) > 0 for v in rows["import numba"][1:])
    assert rows["numba cache loads (n, ms each)"][0] == "0"


def test_object_store_smoke(s3_server, capsys):
    """Streaming from the loopback S3 server vs local disk, and an append's requests (issue 19)."""
    mod = _load("object_store")
    assert mod.main(["--smoke"], server=s3_server) == 0
    out = capsys.readouterr().out
    assert "FAILED" not in out, out
    assert "16 in flight" in out and "requests per batch" in out


@pytest.mark.slow      # about 2 CPU-s: writes two stores and reads every block three ways
def test_stream_throughput_read_checks_smoke(tmp_path, capsys):
    """Section 6 of stream_throughput.py (the cost of the read checks; its --smoke runs sections 1-5 too) on a
    dense and a CSR store of a full chunk and a tail: prints the two figures of issue 16's 5 % target; and 6c, the
    check kernels' own speed on one block in cache."""
    mod = _load("stream_throughput")
    for sparse, rows, features in ((False, 110_000, 10), (True, 12_000, 1000)):
        path = str(tmp_path / f"s{int(sparse)}.zarr")
        mod.write_store(path, rows, features, sparse=sparse)
        mod.bench_read_checks(path, 40_000, 1, label="6")
    out = capsys.readouterr().out
    assert out.count("CPU of checked / unchecked blocks, paired per block:") == 2, out
    assert out.count("extra CPU of decode+check over decode, per chunk:") == 2, out
    assert "checks after decoding whole chunks" in out, out
    assert "numpy twins" not in out, out                     # issue 34: no twin to measure
    mod.bench_check_kernels(1)
    lines = capsys.readouterr().out.splitlines()
    rates = [line for line in lines if "GB/s" in line and "time / numpy max" in line]
    assert len(rates) == 3 and "numpy max (baseline)" in rates[0] and "first_nonfinite" in rates[-1], lines
    assert all(float(r.split("GB/s")[0].split()[-1]) > 0 for r in rates), lines


@pytest.mark.slow                                   # four stores and eight traced fits (~20 s wall)
def test_weight_memory_smoke(tmp_path, capsys):
    out = _run("weight_memory", ["--smoke", "--work-dir", str(tmp_path)], capsys)
    assert "PairwiseSGDRanker" in out and "RankRLS cg (split groups)" in out and "extra B/row" in out, out

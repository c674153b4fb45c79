"""The README's Python example and the data-formats page's Parquet and click-log sections run as written, in
process (quick; tests/packaging/test_wheel.py runs every documented block from the installed wheel)."""
import os

import re
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
FORMATS = Path(__file__).resolve().parents[1] / "docs" / "data-formats.md"


def test_readme_python_example_runs(tmp_path, capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for code in blocks:
            exec(compile(code, str(README), "exec"), {"__name__": "__readme__"})
    finally:
        os.chdir(cwd)
    ndcg = float(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0.5 < ndcg <= 1.0


@pytest.mark.slow   # pyarrow, a table written and ingested through the CLI: 2.0 s wall under load 11
def test_readme_parquet_lines_run_as_written(tmp_path, capsys):
    """The Parquet section: its Python block, then its shell lines exactly as written."""
    import shlex

    pytest.importorskip("pyarrow")
    from streamrank.cli import main

    text = FORMATS.read_text()
    section = text.split("## Tables: Parquet", 1)[1].split("\n## ", 1)[0]
    code = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    lines = [ln.split("   #")[0].strip() for ln in re.findall(r"```bash\n(.*?)```", section, flags=re.S)[0]
             .splitlines() if ln.strip()]
    assert [ln.split()[1] for ln in lines] == ["ingest", "fit", "info"]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(code, str(FORMATS), "exec"), {"__name__": "__readme__"})
        assert 0.5 < float(capsys.readouterr().out.strip().splitlines()[-1]) <= 1.0
        for ln in lines:
            argv = shlex.split(ln)
            assert argv[0] == "streamrank"
            assert main(argv[1:]) == 0, ln
        out = capsys.readouterr().out
    finally:
        os.chdir(cwd)
    import streamrank as sr

    store = sr.GroupStore.open(tmp_path / "parquet-logs.zarr")
    assert store.qid_kind == "str" and store.qid[0].startswith("q") and store.n_rows == 20_000
    model = sr.load(tmp_path / "parquet-m.zarr")
    assert list(model.feature_names_in_) == [f"f_{j}" for j in range(20)]
    top = np.argsort(-np.abs(model.coef_))[:5]
    listed = re.findall(r"^\s+[+-]\S+\s+(f_\d+)$", out, flags=re.M)
    assert listed == [f"f_{j}" for j in top]


@pytest.mark.slow   # a click log ingested and fitted through the CLI: 2.2 s wall under load 15
def test_readme_click_log_lines_run_as_written(tmp_path, capsys):
    """The click-log section: its first Python block, then its shell lines exactly as written; the model
    equals the library's IPS fit on the same rows."""
    import shlex

    pytest.importorskip("pyarrow")
    import streamrank as sr
    from streamrank.cli import main
    from streamrank.clicks import ips_weights

    section = FORMATS.read_text().split("### Learning from click logs", 1)[1].split("\n## ", 1)[0]
    code = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    lines = [ln for ln in re.findall(r"```bash\n(.*?)```", section, flags=re.S)[0].splitlines() if ln.strip()]
    assert [ln.split()[1] for ln in lines] == ["ingest", "fit"]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        ns = {"__name__": "__readme__"}
        exec(compile(code, str(FORMATS), "exec"), ns)
        for ln in lines:
            assert main(shlex.split(ln)[1:]) == 0, ln
    finally:
        os.chdir(cwd)
    log, X = ns["log"], ns["X"]
    store = sr.GroupStore.open(tmp_path / "clicks.zarr")
    assert store.row_columns == ("click", "position") and store.n_features == 10
    w = ips_weights(log.clicks, log.position, 1.0 / np.arange(1, 11), clip=0.05)
    want = sr.RankRLS(alpha=1.0, ties="exclude").fit(X[log.row].astype(np.float32).astype(np.float64), log.clicks,
                                                     log.session, sample_weight=w)
    np.testing.assert_allclose(sr.load(tmp_path / "ips.zarr").coef_, want.coef_, rtol=0, atol=1e-8)

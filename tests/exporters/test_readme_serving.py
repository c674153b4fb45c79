"""The serving page's Python and export lines run as written, and what they write serves like predict."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from export_testdata import assert_serves_like_predict
from ltr_scorers import score_opensearch, score_solr

import streamrank as sr

README = Path(__file__).resolve().parents[2] / "docs" / "serving.md"
GETTING_STARTED = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"


def _section():
    return README.read_text()


def _shell(line, cwd):
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return subprocess.run(line, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_readme_serving_lines_run_as_written(tmp_path):
    section = _section()
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert '"serve-logs.zarr"' in code
    (bash,) = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    ns = {"__name__": "__readme__"}
    try:
        exec(compile(code, str(README), "exec"), ns)
    finally:
        os.chdir(cwd)
    model, X, qid = ns["model"], ns["X"], ns["qid"]
    names = ["title_bm25", "body_bm25", "freshness"]
    X32 = X.astype(np.float32)
    body = json.loads((tmp_path / "ranker.json").read_text())
    assert body["model"]["name"] == "ranker_v1"
    assert_serves_like_predict(score_opensearch(body, names[::-1], X32[:, ::-1]), model.predict(X32), qid)
    lines = [ln for ln in bash.splitlines() if ln.strip()]
    assert lines and all(ln.startswith("streamrank export") for ln in lines)
    for line in lines:
        p = _shell(line, tmp_path)
        assert p.returncode == 0, f"{line}: {p.stderr}"
    solr = json.loads((tmp_path / "ranker-solr.json").read_text())
    assert_serves_like_predict(score_solr(solr, names, X32), model.predict(X32), qid)
    ort = pytest.importorskip("onnxruntime")
    got = ort.InferenceSession(str(tmp_path / "ranker.onnx")).run(None, {"X": X32})[0]
    assert_serves_like_predict(got, model.predict(X32), qid)


def test_getting_started_export_line_runs_as_written(tmp_path):
    text = GETTING_STARTED.read_text()
    (line,) = [ln.split("  #")[0].strip() for ln in text.splitlines()
               if ln.startswith("streamrank export --model mq.zarr")]
    rng = np.random.default_rng(0)
    X = rng.random((200, 4))
    y = X @ [1.0, 0.5, -1.0, 0.0]
    q = np.repeat(np.arange(20), 10)
    sr.save(sr.RankRLS(alpha=1.0).fit(X, y, q), tmp_path / "mq.zarr")
    (tmp_path / "mq-features.txt").write_text("a\nb\nc\nd\n")
    p = _shell(line, tmp_path)
    assert p.returncode == 0, p.stderr
    body = json.loads((tmp_path / "mq.json").read_text())
    assert list(body["model"]["model"]["definition"]) == ["a", "b", "c", "d"]

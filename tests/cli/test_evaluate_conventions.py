"""``streamrank evaluate`` with the metric conventions: the getting-started evaluate commands run as written,
report per metric the value and the queries counted and skipped, and equal the library."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

import streamrank as sr
from streamrank.cli import main
from streamrank.datasets.synthetic import make_letor_like

README = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"


def _readme_evaluate_lines():
    """The getting-started page's evaluate lines, on this module's files (test.zarr, m.zarr, run.txt, qrels.txt)."""
    block = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    lines = [ln.split("   #")[0].strip() for b in block for ln in b.splitlines()]
    names = {"mq.zarr": "m.zarr", "mq-test.zarr": "test.zarr", "mq-run.txt": "run.txt", "mq-qrels.txt": "qrels.txt"}
    return [re.sub(r"\S+", lambda m: names.get(m.group(0), m.group(0)), ln) for ln in lines
            if ln.startswith("streamrank evaluate")]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("evaluate")
    X, y, qid = make_letor_like(n_rows=600, n_features=5, random_state=3)
    y[qid == qid[0]] = 0                                  # one query without a relevant document
    store = sr.GroupStore.create(d / "test.zarr", n_features=5)
    store.append(X, y, qid, batch_id="t")
    model = sr.RankRLS(alpha=1.0).fit(X, y, qid)
    sr.save(model, d / "m.zarr")
    s = model.predict(X)
    docs = np.array([f"doc{i:05d}" for i in range(len(y))])
    with open(d / "run.txt", "w") as f:
        for q in np.unique(qid):
            rows = np.flatnonzero(qid == q)
            for rank, i in enumerate(rows[np.argsort(-s[rows])], 1):
                f.write(f"{q} Q0 {docs[i]} {rank} {float(s[i])!r} sr\n")
    with open(d / "qrels.txt", "w") as f:
        f.writelines(f"{q} 0 {doc} {int(v)}\n" for q, doc, v in zip(qid, docs, y))
    return d, X, y, qid, s, docs


def test_readme_evaluate_commands_run_as_written(workdir, capsys, monkeypatch):
    d, X, y, qid, s, docs = workdir
    monkeypatch.chdir(d)
    lines = _readme_evaluate_lines()
    assert len(lines) >= 3
    for line in lines:
        assert main(shlex.split(line)[1:]) == 0, line
        out = capsys.readouterr().out
        if "--json" in line:
            got = json.loads(out)
            want = sr.metrics.evaluate(sr.GroupStore.open("test.zarr"), sr.load("m.zarr"),
                                       metrics="ndcg@1,3,5,10,map,mrr,p@10,err@10", gain="linear", empty="zero")
            assert set(got["metrics"]) == set(want)
            for name, r in want.items():
                assert got["metrics"][name] == pytest.approx(r.value, rel=1e-12)
                assert got["n_queries"][name] == r.n_queries == len(np.unique(qid))
                assert got["n_skipped"][name] == r.n_skipped == 0
            assert got["ties"] == "expected" and got["gain"] == "linear" and got["empty"] == "zero"
        elif "--run" in line:
            res = sr.metrics.evaluate_run("run.txt", "qrels.txt", "ndcg@10,map,p@10", gain="linear", empty="zero")
            for name, r in res.items():
                row = next(ln for ln in out.splitlines() if ln.startswith(name + " "))
                assert f"{r.value:.6f}" in row and f"{r.n_queries:,} queries" in row
            want = sr.metrics.ndcg(y, s, qid, k=10, gain="linear", empty="zero", ties="trec", doc_ids=docs)
            assert res["ndcg@10"].value == pytest.approx(want, rel=1e-12)
        else:
            assert out.splitlines()[0].startswith("ndcg@10")


def test_text_report_counts_skipped_queries(workdir, capsys, monkeypatch):
    d, X, y, qid, s, docs = workdir
    monkeypatch.chdir(d)
    assert main(["evaluate", "--model", "m.zarr", "--store", "test.zarr", "--metrics", "map,mrr"]) == 0
    out = capsys.readouterr().out
    empty = sum(not np.any(y[qid == q] > 0) for q in np.unique(qid))
    assert empty >= 1
    assert re.search(rf"^map +\S+ +\({len(np.unique(qid)) - empty:,} queries, {empty} skipped\)$", out,
                     flags=re.M), out


@pytest.mark.parametrize("argv, message", [
    (["--run", "run.txt"], "--run and --qrels go together"),
    (["--run", "run.txt", "--qrels", "qrels.txt", "--model", "m.zarr"], "either --model and --store"),
    (["--model", "m.zarr"], "needs --model and --store"),
    (["--model", "m.zarr", "--store", "test.zarr", "--ties", "trec"], "--ties trec needs document ids"),
    (["--model", "m.zarr", "--store", "test.zarr", "--metrics", "ndcg@10,bleu"], "unknown metric 'bleu'"),
    (["--run", "run.txt", "--qrels", "qrels.txt", "--metrics", "auc"], "not available for a run file"),
])
def test_usage_errors_are_one_line(workdir, capsys, monkeypatch, argv, message):
    d, *_ = workdir
    monkeypatch.chdir(d)
    assert main(["evaluate", *argv]) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_malformed_run_file_names_the_line(workdir, capsys, tmp_path):
    d, *_ = workdir
    bad = tmp_path / "bad.txt"
    bad.write_text("1 Q0 doc1 1 0.5 sr\n1 Q0 doc2 2 nan sr\n")
    assert main(["evaluate", "--run", str(bad), "--qrels", str(d / "qrels.txt")]) != 0
    err = capsys.readouterr().err
    assert f"{bad}:2" in err and "finite" in err

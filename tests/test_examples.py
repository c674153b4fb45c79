"""Every script in examples/ runs (issue 24), in process (``runpy``: the kernels compiled by the rest of the suite
are reused), each in its own directory, and shows what its docstring says."""
from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _getting_started(ndcg, out):
    assert 0.6 < ndcg <= 1.0 and "best alpha by 5-fold group CV" in out


def _nightly(reports, out):
    assert len(reports) == 3 and reports[0]["status"] == "promoted"
    assert all(r["status"] in ("promoted", "kept") for r in reports), [r["status"] for r in reports]
    assert out.count("night ") == 3 and "current model: RankRLS" in out


def _distributed(diff, out):
    assert diff < 1e-8 and "cluster fit == local fit" in out


def _export(body, out):
    assert body["model"]["name"] == "ranker_v1" and body["model"]["model"]["type"] == "model/linear"
    assert set(body["model"]["model"]["feature_normalizers"]) == {"title_bm25", "body_bm25", "freshness"}
    assert "_createmodel" in out


CHECKS = {"getting_started.py": _getting_started, "nightly.py": _nightly, "distributed_fit.py": _distributed,
          "export_for_serving.py": _export}


def test_every_example_is_tested_and_listed():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(CHECKS)
    listed = (EXAMPLES / "README.md").read_text()
    assert all(f"`{name}`" in listed for name in CHECKS)


# distributed_fit.py starts a cluster; nightly.py is three nightly runs (3.3 s wall under load 11, like the slow
# tests of tests/pipelines): the quick loop keeps the others
_EXAMPLE_MARKS = {"distributed_fit.py": pytest.mark.distributed, "nightly.py": pytest.mark.slow}


@pytest.mark.parametrize("name", [pytest.param(n, marks=_EXAMPLE_MARKS[n]) if n in _EXAMPLE_MARKS else n
                                  for n in CHECKS])
def test_example_runs(name, tmp_path, capsys):
    ns = runpy.run_path(str(EXAMPLES / name), run_name="example")   # not "__main__": main(workdir) is called here
    result = ns["main"](str(tmp_path))
    CHECKS[name](result, capsys.readouterr().out)

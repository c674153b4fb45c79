"""The docstring examples of the package run, and print what they show (issue 17)."""
from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "streamrank"


def _modules_with_examples():
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        if ">>>" not in path.read_text(encoding="utf-8"):
            continue
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append(".".join(parts))
    return out


MODULES = _modules_with_examples()


def test_the_public_modules_have_examples():
    assert {"streamrank.rankrls.linear", "streamrank.sgd.bilinear", "streamrank.io.sources"} <= set(MODULES)


# streamrank.plot's examples draw with matplotlib (6.3 s wall under load 13, most of it importing matplotlib):
# make test runs them, the quick loop imports no matplotlib at all
_SLOW_DOCTESTS = {"streamrank.plot"}


@pytest.mark.parametrize("name", [pytest.param(m, marks=pytest.mark.slow) if m in _SLOW_DOCTESTS else m
                                  for m in MODULES])
def test_docstring_examples_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)                  # examples that write files write them here
    mod = importlib.import_module(name)
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False,
                          report=True)
    assert res.attempted > 0, f"{name} shows '>>>' but doctest found no example"
    assert res.failed == 0, f"{res.failed} of {res.attempted} examples of {name} failed (output above)"

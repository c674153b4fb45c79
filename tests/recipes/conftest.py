"""Shared helpers of the recipe tests: load a recipe script, skip when the real data is missing."""
from __future__ import annotations

import importlib.util
import pathlib

import pytest
from recipes_testdata import DATA, need  # noqa: F401  (re-exported for fixtures)

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load(name):
    spec = importlib.util.spec_from_file_location(f"recipe_{name}", ROOT / "data_recipes" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def recipe():
    return _load

"""Shared helpers of the recipe tests: load a recipe script, skip when the real data is missing."""
from __future__ import annotations

import importlib.util
import pathlib

import pytest
from recipes_testdata import DATA, need  # noqa: F401  (re-exported for fixtures)

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load(name):
    return importlib.import_module(f"streamrank.recipes.{name}")


@pytest.fixture
def recipe():
    return _load

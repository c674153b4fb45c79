"""``streamrank nightly|distributed|recipe NAME``: the pipelines' and recipes' own ``main(argv)`` behind the
``streamrank`` command (issue 24), in process; the installed command is run by tests/packaging/test_wheel.py."""
from __future__ import annotations

import pytest

import streamrank as sr
from streamrank.cli import main
from streamrank.cli._delegate import PIPELINES, RECIPE_HELP
from streamrank.recipes import RECIPES


def test_top_level_help_lists_the_delegated_commands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in (*PIPELINES, "recipe"):
        assert f"\n    {name}" in out, name
    assert list(RECIPE_HELP) == list(RECIPES)    # one list of recipes


@pytest.mark.parametrize("command", ["nightly", "distributed"])
def test_pipeline_help_is_the_modules_parser(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: streamrank {command} ") and "--store" in out


def test_pipeline_usage_error_is_exit_2(capsys):
    assert main(["nightly", "--store", "s.zarr"]) == 2          # --new and --models missing
    assert "streamrank nightly: error:" in capsys.readouterr().err


def test_recipe_listing_and_unknown_recipe(capsys):
    assert main(["recipe"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in RECIPES)
    assert main(["recipe", "no-such"]) == 2
    err = capsys.readouterr().err
    assert "unknown recipe 'no-such'" in err and "synthetic" in err


def test_recipe_runs_the_module(tmp_path, capsys):
    out = tmp_path / "s.zarr"
    assert main(["recipe", "synthetic", "--rows", "300", "--features", "4", "--out", str(out)]) == 0
    assert "Citation:" in capsys.readouterr().out
    store = sr.GroupStore.open(out)
    assert store.n_rows == 300 and store.n_features == 4
    assert main(["recipe", "synthetic", "--rows", "x", "--out", str(out)]) == 2   # the recipe's own usage error
    assert "streamrank recipe synthetic: error:" in capsys.readouterr().err

"""The help of every command names no document outside the repository and no issue of the tracker (a user has
neither): ``streamrank COMMAND --help`` and ``streamrank recipe NAME --help``."""
from __future__ import annotations

import re

import pytest

from _cli_inproc import run_cli

COMMANDS = ["", "ingest", "info", "fit", "evaluate", "predict", "export", "cv", "plot", "warmup", "nightly", "distributed",
            "recipe", "recipe synthetic", "recipe letor", "recipe clicks", "recipe newsgroups", "recipe mnist",
            "recipe reuters"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_cites_no_outside_document(command):
    rc, out, err = run_cli(*command.split(), "--help")          # "": streamrank --help
    assert rc == 0, err
    text = out + err
    assert "usage:" in text
    assert not re.search(r"DESIGN(\.md)?\s*§|\b[Ii]ssues? #?\d+", text), text

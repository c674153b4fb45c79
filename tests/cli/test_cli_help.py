"""``streamrank --help`` shows the usage lines the package docstring shows (one text, kept in ``cli._app``)."""
from __future__ import annotations

import streamrank.cli as cli
from streamrank.cli._app import SYNOPSIS, build_parser


def test_help_synopsis_is_the_package_docstrings():
    assert "::\n\n" + SYNOPSIS + "\n\n" in cli.__doc__
    assert SYNOPSIS in build_parser().format_help()

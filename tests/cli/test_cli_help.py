"""``streamrank --help`` shows the usage lines of every command (``cli._app.SYNOPSIS``)."""
from __future__ import annotations

from streamrank.cli._app import SYNOPSIS, build_parser


def test_help_shows_the_synopsis_of_every_command():
    text = build_parser().format_help()
    assert SYNOPSIS in text
    for command in ("ingest", "info", "fit", "evaluate", "predict", "export", "cv", "plot", "nightly",
                    "distributed", "recipe"):
        assert f"    streamrank {command} " in SYNOPSIS, command

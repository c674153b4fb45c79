"""``streamrank.cli.main`` run in the test's own process with its output captured (the console script's code
without its start-up cost), for the CLI test modules.  Commands that must be real processes are run with
subprocess by the tests themselves."""
from __future__ import annotations

import contextlib
import io
import os


def run_cli(*args, env=None):
    """``cli.main(args)`` with ``env`` set for the call only; returns ``(exit code, stdout, stderr)``."""
    from streamrank import cli

    out, err = io.StringIO(), io.StringIO()
    old = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main([str(a) for a in args])
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return rc, out.getvalue(), err.getvalue()

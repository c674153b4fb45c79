"""The pipelines import only public names from the rest of the package (issue 17).

Rule: a ``from streamrank.X import Y`` (or relative ``from ..X import Y``) in
``streamrank/pipelines/`` that leaves the pipelines package may not name a
private module (a dotted part starting with ``_``: ``streamrank.io._remote``)
nor a private name (``_writer_alive``).  Private modules inside the pipelines
package itself (``streamrank.pipelines._nightly_*``) are fine, and so is
``streamrank._phases``: the progress-phase hook every layer reports through
(learners, io, CLI, pipelines; a no-op without a reporter), floor 0 — an
instrumentation point, not a piece of another package's implementation.

Not all of it is done: the imports in ``REMAINING`` still reach into private
modules of the CLI (exit codes, ingest helpers, the progress display), io
(object-storage leases), and one top-level helper (``with_last``).  The test
pins that list exactly — a new private import fails it, and so does removing
one without removing it here — so it can only shrink.
"""
from __future__ import annotations

import ast
from pathlib import Path

import streamrank as sr

PIPELINES = Path(sr.__file__).parent / "pipelines"
PACKAGE = "streamrank.pipelines"
SHARED_HOOKS = {"streamrank._phases"}      # see the module docstring

REMAINING = {
    ("_errors.py", "streamrank.cli._app", "_exit_code"),
    ("_errors.py", "streamrank.cli._common", "EXIT_BUG"),
    ("_errors.py", "streamrank.cli._common", "EXIT_SIGINT"),
    ("_nightly_ingest.py", "streamrank._itertools", "with_last"),
    ("_nightly_ingest.py", "streamrank.io._remote", "Remote"),
    ("_nightly_ingest.py", "streamrank.io._remote", "is_url"),
    ("_nightly_ingest.py", "streamrank.cli._ingest", "_offending_row"),
    ("_nightly_ingest.py", "streamrank.cli._ingest", "copy_tuple_store"),
    ("_nightly_remote.py", "streamrank.io._remote", "PreconditionFailed"),
    ("_nightly_remote.py", "streamrank.io._remote", "Remote"),
    ("_nightly_remote.py", "streamrank.io._remote", "is_url"),
    ("_nightly_remote.py", "streamrank.io._lease", "WriterLease"),
    ("_nightly_remote.py", "streamrank.io._lease", "WriterLockHeld"),
    ("_nightly_remote.py", "streamrank.io._lease", "LeaseLost"),
    ("nightly.py", "streamrank.io._remote", "is_url"),
    # the nightly's progress display (h24a, session 8)
    ("_nightly_cli.py", "streamrank.cli._progress", "PhaseReporter"),
    ("_nightly_cli.py", "streamrank.cli._progress", "Progress"),
}


def private_imports(path: Path, package: str = PACKAGE):
    """(file, module, name) of every import in ``path`` that leaves ``package`` for a private module or name."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                mod = ".".join(parts[: len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            pairs = [(mod, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            pairs = [(a.name.rpartition(".")[0], a.name.rpartition(".")[2]) for a in node.names]
        else:
            continue
        for mod, name in pairs:
            if not (mod == "streamrank" or mod.startswith("streamrank.")):
                continue
            if mod == package or mod.startswith(package + ".") or mod in SHARED_HOOKS:
                continue
            if any(p.startswith("_") for p in [*mod.split(".")[1:], name]):
                found.add((path.name, mod, name))
    return found


def test_the_rule_catches_both_forms(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from streamrank.persistence import _writer_alive\nfrom .._remote_models import x\n"
                     "from ._nightly_views import group_view\nfrom streamrank.metrics import ndcg\n"
                     "import streamrank.io._lease\n")
    assert private_imports(probe) == {("probe.py", "streamrank.persistence", "_writer_alive"),
                                      ("probe.py", "streamrank._remote_models", "x"),
                                      ("probe.py", "streamrank.io", "_lease")}


def test_pipelines_import_no_new_private_name():
    found = set().union(*(private_imports(p) for p in sorted(PIPELINES.rglob("*.py"))))
    assert found - REMAINING == set(), "a pipeline imports a private name: expose it (no underscore) instead"
    assert REMAINING - found == set(), "an import left the list: remove it from REMAINING too"

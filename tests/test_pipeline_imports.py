"""The pipelines import only public names from the rest of the package (issue 17).

Rule: a ``from streamrank.X import Y`` (or relative ``from ..X import Y``) in
``streamrank/pipelines/`` that leaves the pipelines package may not name a
private module (a dotted part starting with ``_``: ``streamrank.io._remote``)
nor a private name (``_writer_alive``).  Private modules inside the pipelines
package itself (``streamrank.pipelines._nightly_*``) are fine, and so is
``streamrank._phases``: the progress-phase hook every layer reports through
(learners, io, CLI, pipelines; a no-op without a reporter), floor 0 — an
instrumentation point, not a piece of another package's implementation.

What the pipelines need from the rest of the package has a public home: exit
codes and ``exit_code`` in :mod:`streamrank.cli`, the progress display as
``streamrank.cli.progress_reporting``, object storage and its repositories
(``is_url``, ``Remote``, ``RepoLocation``, ...) and ``with_last`` in
:mod:`streamrank.io`, ``offending_row`` in :mod:`streamrank.io.groups`,
``copy_tuple_store`` in :mod:`streamrank.io.tuple_copy`.  No private import
is left, and the test keeps it so.
"""
from __future__ import annotations

import ast
from pathlib import Path

import streamrank as sr

PIPELINES = Path(sr.__file__).parent / "pipelines"
SCRIPTS = Path(sr.__file__).parents[1] / "pipelines"      # the checkout's cron scripts (run the same main)
PACKAGE = "streamrank.pipelines"
SHARED_HOOKS = {"streamrank._phases"}      # see the module docstring

REMAINING: set = set()      # the private imports still allowed: none (it could only shrink)


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
    files = sorted(PIPELINES.rglob("*.py")) + sorted(SCRIPTS.glob("*.py"))
    assert len(files) > 10 and any(p.parent == SCRIPTS for p in files) or not SCRIPTS.is_dir()
    found = set().union(*(private_imports(p) for p in files))
    assert found - REMAINING == set(), "a pipeline imports a private name: expose it (no underscore) instead"
    assert REMAINING - found == set(), "an import left the list: remove it from REMAINING too"


def test_the_public_homes_are_the_implementations():
    """Each name the pipelines import has one definition, reached through its public home (no copy)."""
    import streamrank.io as io
    from streamrank import _itertools
    from streamrank.cli import _common
    from streamrank import _repo_models
    from streamrank.io import _icechunk_repo, _remote

    for name in ("is_url", "Remote"):
        assert getattr(io, name) is getattr(_remote, name)
    for name in ("RepoLocation", "CommitConflict", "open_location", "tag_branch_tip"):
        assert getattr(io, name) is getattr(_icechunk_repo, name)
    from streamrank import persistence

    for name in ("read_repo_model", "write_repo_model"):     # bound to persistence's reader/writer of a group
        assert getattr(persistence, name).func is getattr(_repo_models, name)
    from streamrank import _shared_paths

    assert io.open_lock_file is _shared_paths.open_lock_file
    assert io.refuse_foreign_link is _shared_paths.refuse_foreign_link
    assert io.with_last is _itertools.with_last
    assert set(io.__all__) <= set(dir(io))
    try:
        io.no_such_name
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("streamrank.io invented an attribute")
    import streamrank.cli as cli

    assert cli.exit_code is _common.exit_code
    assert [getattr(cli, f"EXIT_{n}") for n in ("OK", "BUG", "USAGE", "NOT_FOUND", "DATA", "WRITE",
                                                 "UNSUPPORTED", "QUARANTINED", "SIGINT",
                                                 "SIGTERM")] == sorted(cli.EXIT_CODES)
    assert cli.exit_code(cli.UsageError("x")) == cli.EXIT_USAGE
    assert cli.exit_code(RuntimeError("store is locked: one writer at a time")) == cli.EXIT_WRITE

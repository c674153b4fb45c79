"""The documentation site builds with ``mkdocs build --strict`` (issue 24): a broken link, anchor or
cross-reference, an API page naming an object that does not exist, or a docstring griffe cannot parse fails it.

mkdocstrings reads the sources statically (griffe), so the build imports no numba and compiles nothing.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow                    # one mkdocs build in a subprocess (~10 s CPU)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if not os.environ.get("CI"):                  # CI installs the docs extra (Makefile): there it must build
        for mod in ("mkdocs", "mkdocstrings", "material"):
            pytest.importorskip(mod, reason="the docs extra is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=REPO,
                       capture_output=True, text=True, timeout=600, env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    return out


def test_docs_build_strict_with_every_page(site):
    for page in ("getting-started", "data-formats", "learners", "nightly", "clusters", "serving", "changelog",
                 "api/learners", "api/stores", "api/pipelines"):
        assert (site / page / "index.html").is_file(), page
    api = (site / "api" / "learners" / "index.html").read_text()
    assert "alpha" in api and "RankRLS" in api and "Pahikkala" in api       # rendered from the docstrings
    assert ":class:`" not in api and ":meth:`" not in api                   # Sphinx roles shown as code
    assert "Unreleased" in (site / "changelog" / "index.html").read_text()  # CHANGELOG.md is included


def test_sphinx_roles_become_code():
    sys.path.insert(0, str(REPO / "docs"))
    try:
        from sphinx_roles import convert
    finally:
        sys.path.remove(str(REPO / "docs"))
    assert convert("see :class:`~streamrank.GroupStore` and :func:`parse_grid`") == \
        "see `GroupStore` and `parse_grid`"
    assert convert(":py:meth:`.RankRLS.path`, :ref:`the guide <guide>`") == "`RankRLS.path`, `the guide`"


def test_roles_in_docstrings_are_checked_links(site):
    """A role to an object the site renders is a link to it; the build above is strict, so every role in the
    package's docstrings resolved (a broken one fails it, next test)."""
    learners = (site / "api" / "learners" / "index.html").read_text()
    # RankRLS's docstring: :mod:`streamrank.normalize` -> the building-blocks page, where the module is rendered
    assert 'href="../building-blocks/#streamrank.normalize"' in learners, "no link to streamrank.normalize"
    stores = (site / "api" / "stores" / "index.html").read_text()
    assert 'href="#streamrank.io.blocks.Block"' in stores                 # BlockSource -> Block, same page


MINI = '''"""A tiny package for the roles test.

See :class:`~mini.core.Thing` and :func:`helper`; {extra}.
"""
from mini.core import Thing  # noqa: F401


def helper():
    """Helps."""
'''


def _mini_site(tmp_path, extra):
    pkg = tmp_path / "mini"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(MINI.format(extra=extra))
    (pkg / "core.py").write_text('"""Core."""\n\n\nclass Thing:\n    """A thing."""\n\n\n'
                                 'class Hidden:\n    """Public, but on no page of the site."""\n')
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Mini\n\n::: mini\n\n::: mini.core.Thing\n")
    (tmp_path / "mkdocs.yml").write_text(f"""site_name: mini
strict: true
plugins:
  - autorefs
  - mkdocstrings:
      handlers:
        python:
          paths: [.]
          options:
            docstring_style: numpy
            extensions:
              - {REPO / "docs" / "sphinx_roles.py"}:SphinxRoles
""")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))


@pytest.mark.parametrize("extra,code,words", [
    ("numpy's :class:`numpy.ndarray`", 0, None),                                # another project's: code
    ("and :class:`mini.core.Nothing`", 1, ":class:`mini.core.Nothing` names nothing in mini"),
    ("and :meth:`Thing.nope`", 1, ":meth:`Thing.nope` names nothing in mini"),
    ("and :class:`mini.core.Hidden`", 1, "Could not find cross-reference target 'mini.core.Hidden'"),
])
def test_a_broken_role_fails_the_strict_build(tmp_path, extra, code, words):
    for mod in ("mkdocs", "mkdocstrings", "material"):
        pytest.importorskip(mod, reason="the docs extra is not installed (pip install -e '.[docs]')")
    r = _mini_site(tmp_path, extra)
    assert r.returncode == code, r.stderr[-3000:]
    if words is not None:
        assert words in r.stderr, r.stderr[-3000:]
    else:
        html = (tmp_path / "site" / "index.html").read_text()
        assert 'href="#mini.core.Thing"' in html                 # ~mini.core.Thing: a link, shown as "Thing"
        assert 'href="#mini.helper"' in html                     # a name relative to the module
        assert "<code>numpy.ndarray</code>" in html and ":class:" not in html

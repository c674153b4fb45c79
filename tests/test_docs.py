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

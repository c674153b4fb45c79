"""The documentation site builds with ``mkdocs build --strict`` (issue 24): a broken link, anchor or
cross-reference, an API page naming an object that does not exist, or a docstring griffe cannot parse fails it.

mkdocstrings reads the sources statically (griffe), so the build imports no numba and compiles nothing.
"""
from __future__ import annotations

import html
import os
import re
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


#: what a page of the built site must not show (the text of its HTML, tags removed)
_FORBIDDEN = {
    "a reStructuredText table (a row of ===== columns)": re.compile(r"={3,}[ \t]+={3,}"),
    "a heading underline (a line of -, = or ~)": re.compile(r"(?m)^[ \t]*(?:-{3,}|={3,}|~{3,})[ \t]*$"),
    "a literal double backtick": re.compile(r"``"),
    "a reference to DESIGN.md, a document outside the repository": re.compile(r"DESIGN(?:\.md)?\s*§"),
    "a reference to an issue of the tracker": re.compile(r"\b[Ii]ssues? #?\d+"),
}
#: the changelog records which issue each change closed: its "issue N" references are the record
_ISSUES_ALLOWED = {"changelog"}


def _text(html_page: str) -> str:
    """The text a reader sees: scripts, styles and tags removed, entities decoded."""
    body = re.sub(r"(?s)<(script|style)\b.*?</\1>", "", html_page)
    return html.unescape(re.sub(r"<[^>]+>", "", body))


def site_problems(site: Path) -> list[str]:
    """Every rendering problem of a built site, as ``page: what (excerpt)`` (see the module doc)."""
    out = []
    for page in sorted(site.rglob("*.html")):
        rel = page.relative_to(site).parent.as_posix() or "index"
        raw = page.read_text(encoding="utf-8")
        text = _text(raw)
        for what, pat in _FORBIDDEN.items():
            if "issue" in what and rel in _ISSUES_ALLOWED:
                continue
            for m in pat.finditer(text):
                out.append(f"{rel}: {what}: {text[max(0, m.start() - 60):m.end() + 40]!r}")
        prose = _text(re.sub(r"(?s)<(pre|code)\b.*?</\1>", "", raw))     # outside code: reST's literal marker
        for m in re.finditer(r"\w::(?=\s|$)", prose):
            out.append(f"{rel}: a reStructuredText literal-block marker (::): {prose[max(0, m.start() - 60):m.end()]!r}")
        for m in re.finditer(r"<h([1-6])\b[^>]*>", raw):       # a docstring line read as a Markdown heading
            if m.group(1) != "1" and "doc-heading" not in m.group(0) and rel.startswith("api/"):
                out.append(f"{rel}: a heading inside a docstring: {raw[m.start():m.start() + 160]!r}")
        for m in re.finditer(r'<tr class="doc-section-item">\s*<td><code>(.*?)</code></td>(.*?)</tr>', raw, flags=re.S):
            if re.search(r'<div class="doc-md-description">\s*</div>', m.group(2)):
                out.append(f"{rel}: a public name without a description: {_text(m.group(1)).strip()}")
        for m in re.finditer(r'<div class="doc doc-contents[^"]*">\s*</div>', raw):
            out.append(f"{rel}: an object without a docstring: {raw[max(0, m.start() - 300):m.start()]!r}")
    out += [f"{p.relative_to(site)}: a __pycache__ directory is published" for p in site.rglob("__pycache__")]
    return out


def test_the_site_renders_cleanly(site):
    """No reStructuredText table, heading underline or literal-block marker, no literal double backtick, no
    reference to a document or issue outside the repository, no public name without a description, no
    __pycache__."""
    problems = site_problems(site)
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])


BAD_DOCSTRINGS = {
    "reStructuredText table": "A table.\n\n=====  =====\nname   value\n=====  =====\na      1\n=====  =====\n",
    "double backtick": "See it.\n\nParameters\n----------\nx : ``int``, the value\n",
    "DESIGN.md": "Nightly runs (DESIGN §1).\n",
    "issue of the tracker": "Fast again (issue 22).\n",
    "heading inside a docstring": "The error.\n\nFor a query, ``(#{a} + w #{b}) /\n#{c}`` with w.\n",
    "without a description": "A class.\n\nAttributes\n----------\ncoef_ : ndarray\n",
    "literal-block marker": "A class.\n\nExample::\n\n    x = 1\n",
}


def test_each_badly_rendering_docstring_fails_the_check(tmp_path):
    """Each rule of ``site_problems`` catches the docstring it is written against, rendered by the real
    mkdocs/mkdocstrings (a check that passed everything would pass the site too); a clean one passes."""
    for mod in ("mkdocs", "mkdocstrings", "material"):
        pytest.importorskip(mod, reason="the docs extra is not installed (pip install -e '.[docs]')")
    (tmp_path / "mini").mkdir()
    classes = {f"Bad{i}": doc for i, doc in enumerate(BAD_DOCSTRINGS.values())}
    classes["Good"] = "A class.\n\nAttributes\n----------\ncoef_ : ndarray\n    The weights, ``w``.\n"
    (tmp_path / "mini" / "__init__.py").write_text('"""Mini."""\n' + "".join(
        f'\n\nclass {name}:\n    """{doc}"""\n' for name, doc in classes.items()))
    (tmp_path / "docs" / "api").mkdir(parents=True)
    (tmp_path / "docs" / "index.md").write_text("# Mini\n")
    for name in classes:
        (tmp_path / "docs" / "api" / f"{name}.md").write_text(f"# {name}\n\n::: mini.{name}\n")
    (tmp_path / "mkdocs.yml").write_text(MINI_YML)
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--site-dir", str(tmp_path / "site")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    problems = site_problems(tmp_path / "site")
    for i, what in enumerate(BAD_DOCSTRINGS):
        assert any(p.startswith(f"api/Bad{i}:") and what in p for p in problems), (what, problems)
    assert not [p for p in problems if p.startswith("api/Good")], problems


def _mini_config(head: str, options: str) -> str:
    """The mkdocs.yml of a one-package test site: ``head`` (theme, strict) and mkdocstrings ``options`` lines."""
    return f"""site_name: mini
{head}plugins:
  - autorefs
  - mkdocstrings:
      handlers:
        python:
          paths: [.]
          options:
            docstring_style: numpy
{options}"""


MINI_YML = _mini_config("theme:\n  name: material\n", "            show_root_heading: true\n"
                        "            show_source: false\nmarkdown_extensions:\n  - tables\n")


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
    (tmp_path / "mkdocs.yml").write_text(_mini_config(
        "strict: true\n", f"            extensions:\n              - {REPO / 'docs' / 'sphinx_roles.py'}:SphinxRoles\n"))
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

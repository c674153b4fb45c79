"""A griffe extension for the docs site: the docstrings' Sphinx roles (``:class:`~streamrank.GroupStore```) as code.

streamrank's docstrings are numpy-style and cross-reference with Sphinx roles; mkdocstrings renders Markdown,
where a role would show as its raw text.  A role becomes inline code of the name it shows (``~`` drops the
module path, as in Sphinx).
"""
from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const|ref|doc):`(~?)([^`]+)`")


def _shown(match: re.Match) -> str:
    tilde, target = match.groups()
    if "<" in target and target.endswith(">"):          # :ref:`text <target>`
        return f"`{target.split('<')[0].strip()}`"
    target = target.lstrip(".")
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


def convert(text: str) -> str:
    return ROLE.sub(_shown, text)


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = convert(obj.docstring.value)

"""A griffe extension for the docs site: the docstrings' Sphinx roles (``:class:`~streamrank.GroupStore```) become
cross-references that ``mkdocs build --strict`` checks.

streamrank's docstrings are numpy-style and cross-reference with Sphinx roles; mkdocstrings renders Markdown,
where a role would show as its raw text.  Once the whole package is loaded (``on_package``), every role's target
is resolved as Sphinx would (a full path, a name relative to the documented object's class and module or
imported there, ``.name`` anywhere in the package) to the object's canonical path, and the role becomes:

* a required autoref ``[`Name`][streamrank.path.Name]`` when the object is public (an attribute, or an object
  without a docstring, links to its class or module, where the site describes it): if the site renders it, a
  link; if it does not, autorefs reports the unresolved reference and the strict build fails (an object a
  docstring points users to belongs in the API reference);
* an optional autoref for a private object (``_``-prefixed anywhere in its path; the site never renders
  them): a link never, its name as code, but the name was still checked to exist;
* inline code for other packages' names (numpy, dask, the standard library...): not checked;
* and a target that names nothing in streamrank is a warning, which ``--strict`` turns into a failed build.

The text shown is the role's (``~`` drops the module path, as in Sphinx).
"""
from __future__ import annotations

import logging
import re

import griffe

ROLE = re.compile(r":(?:py:)?(?P<role>class|func|meth|mod|attr|data|exc|obj|const|ref|doc):"
                  r"`(?P<tilde>~?)(?P<target>[^`]+)`")
#: first components of names that belong to other projects (shown as code, not checked)
EXTERNAL = {"numpy", "np", "scipy", "sp", "dask", "distributed", "zarr", "pandas", "pd", "pyarrow", "sklearn",
            "fsspec", "s3fs", "onnx", "onnxruntime", "matplotlib", "numba", "tqdm", "griffe", "mkdocs", "os", "io",
            "sys", "gc", "pathlib", "typing", "collections", "contextlib", "concurrent", "threading", "logging",
            "tempfile", "json", "gzip", "tarfile", "signal", "subprocess", "argparse", "dataclasses", "abc",
            "float", "int", "str", "bytes", "bool", "dict", "list", "tuple", "set", "object", "None", "True",
            "False", "Exception", "ValueError", "TypeError", "KeyError", "RuntimeError", "OSError",
            "NotImplementedError", "ImportError", "ModuleNotFoundError",
            "FileNotFoundError", "FileExistsError", "KeyboardInterrupt", "Warning",
            "UserWarning", "DeprecationWarning", "FloatingPointError", "StopIteration", "memoryview", "range",
            "slice", "type", "callable", "iter", "next", "len", "open"}

log = logging.getLogger("mkdocs.plugins.streamrank_sphinx_roles")


def _shown(tilde: str, target: str) -> str:
    if "<" in target and target.endswith(">"):          # :ref:`text <target>`
        return target.split("<")[0].strip()
    target = target.lstrip(".")
    return target.rsplit(".", 1)[-1] if tilde else target


def convert(text: str, resolve=None) -> str:
    """``text`` with every role replaced: ``resolve(role, target) -> (kind, path)`` with kind "public",
    "private", "external" or "broken" (see the module doc); without ``resolve`` every role becomes code."""

    def one(m: re.Match) -> str:
        role, tilde, target = m["role"], m["tilde"], m["target"]
        shown = _shown(tilde, target)
        if resolve is None or role in ("ref", "doc"):
            return f"`{shown}`"
        kind, path = resolve(role, target.strip())
        if kind == "public":
            return f"[`{shown}`][{path}]"
        if kind == "private":
            return f'<autoref identifier="{path}" optional><code>{shown}</code></autoref>'
        return f"`{shown}`"

    return ROLE.sub(one, text)


class _Resolver:
    """Names of the package (its canonical paths, its aliases followed) and the rules of the module doc."""

    def __init__(self, pkg: griffe.Module):
        self.pkg = pkg
        self.by_name: dict[str, list[str]] = {}
        self._index(pkg, set())

    def _index(self, obj, seen):
        if obj.path in seen:
            return
        seen.add(obj.path)
        self.by_name.setdefault(obj.name, []).append(obj.path)
        for member in obj.members.values():
            if not member.is_alias:
                self._index(member, seen)

    def lookup(self, path: str):
        """The canonical path of ``path`` (a dotted name from the package root, aliases followed), or None."""
        parts = path.split(".")
        if parts[0] != self.pkg.name:
            return None
        obj = self.pkg
        for name in parts[1:]:
            try:
                obj = (obj.all_members if obj.is_class else obj.members)[name]   # a class: inherited too
            except (KeyError, AttributeError):
                return None
            if obj.is_alias:
                try:
                    obj = obj.final_target
                except Exception:       # an alias to another project (numpy...) or a broken import
                    return None
        if obj.is_attribute:            # documented in its class's or module's text, not under a heading
            obj = obj.parent
        while obj.docstring is None and not obj.is_module:   # the site shows no heading for it: its owner's
            obj = obj.parent
        return obj.path

    def __call__(self, obj, role: str, target: str):
        t = target.lstrip(".")
        first = t.split(".")[0]
        path = self.lookup(t)
        if path is None and not target.startswith("."):
            scope = obj
            while scope is not None and path is None:          # relative to the class, the module, its parents
                path = self.lookup(f"{scope.path}.{t}")
                if path is None and scope.is_module and first in scope.imports:
                    imported = scope.imports[first]
                    path = self.lookup(imported + t[len(first):])
                scope = scope.parent
        if path is None and first not in EXTERNAL:
            last = t.rsplit(".", 1)[-1]                        # Sphinx's ".name": anywhere in the package
            if first == self.pkg.name:                         # a re-export griffe cannot follow (lazy
                head = t.rsplit(".", 1)[0]                     # __getattr__): the name in that package
                hits = [p for p in self.by_name.get(last, ()) if p.startswith(head + ".")]
            else:                                              # "Class.member": the class, anywhere
                hits = [p + t[len(first):] for p in self.by_name.get(first, ())]
            hits = [p for p in (self.lookup(h) for h in sorted(hits, key=len)) if p is not None]
            if hits:
                path = hits[0]
        if path is None:
            if first in EXTERNAL or (first != self.pkg.name and not first[:1].isupper() and "." in t):
                return "external", t
            log.warning("docs: %s's docstring: :%s:`%s` names nothing in %s", obj.path, role, target, self.pkg.name)
            return "broken", t
        private = any(p.startswith("_") for p in path.split(".")[1:])
        return ("private" if private else "public"), path


class SphinxRoles(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        resolver = _Resolver(pkg)
        stack, seen = [pkg], set()
        while stack:
            obj = stack.pop()
            if obj.path in seen:
                continue
            seen.add(obj.path)
            if obj.docstring is not None:
                obj.docstring.value = convert(obj.docstring.value, lambda role, t, o=obj: resolver(o, role, t))
            stack.extend(m for m in obj.members.values() if not m.is_alias)

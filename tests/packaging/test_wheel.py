"""The installed product (issue 24): the wheel built from this checkout, installed in a fresh virtual environment
outside the repository, runs every command the README shows exactly as written; building and installing it
prints no warning.

What makes it affordable on 2 cold cores:

* the wheel is built offline with this environment's setuptools (``--no-build-isolation --no-index``), once;
* its dependencies are **resolved by pip from the wheel's Requires-Dist**, as ``pip install streamrank-*.whl``
  resolves them, against a package index made of this environment's installed distributions: a PEP 503 simple
  index on disk whose links carry PEP 658 metadata (each distribution's own METADATA), so ``pip install
  --dry-run --report`` resolves from metadata alone and downloads no wheel (~5 s);
* the venv then holds exactly what pip resolved: streamrank installed from the wheel, and every resolved
  distribution's installed files (its RECORD) linked in, nothing else; ``pip check`` verifies the result.
  A dependency missing from pyproject is missing from the venv, and the README commands fail
  (``test_a_dependency_missing_from_the_wheel_is_missing_from_the_venv`` shows it with a doctored wheel);
* the venv lives at a path keyed by the wheel's RECORD and the resolved set, and is reused while both are
  unchanged, so numba's cache (keyed by the installed sources' path) stays warm between runs; a fresh install
  into a throwaway venv is still made every time by the warnings test;
* with ``NUMBA_CACHE_DIR`` set (CI), the installed package's cache folders in it are this checkout's: numba
  stamps each entry with the sha256 of its source file, so the installed copy of a kernel loads what the rest
  of the suite compiled from the identical source (and the suite loads what the README commands compiled),
  instead of compiling every kernel a second time (~20 CPU-s on a cold cache).  A source that differs is
  compiled anew, as numba does for a changed file.  The commands' outputs do not depend on whether a kernel
  was loaded or compiled; compiling into an empty cache is tested in tests/core/test_start_up.py and by
  ``streamrank warmup``'s test.

Every fenced block of README.md and docs/*.md runs in reading order (the README, then the site's pages in
mkdocs.yml's order) in one fresh directory outside the repository, from the real data ``STREAMRANK_DATA`` names;
only the install commands are not run (a known list: a new one fails ``test_documented_blocks_are_known``), and a
block in another language than bash, python or text (shown, not run) fails, so no documented command goes
untested.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
# Every test here but test_readme_sections_are_known builds the wheel or a venv (pip, minutes) and is marked slow;
# that one reads the README only, so the quick loop checks that a new README section is known.

def _run(argv, **kw):
    # no checkout on PYTHONPATH (a developer's or a test runner's): pip would take it for an installed streamrank
    # and skip the wheel's install ("already installed with the same version"), and the venv would import it
    kw.setdefault("env", {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")})
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def _warnings(text: str) -> list[str]:
    # this machine's pip configuration names an index directory that may not exist; that is not ours
    return [ln for ln in text.splitlines() if re.search(r"warn|deprecat", ln, re.I)
            and "is ignored: it is neither a file nor a directory" not in ln]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    r = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
              "-w", str(out), str(REPO)], timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (whl,) = out.glob("streamrank-*.whl")
    return whl, r.stdout + r.stderr


def _site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


#: the extras the documented blocks need: those the README's install line names (``pip install '.[a,b]'``)
README_EXTRAS = sorted({e for m in re.findall(r"'\.\[([a-z0-9_,-]+)\]'", README.read_text()) for e in m.split(",")})


def _installed_index(root: Path) -> str:
    """A PEP 503 simple index of this environment's installed distributions with PEP 658 metadata: pip
    resolves against it from each distribution's METADATA and never asks for the (absent) wheel files."""
    import importlib.metadata as md

    from packaging.tags import sys_tags
    from packaging.utils import canonicalize_name

    ok = {str(t) for t in sys_tags()}
    (root / "files").mkdir(parents=True, exist_ok=True)
    for d in md.distributions():
        name = d.metadata["Name"]
        meta = d.read_text("METADATA")
        if not name or meta is None or canonicalize_name(name) == "streamrank":   # the checkout's editable one
            continue
        tags = [ln.split(":", 1)[1].strip() for ln in (d.read_text("WHEEL") or "").splitlines()
                if ln.startswith("Tag:")] or ["py3-none-any"]
        tag = next((t for t in tags if t in ok), None)
        if tag is None:
            continue
        fn = f"{re.sub(r'[-_.]+', '_', name)}-{d.version}-{tag}.whl"
        (root / "files" / f"{fn}.metadata").write_bytes(meta.encode())
        digest = hashlib.sha256(meta.encode()).hexdigest()
        page = root / "simple" / canonicalize_name(name)
        page.mkdir(parents=True, exist_ok=True)
        (page / "index.html").write_text(f'<html><body><a href="../../files/{fn}" data-dist-info-metadata='
                                         f'"sha256={digest}" data-core-metadata="sha256={digest}">{fn}</a>'
                                         "</body></html>\n")
    return (root / "simple").as_uri()


def _resolve(whl: Path, index: str, work: Path) -> dict:
    """``{name: version}`` pip resolves for ``whl[README_EXTRAS]`` from ``index`` (nothing installed)."""
    import json

    spec = f"{whl}[{','.join(README_EXTRAS)}]" if README_EXTRAS else str(whl)
    report = work / "resolution.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    r = _run([sys.executable, "-m", "pip", "--isolated", "install", "--dry-run", "--ignore-installed",
              "--no-cache-dir", "--index-url", index, "--report", str(report), spec], timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    got = {i["metadata"]["name"]: i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
    return {k: v for k, v in got.items() if k.lower() != "streamrank"}


@pytest.fixture(scope="module")
def resolved(wheel, tmp_path_factory):
    work = tmp_path_factory.mktemp("index")
    return _resolve(wheel[0], _installed_index(work), work)


def _link_distributions(venv: Path, dists: dict) -> None:
    """Each resolved distribution's installed files (top-level entries of its RECORD) linked into the venv."""
    import importlib.metadata as md

    site = _site_packages(venv)
    for name, version in dists.items():
        d = md.distribution(name)
        assert d.version == version, (name, d.version, version)
        assert d.files, f"{name} has no RECORD: cannot tell its files"
        for top in sorted({f.parts[0] for f in d.files if f.parts[0] not in ("..", "__pycache__")}):
            src, dst = Path(d.locate_file(top)), site / top
            if src.exists() and not dst.exists():
                dst.symlink_to(src, target_is_directory=src.is_dir())


def _make_venv(venv: Path, whl: Path, dists: dict) -> str:
    """A venv holding streamrank from ``whl`` and exactly ``dists``; returns pip's output of the install."""
    r = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=300)
    assert r.returncode == 0, r.stderr
    _link_distributions(venv, dists)
    r = _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps",
              "--no-index", "--no-cache-dir", str(whl)], timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout + r.stderr


@pytest.fixture(scope="module")
def venv(wheel, resolved):
    """The installed product, at a path keyed by the wheel's content and its resolved dependencies (reused
    while they are unchanged)."""
    whl, _ = wheel
    with zipfile.ZipFile(whl) as z:
        record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        key = hashlib.sha256(z.read(record) + sys.executable.encode() + repr(sorted(resolved.items())).encode()
                             ).hexdigest()[:16]
    root = Path(tempfile.gettempdir()) / f"streamrank-wheel-venvs-{os.getuid()}"
    root.mkdir(exist_ok=True)
    for old in root.iterdir():                   # other sessions may use theirs: remove only day-old ones
        if not old.name.startswith(key) and time.time() - old.stat().st_mtime > 86400:
            shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink(missing_ok=True)
    venv = root / key
    with open(root / f"{key}.lock", "w") as lock:  # another session may be installing the same wheel
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / "installed").exists():    # absent or half made: (re)make it in place (scripts hold its path)
            shutil.rmtree(venv, ignore_errors=True)
            out = _make_venv(venv, whl, resolved)
            assert "Successfully installed streamrank" in out, out   # else a venv without it would be kept a day
            (venv / "installed").write_text(whl.name)
    os.utime(venv)
    _share_numba_cache(venv)
    return venv


def _share_numba_cache(venv: Path) -> None:
    """Point the installed streamrank's folders of ``NUMBA_CACHE_DIR`` at this checkout's (module doc)."""
    cache = os.environ.get("NUMBA_CACHE_DIR")
    if not cache:                                # each copy caches beside its own sources, as a user's does
        return
    try:
        from numba.core.caching import UserProvidedCacheLocator
    except ImportError:                          # another numba: each copy keeps its own entries
        return
    import streamrank

    here = Path(os.path.abspath(streamrank.__file__)).parent
    there = _site_packages(venv) / "streamrank"
    for d in [there, *sorted(p for p in there.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        src, dst = (Path(cache) / UserProvidedCacheLocator.get_suitable_cache_subpath(str(root / "k.py"))
                    for root in (here / d.relative_to(there), d))
        if not (here / d.relative_to(there)).is_dir() or dst.exists() or dst.is_symlink():
            continue                             # not a checkout folder, or already shared (or filled) here
        src.mkdir(parents=True, exist_ok=True)
        try:
            dst.symlink_to(src, target_is_directory=True)
        except FileExistsError:                  # made meanwhile by another process: it keeps its own
            pass


def _env(venv: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = str(venv / "bin") + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = str(venv)
    env["STREAMRANK_PROGRESS_SECONDS"] = "3600"  # no progress lines in the captured output
    return env


# ----------------------------------------------------------------------------------------- wheel contents
@pytest.mark.slow   # builds the wheel
def test_wheel_ships_the_pipelines_recipes_license_and_type_marker(wheel):
    whl, _ = wheel
    names = set(zipfile.ZipFile(whl).namelist())
    for mod in ("pipelines/nightly.py", "pipelines/distributed.py", "recipes/synthetic.py", "recipes/letor.py",
                "cli/_delegate.py", "py.typed"):
        assert f"streamrank/{mod}" in names, mod
    assert not [n for n in names if n.startswith(("pipelines/", "data_recipes/", "tests/", "benchmarks/"))]
    dist = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    assert f"{dist}/licenses/LICENSE" in names
    meta = zipfile.ZipFile(whl).read(f"{dist}/METADATA").decode()
    assert "License-Expression: BSD-3-Clause" in meta
    assert "streamrank = streamrank.cli:main" in zipfile.ZipFile(whl).read(f"{dist}/entry_points.txt").decode()
    assert "BSD 3-Clause License" in zipfile.ZipFile(whl).read(f"{dist}/licenses/LICENSE").decode()


@pytest.mark.slow   # builds the wheel and installs it
def test_build_and_fresh_install_print_no_warning(wheel, resolved, tmp_path):
    """The issue's setuptools license deprecation warning (printed three times by ``pip install``) is gone."""
    whl, build_output = wheel
    assert "Successfully built streamrank" in build_output
    assert _warnings(build_output) == [], build_output
    install_output = _make_venv(tmp_path / "fresh", whl, resolved)
    assert "Successfully installed streamrank" in install_output
    assert _warnings(install_output) == [], install_output
    py = tmp_path / "fresh" / "bin" / "python"
    r = _run([str(py), "-W", "error", "-c", "import streamrank, streamrank.cli, streamrank.pipelines, "
              "streamrank.recipes; print(streamrank.__file__)"], cwd=tmp_path, env=_env(tmp_path / "fresh"),
             timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert Path(r.stdout.strip()).is_relative_to(tmp_path / "fresh")
    r = _run([sys.executable, "-m", "pip", "--python", str(py), "check"], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr  # what pip resolved satisfies every requirement in the venv


@pytest.mark.slow   # pip resolves the wheel's requirements
def test_the_wheels_requirements_resolve_the_environment(wheel, resolved):
    """pip's resolution from the wheel's Requires-Dist: the core dependencies and the README's extras, and
    nothing the wheel does not ask for (the test tools stay out)."""
    import importlib.metadata as md

    meta = zipfile.ZipFile(wheel[0]).read(next(n for n in zipfile.ZipFile(wheel[0]).namelist()
                                               if n.endswith(".dist-info/METADATA"))).decode()
    core = [re.split(r"[<>=!~;\[ ]", ln.split(":", 1)[1].strip())[0] for ln in meta.splitlines()
            if ln.startswith("Requires-Dist:") and "extra ==" not in ln]
    names = {n.lower() for n in resolved}
    assert core and all(c.lower() in names for c in core), (core, sorted(names))
    assert "parquet" in README_EXTRAS and "pyarrow" in names           # the README's extras are resolved
    assert not names & {"pytest", "hypothesis", "ruff", "moto", "mkdocs"}  # test/docs tools are not
    for name, version in resolved.items():                              # the versions this environment has
        assert md.version(name) == version


@pytest.mark.slow   # builds a venv
def test_a_dependency_missing_from_the_wheel_is_missing_from_the_venv(wheel, tmp_path):
    """A wheel whose metadata forgets zarr (as a pyproject without it would build): pip's resolution leaves
    zarr out and the venv has no zarr (streamrank's stores cannot work there), while what it declares is in."""
    whl, _ = wheel
    bad = tmp_path / "w" / whl.name
    bad.parent.mkdir()
    with zipfile.ZipFile(whl) as zin, zipfile.ZipFile(bad, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            data = zin.read(item)
            if item.filename.endswith(".dist-info/METADATA"):
                lines = data.decode().splitlines(keepends=True)
                assert any(ln.startswith("Requires-Dist: zarr") for ln in lines)
                data = "".join(ln for ln in lines if not ln.startswith("Requires-Dist: zarr")).encode()
            zout.writestr(item, data)
    dists = _resolve(bad, _installed_index(tmp_path / "index"), tmp_path)
    assert "zarr" not in {n.lower() for n in dists} and "numpy" in {n.lower() for n in dists}
    _make_venv(tmp_path / "v", bad, dists)
    r = _run([str(tmp_path / "v" / "bin" / "python"), "-c", "import zarr"], cwd=tmp_path,
             env=_env(tmp_path / "v"), timeout=120)
    assert r.returncode != 0 and "No module named 'zarr'" in r.stderr, r.stderr
    r = _run([str(tmp_path / "v" / "bin" / "python"), "-c", "import numpy"], cwd=tmp_path,
             env=_env(tmp_path / "v"), timeout=120)
    assert r.returncode == 0, r.stderr                                  # what it declares is there


# ------------------------------------------------------------------------------- the documented blocks
def _doc_pages() -> list[Path]:
    """README.md, then the site's pages in the order of mkdocs.yml's nav (the API pages hold no blocks)."""
    nav = re.findall(r"^\s*-\s[^:\n]+:\s*(\S+\.md)\s*$", (REPO / "mkdocs.yml").read_text(), flags=re.M)
    pages = [REPO / "docs" / p for p in nav if not p.startswith("api/")]
    listed = {p.name for p in pages}
    missing = sorted(p.name for p in (REPO / "docs").glob("*.md") if p.name not in listed)
    assert not missing, f"docs pages not in mkdocs.yml's nav: {missing}"
    return [README, *pages]


#: the fences a page may use: run (bash, python) or shown (text: a crontab line, a directory tree)
RUN_LANGS, SHOWN_LANGS = {"bash", "python"}, {"text"}


def _blocks():
    """[(page, index, lang, code)] of every fenced block of the README and the docs pages, in reading order."""
    out = []
    for page in _doc_pages():
        for i, m in enumerate(re.finditer(r"^```([\w-]*)\n(.*?)^```", page.read_text(), flags=re.M | re.S)):
            out.append((page.relative_to(REPO).as_posix(), i, m.group(1), m.group(2)))
    return out


def _commands(code: str) -> list[list[str]]:
    text = re.sub(r"\\\n\s*", " ", code)          # continuation lines
    return [argv for ln in text.splitlines() if (argv := shlex.split(ln, comments=True))]


#: the install and checkout commands: the only bash lines that are not run as written (the test's venv is the
#: wheel built from this checkout, installed with DOC_EXTRAS; ``make`` runs in a checkout, not in the product)
SETUP_COMMANDS = {
    "make demo", "make test", "make quick",
    "pip install .", "pip install .[parquet]", "pip install .[export]", "pip install .[plot]",
    "pip install .[parquet,export,plot]",
    "pip wheel --no-deps -w dist . && pip install $(ls dist/streamrank-*.whl)[parquet]",
}


def _is_setup(lang: str, code: str) -> bool:
    if lang != "bash":
        return False
    cmds = [" ".join(a) for a in _commands(code)]
    setup = [c in SETUP_COMMANDS for c in cmds]
    assert all(setup) or not any(setup), f"a block mixes install commands with others: {cmds}"
    return all(setup)


def test_documented_blocks_are_known():
    """Every fenced block is run (bash, python), shown (text) or an install block of known commands; a block in
    another language, or an install block with a command this test does not know, fails (so none goes untested)."""
    blocks = _blocks()
    assert blocks
    for page, i, lang, _ in blocks:
        assert lang in RUN_LANGS | SHOWN_LANGS, f"{page} block {i}: fence {lang!r} (bash, python or text)"
    setup = [(page, i) for page, i, lang, code in blocks if _is_setup(lang, code)]
    assert setup == [("README.md", 0), ("README.md", 1), ("docs/getting-started.md", 0),
                     ("docs/contributing.md", 1)], setup
    assert sum(lang in RUN_LANGS for _, _, lang, _ in blocks) - len(setup) >= 15


def _data_dir() -> Path:
    """The real datasets, as the documented blocks find them: ``STREAMRANK_DATA``, else ``../shared/data``
    beside this checkout (the test sets ``STREAMRANK_DATA`` for the fresh directory the blocks run in)."""
    from streamrank.datasets._paths import data_dir

    return data_dir().resolve()


@pytest.mark.slow   # every documented block in the installed wheel's venv (minutes on 2 cold cores)
def test_every_documented_block_runs_as_written_from_the_installed_wheel(venv, tmp_path):
    """README.md and docs/*.md, block by block in reading order, in one fresh directory outside the repository:
    python blocks by the venv's python, bash blocks by bash (``streamrank`` is the wheel's console script on PATH),
    real data from ``STREAMRANK_DATA``.  The first block that fails fails the test, naming its page and line."""
    data = _data_dir()
    if not (data / "letor" / "MQ2008_QueryLevelNorm.tar.gz").exists():
        pytest.skip(f"MQ2008 archive not available in {data}")
    d = tmp_path / "work"
    d.mkdir()
    assert not d.resolve().is_relative_to(REPO)
    env = dict(_env(venv), STREAMRANK_DATA=str(data))
    outputs = {}
    for page, i, lang, code in _blocks():
        if lang not in RUN_LANGS or _is_setup(lang, code):
            continue
        script = d / f"block_{re.sub(r'[^a-z0-9]', '_', page.lower())}_{i}.{'py' if lang == 'python' else 'sh'}"
        script.write_text(code)
        argv = [str(venv / "bin" / "python"), script.name] if lang == "python" else \
            ["bash", "-e", "-o", "pipefail", script.name]
        r = _run(argv, cwd=d, env=env, timeout=900)
        first = code.strip().splitlines()[0]
        assert r.returncode == 0, f"{page}, block {i} ({lang}: {first!r}) -> exit {r.returncode}\n" \
                                  f"{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        outputs[page, i] = r.stdout
    _check_outputs(d, outputs)


def _check_outputs(d: Path, outputs: dict):
    """What the blocks wrote is what they say they write (a block that runs but does nothing fails here)."""
    import json

    import streamrank as sr

    ten_lines = float(outputs["README.md", 2].strip().splitlines()[-1])
    assert 0.5 < ten_lines <= 1.0
    assert sr.GroupStore.open(d / "first.zarr").n_rows == 15_000
    assert sr.GroupStore.open(d / "mq-train.zarr").n_features == 46
    assert len(np.load(d / "mq-scores.npy")) == sr.GroupStore.open(d / "mq-test.zarr").n_rows
    run = (d / "mq-run.txt").read_text().splitlines()
    qrels = (d / "mq-qrels.txt").read_text().splitlines()
    assert len(run) == len(qrels) == sr.GroupStore.open(d / "mq-test.zarr").n_rows
    assert {ln.split()[2] for ln in run} == {ln.split()[2] for ln in qrels}
    assert not any(ln.split()[2].startswith("row") for ln in run)          # the ingested #docids
    body = json.loads((d / "mq.json").read_text())
    assert list(body["model"]["model"]["definition"])[:2] == ["mq2008_f1", "mq2008_f2"]
    assert list(sr.load(d / "parquet-m.zarr").feature_names_in_)[:2] == ["f_0", "f_1"]
    assert sr.GroupStore.open(d / "clicks.zarr").row_columns == ("click", "position")
    assert (d / "nightly-models" / "current").read_text().strip()
    assert sr.load(d / "nightly-models" / "current").coef_.shape == (46,)
    assert (d / "ranker-solr.json").stat().st_size > 0 and (d / "ranker.onnx").stat().st_size > 0
    assert sr.load(d / "cluster-m.zarr").coef_.shape == (20,)


@pytest.mark.slow   # the installed wheel's venv
def test_installed_command_is_the_wheels(venv, tmp_path):
    """``streamrank`` on PATH is the venv's console script and imports the installed copy (not the checkout);
    ``streamrank distributed`` runs as a command (the old script's name shadowed dask's ``distributed``)."""
    env = _env(venv)
    script = shutil.which("streamrank", path=env["PATH"])
    assert script and Path(script).parent == venv / "bin"
    r = _run([str(venv / "bin" / "python"), "-c", "import streamrank; print(streamrank.__file__)"], cwd=tmp_path,
             env=env, timeout=120)
    assert Path(r.stdout.strip()).resolve().is_relative_to(venv.resolve()), r.stdout + r.stderr
    for argv, want in ((["streamrank", "distributed", "--help"], "usage: streamrank distributed"),
                       (["streamrank", "recipe", "--help"], "synthetic"),
                       ([str(venv / "bin" / "python"), "-m", "streamrank.recipes.synthetic", "--help"], "--rows")):
        r = _run(argv, cwd=tmp_path, env=env, timeout=300)
        assert r.returncode == 0 and want in r.stdout, r.stderr

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

Each README section runs in its own directory laid out as the section assumes (the MQ2008 slices, a day file,
``features.txt``, a TREC run and its judgments); a section with commands that this test does not know is a
failure, so a new README command cannot go untested.
"""
from __future__ import annotations

import fcntl
import gzip
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
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

#: README sections run in a checkout only (they create .venv/ with make): not commands of the installed product
CHECKOUT_ONLY = {"The two commands": ["make demo", "make test"]}


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


#: the extras the README's commands need (it tells users to install them: ``pip install 'streamrank[parquet]'``)
README_EXTRAS = sorted(set(re.findall(r"streamrank\[([a-z0-9_-]+)\]", README.read_text())))


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


# ------------------------------------------------------------------------------------- README commands
def _sections():
    """[(title, [(lang, code), ...])] of the README's sections with shell or Python blocks, in order."""
    out = []
    for part in re.split(r"^## ", README.read_text(), flags=re.M)[1:]:
        title = part.splitlines()[0].strip()
        blocks = re.findall(r"```(bash|python)\n(.*?)```", part, flags=re.S)
        if blocks:
            out.append((title, blocks))
    return out


def _commands(code: str) -> list[list[str]]:
    text = re.sub(r"\\\n\s*", " ", code)          # continuation lines
    return [argv for ln in text.splitlines() if (argv := shlex.split(ln, comments=True))]


def _mq2008_lines(member: str) -> list[str]:
    from streamrank.datasets._paths import data_path

    archive = data_path("letor", "MQ2008_QueryLevelNorm.tar.gz")
    if not archive.exists():
        pytest.skip("MQ2008 archive not available")
    with tarfile.open(archive) as tf:
        return tf.extractfile(member).read().decode().splitlines()


def _whole_queries(lines, n):
    """The first lines of ``lines`` holding about ``n`` rows, cut at a query boundary."""
    qid = [ln.split()[1] for ln in lines]
    end = n
    while end < len(lines) and qid[end] == qid[end - 1]:
        end += 1
    return lines[:end]


def _prepare_cli_section(d: Path):
    """What ``## Command line, pipelines, clusters`` assumes: MQ2008 Fold1 text, a day file, feature names,
    a TREC run with its judgments."""
    train = _mq2008_lines("MQ2008/Fold1/train.txt")
    test = _whole_queries(_mq2008_lines("MQ2008/Fold1/test.txt"), 300)
    (d / "MQ2008" / "Fold1").mkdir(parents=True)
    (d / "MQ2008" / "Fold1" / "train.txt").write_text("\n".join(_whole_queries(train, 600)) + "\n")
    (d / "MQ2008" / "Fold1" / "test.txt").write_text("\n".join(test) + "\n")
    rest = train[len(_whole_queries(train, 600)):]
    (d / "day-42.txt").write_text("\n".join(_whole_queries(rest, 300)) + "\n")
    (d / "features.txt").write_text("\n".join(f"mq2008_f{j}" for j in range(1, 47)) + "\n")
    with open(d / "qrels.txt", "w") as qrels, open(d / "run.txt", "w") as run:
        ranks = {}
        for ln in test:
            tok = ln.split()
            q, doc = tok[1].split(":")[1], ln.split("docid =")[1].split()[0]
            qrels.write(f"{q} 0 {doc} {tok[0]}\n")
            ranks[q] = ranks.get(q, 0) + 1
            run.write(f"{q} Q0 {doc} {ranks[q]} {-ranks[q]} baseline\n")   # the file's order as a run


def _prepare_recipes_section(d: Path):
    lines = _whole_queries(_mq2008_lines("MQ2008/Fold1/vali.txt"), 200)
    with gzip.open(d / "my_logs.txt.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")


PREPARE = {
    "Ten lines of Python": None,
    "From Parquet, DataFrames and string query ids": None,
    "Learning from click logs": None,
    "Train on logs, serve in OpenSearch": None,
    "Data recipes": _prepare_recipes_section,
    "Command line, pipelines, clusters": _prepare_cli_section,
}


def _check_section(title, d: Path, outputs: list[str]):
    import streamrank as sr

    if title == "Ten lines of Python":
        assert 0.5 < float(outputs[-1].strip().splitlines()[-1]) <= 1.0
    elif title.startswith("From Parquet"):
        assert sr.load(d / "m.zarr").feature_names_in_[0] == "f_0" and "f_" in outputs[-1]
    elif title.startswith("Learning from click logs"):
        assert sr.GroupStore.open(d / "clicks.zarr").row_columns == ("click", "position")
        assert sr.load(d / "ips.zarr").ties == "exclude"
    elif title.startswith("Train on logs"):
        assert (d / "ranker-solr.json").stat().st_size > 0 and (d / "ranker.onnx").stat().st_size > 0
    elif title == "Data recipes":
        assert sr.GroupStore.open(d / "letor_like.zarr").n_rows == 20_000
        assert sr.GroupStore.open(d / "logs.zarr").n_features == 46
    elif title.startswith("Command line"):
        assert len(np.load(d / "scores.npy")) == sr.GroupStore.open(d / "test.zarr").n_rows
        assert (d / "models" / "current").read_text().strip()
        assert sr.load(d / "models" / "current").coef_.shape == (46,)
        assert '"ndcg@10"' in "".join(outputs)


def test_readme_sections_are_known():
    titles = [t for t, _ in _sections()]
    assert sorted(titles) == sorted([*CHECKOUT_ONLY, *PREPARE]), titles
    for title, blocks in _sections():
        if title in CHECKOUT_ONLY:
            assert [" ".join(a) for lang, code in blocks for a in _commands(code)] == CHECKOUT_ONLY[title]


@pytest.mark.slow   # every README section in the installed wheel's venv
@pytest.mark.parametrize("title", list(PREPARE))
def test_readme_commands_run_as_written_from_the_installed_wheel(venv, tmp_path, title):
    d = tmp_path / "work"                         # outside the repository: nothing of the checkout is importable
    d.mkdir()
    assert not d.resolve().is_relative_to(REPO)
    if PREPARE[title] is not None:
        PREPARE[title](d)
    env = _env(venv)
    blocks = dict(_sections())[title]
    outputs = []
    for i, (lang, code) in enumerate(blocks):
        if lang == "python":
            script = d / f"readme_block_{i}.py"
            script.write_text(code)
            runs = [[str(venv / "bin" / "python"), script.name]]
        else:
            runs = _commands(code)
            assert runs and all(argv[0] == "streamrank" for argv in runs), code
        for argv in runs:
            r = _run(argv, cwd=d, env=env, timeout=900)
            assert r.returncode == 0, f"{' '.join(argv)} -> exit {r.returncode}\n{r.stderr[-3000:]}"
            outputs.append(r.stdout)
    _check_section(title, d, outputs)


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

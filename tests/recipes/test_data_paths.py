"""Where the real datasets are looked up: ``STREAMRANK_DATA``, then ``../shared/data`` beside the checkout or the
current directory, and no absolute path of the machine the package was built on."""
from pathlib import Path

from streamrank.datasets import _paths


def test_streamrank_data_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMRANK_DATA", str(tmp_path))
    assert _paths.data_dir() == tmp_path
    assert _paths.data_path("letor", "x.tar.gz") == tmp_path / "letor" / "x.tar.gz"


def test_no_hard_coded_absolute_fallback(tmp_path, monkeypatch):
    monkeypatch.delenv("STREAMRANK_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    repo = Path(_paths.__file__).resolve().parents[2]
    assert list(_paths._candidates()) == [repo.parent / "shared" / "data", tmp_path.parent / "shared" / "data"]
    assert "/work/" not in Path(_paths.__file__).read_text()


def test_shared_data_beside_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("STREAMRANK_DATA", raising=False)
    (tmp_path / "shared" / "data").mkdir(parents=True)
    (tmp_path / "clone").mkdir()
    monkeypatch.chdir(tmp_path / "clone")
    repo = Path(_paths.__file__).resolve().parents[2]
    if (repo.parent / "shared" / "data").is_dir():   # the checkout's own neighbour comes first
        assert _paths.data_dir() == repo.parent / "shared" / "data"
    else:
        assert _paths.data_dir() == tmp_path / "shared" / "data"

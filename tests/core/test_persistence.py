"""sr.save / sr.load: arrays + JSON attributes, atomic replace, clear errors."""
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import streamrank as sr
from streamrank.base import BaseRanker, NotFittedError
from streamrank.persistence import ModelFormatError, register_model


@register_model
class _TinyModel(BaseRanker):
    def __init__(self, *, alpha=1.0, kind="a"):
        self.alpha = alpha
        self.kind = kind

    def fit(self, X):
        self.coef_ = np.asarray(X, dtype=np.float64).sum(axis=0)
        self.W_ = sp.random(4, 3, density=0.5, random_state=0, format="csr")
        self.t_ = 17
        return self

    def predict(self, X):
        self._check_fitted()
        return np.asarray(X) @ self.coef_

    def _get_state(self):
        return {"t": self.t_}, {"coef_": self.coef_, "W_": self.W_}

    def _set_state(self, attrs, arrays):
        self.t_ = attrs["t"]
        self.coef_ = arrays["coef_"]
        self.W_ = arrays["W_"]


def test_params_roundtrip_and_repr():
    m = _TinyModel(alpha=2.0)
    assert m.get_params() == {"alpha": 2.0, "kind": "a"}
    m.set_params(kind="b")
    assert m.kind == "b"
    assert repr(m) == "_TinyModel(alpha=2.0, kind='b')"
    with pytest.raises(ValueError, match="Invalid parameter 'alhpa'"):
        m.set_params(alhpa=1)


def test_not_fitted_error():
    with pytest.raises(NotFittedError, match="not fitted yet"):
        _TinyModel().predict(np.ones((2, 2)))


def test_save_load_roundtrip(tmp_path):
    X = np.arange(12.0).reshape(4, 3)
    m = _TinyModel(alpha=0.5, kind="z").fit(X)
    sr.save(m, tmp_path / "m")
    m2 = sr.load(tmp_path / "m")
    assert type(m2) is _TinyModel and m2.get_params() == m.get_params() and m2.t_ == 17
    np.testing.assert_array_equal(m2.predict(X), m.predict(X))
    assert (m2.W_ != m.W_).nnz == 0
    # no pickle anywhere in the saved files
    for f in Path(tmp_path / "m").rglob("*"):
        if f.is_file():
            assert not f.read_bytes().startswith(b"\x80")


def test_save_replaces_atomically_and_leaves_no_temporaries(tmp_path):
    X = np.ones((2, 3))
    sr.save(_TinyModel(alpha=1.0).fit(X), tmp_path / "m")
    sr.save(_TinyModel(alpha=3.0).fit(X), tmp_path / "m")
    assert sr.load(tmp_path / "m").alpha == 3.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_load_rejects_newer_version_unknown_class_and_damage(tmp_path):
    sr.save(_TinyModel().fit(np.ones((2, 3))), tmp_path / "m")
    meta_file = tmp_path / "m" / "zarr.json"
    meta = json.loads(meta_file.read_text())
    meta["attributes"]["format_version"] = 99
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(ModelFormatError, match="format version 99"):
        sr.load(tmp_path / "m")
    meta["attributes"]["format_version"] = 1
    meta["attributes"]["class"] = "os.system"
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(ModelFormatError, match="unknown model class 'os.system'"):
        sr.load(tmp_path / "m")
    meta["attributes"]["class"] = "_TinyModel"
    meta_file.write_text(json.dumps(meta))
    import shutil

    shutil.rmtree(tmp_path / "m" / "coef_")
    with pytest.raises(ModelFormatError, match="array 'coef_' is missing or damaged"):
        sr.load(tmp_path / "m")
    meta_file.write_text("{ truncated")
    with pytest.raises(ModelFormatError, match="not a readable streamrank model"):
        sr.load(tmp_path / "m")
    with pytest.raises(FileNotFoundError):
        sr.load(tmp_path / "nope")

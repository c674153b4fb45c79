"""The command line with --store s3://… against the real S3 server on loopback (tests/_s3_server.py).

``--storage-options JSON`` on the commands that take a store, or the usual AWS_* environment variables.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from _cli_inproc import run_cli

import streamrank as sr
from streamrank import cli


def _main(*args, env=None):
    rc, out, err = run_cli(*args, env=env)
    assert rc == 0, f"exit {rc}\nstdout: {out}\nstderr: {err}"
    return out


def _letor(path, n_queries=12, per=6, n_features=5, seed=0):
    rng = np.random.default_rng(seed)
    lines = []
    for qi in range(n_queries):
        for _ in range(per):
            feats = " ".join(f"{j + 1}:{rng.normal():.4f}" for j in range(n_features))
            lines.append(f"{rng.integers(0, 3)} qid:{100 + qi} {feats}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow      # five commands end to end
def test_ingest_fit_evaluate_info_on_an_s3_store(s3_server, s3_url, tmp_path):
    src = _letor(tmp_path / "day1.txt")
    url = s3_url + "/train.zarr"
    opts = json.dumps(s3_server.storage_options)
    _main("ingest", src, "--store", url, "--storage-options", opts, "-q")
    _main("ingest", src, "--store", url, "--storage-options", opts, "-q")        # idempotent: nothing added
    _main("ingest", src, "--store", tmp_path / "train.zarr", "-q")
    remote = sr.GroupStore.open(url, storage_options=s3_server.storage_options)
    local = sr.GroupStore.open(tmp_path / "train.zarr")
    assert remote.n_rows == local.n_rows == 72 and remote.verify() == 1
    # fit from the S3 store with the AWS_* environment variables only, and from the local store
    _main("fit", "--store", url, "--model", tmp_path / "m_s3.zarr", "--learner", "rankrls", "--alpha", "1", "-q",
          env=s3_server.env)
    _main("fit", "--store", tmp_path / "train.zarr", "--model", tmp_path / "m.zarr", "--learner", "rankrls",
          "--alpha", "1", "-q")
    assert np.array_equal(sr.load(tmp_path / "m_s3.zarr").coef_, sr.load(tmp_path / "m.zarr").coef_)
    out = _main("evaluate", "--model", tmp_path / "m.zarr", "--store", url, "--storage-options", opts, "--json")
    out_local = _main("evaluate", "--model", tmp_path / "m.zarr", "--store", tmp_path / "train.zarr", "--json")
    assert json.loads(out)["metrics"] == json.loads(out_local)["metrics"]
    assert "72" in _main("info", url, env=s3_server.env)


def test_storage_options_must_be_a_json_object(capsys):
    with pytest.raises(SystemExit):
        cli._app.build_parser().parse_args(["fit", "--store", "s3://b/x", "--model", "m", "--learner", "rankrls",
                                            "--storage-options", "[1]"])
    assert "expected a JSON object" in capsys.readouterr().err


def test_model_at_a_url_takes_the_storage_options(s3_server, s3_url, tmp_path):
    """``--storage-options`` reaches a ``--model`` URL too (saving with fit, loading with predict and export),
    not only a ``--store`` URL: the loopback server's endpoint is in no environment variable here, so only the
    options can reach it."""
    import os

    assert "AWS_ENDPOINT_URL" not in os.environ and s3_server.storage_options
    src = _letor(tmp_path / "day.txt")
    _main("ingest", src, "--store", tmp_path / "s.zarr", "-q")
    url = s3_url + "/models/m.zarr"
    opts = json.dumps(s3_server.storage_options)
    _main("fit", "--store", tmp_path / "s.zarr", "--model", url, "--storage-options", opts, "--learner", "rankrls",
          "--alpha", "1", "-q")
    _main("fit", "--store", tmp_path / "s.zarr", "--model", tmp_path / "m.zarr", "--learner", "rankrls",
          "--alpha", "1", "-q")
    remote = sr.load(url, storage_options=s3_server.storage_options)
    assert np.array_equal(remote.coef_, sr.load(tmp_path / "m.zarr").coef_)
    rc, _, err = run_cli("fit", "--store", tmp_path / "s.zarr", "--model", url, "--storage-options", opts,
                         "--learner", "rankrls", "-q")
    assert rc == 5 and "--overwrite" in err                  # the published model is seen through the options
    _main("predict", "--model", url, "--storage-options", opts, "--store", tmp_path / "s.zarr",
          "--out", tmp_path / "a.npy", "-q")
    _main("predict", "--model", tmp_path / "m.zarr", "--store", tmp_path / "s.zarr", "--out", tmp_path / "b.npy",
          "-q")
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))
    _main("export", "--model", url, "--storage-options", opts, "--format", "json", "--out", tmp_path / "m.json")
    assert json.loads((tmp_path / "m.json").read_text())

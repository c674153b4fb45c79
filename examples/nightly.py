"""Nightly retraining: three nights on growing logs — ingest the day, update the model from saved statistics,
validate on the held-out newest day, promote atomically.  The same as ``streamrank nightly`` each night.

    python examples/nightly.py [WORKDIR]
"""
import io
import sys
import tempfile
from pathlib import Path

import numpy as np

import streamrank as sr
from streamrank.datasets.synthetic import make_letor_like
from streamrank.pipelines.nightly import run_night


def write_day(workdir, day):
    """One day of judged results as an .npz (LETOR text or Parquet work the same way)."""
    X, y, qid = make_letor_like(n_rows=1_500, n_features=10, random_state=day, model_seed=0)
    path = Path(workdir) / f"day-{day}.npz"
    np.savez(path, X=X, y=y, qid=qid + 10_000 * day)
    return path


def main(workdir):
    store, models = Path(workdir) / "logs.zarr", Path(workdir) / "models"
    reports = []
    for day in (1, 2, 3):
        report = run_night(store, [write_day(workdir, day)], models, alphas=[0.1, 1.0, 10.0], plot=False,
                           out=io.StringIO())
        reports.append(report)
        print(f"night {day}: {report['status']:<9} current={(models / 'current').read_text().strip()}")
    model = sr.load(models / "current")
    print(f"current model: {type(model).__name__}, alpha={model.alpha:g}, "
          f"trained on {sr.GroupStore.open(store).n_rows:,} rows")
    return reports


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as d:
            main(d)

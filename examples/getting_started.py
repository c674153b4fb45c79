"""Getting started: a store on disk, a streamed RankRLS fit with λ chosen by group CV, NDCG@10 on held-out queries.

    python examples/getting_started.py [WORKDIR]
"""
import sys
import tempfile
from pathlib import Path

import numpy as np

import streamrank as sr
from streamrank.datasets.synthetic import make_letor_like


def main(workdir):
    X, y, qid = make_letor_like(n_rows=12_000, n_features=20, random_state=0)
    train = qid < np.quantile(qid, 0.75)                     # whole queries: the first 3/4 train, the rest test

    store = sr.GroupStore.create(Path(workdir) / "train.zarr", n_features=20, overwrite=True)
    for day, rows in enumerate(np.array_split(np.flatnonzero(train), 3)):   # three appends, e.g. three days
        store.append(X[rows], y[rows], qid[rows], batch_id=f"day-{day}")
    print(f"store: {store.n_rows:,} rows in {store.n_groups:,} queries")

    model = sr.RankRLS(alpha=1.0)
    model.cross_validate(store, alphas=np.logspace(-3, 3, 7), folds=5)   # one pass: every λ, every fold, refit
    print(f"best alpha by 5-fold group CV: {model.best_alpha_:g}")

    scores = model.predict(X[~train])
    ndcg = sr.metrics.ndcg(y[~train], scores, qid[~train], k=10)
    print(f"NDCG@10 on held-out queries: {ndcg:.4f}")
    return ndcg


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as d:
            main(d)

"""Train on logs, serve in a search engine: a normalized linear model exported as the OpenSearch / Elasticsearch
LTR plugin's ``_createmodel`` body and as plain JSON, with the feature names the store carries.

    python examples/export_for_serving.py [WORKDIR]
"""
import json
import sys
import tempfile
from pathlib import Path

import streamrank as sr
from streamrank.datasets.synthetic import make_letor_like


def main(workdir):
    X, y, qid = make_letor_like(n_rows=5_000, n_features=3, random_state=1)
    logs = sr.GroupStore.create(Path(workdir) / "logs.zarr", n_features=3, overwrite=True,
                                feature_names=["title_bm25", "body_bm25", "freshness"])
    logs.append(X, y, qid, batch_id="2026-11-25")
    model = sr.RankRLS(alpha=1.0, normalize="standard").fit(logs)

    body_path = Path(workdir) / "ranker.json"
    sr.export(model, body_path, format="opensearch", name="ranker_v1")
    body = json.loads(body_path.read_text())
    print("POST _ltr/_featureset/<your feature set>/_createmodel with:")
    print(json.dumps(body, indent=1)[:400], "...")
    sr.export(model, Path(workdir) / "ranker.plain.json", format="json")
    return body


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as d:
            main(d)

"""What normalize= and the exports cost: ratios against the plain fit and predict in the same process.

Questions (issue 20):

1. ``RankRLS(normalize="standard")`` fit from a GroupStore against the same
   fit without normalization (the moments ride along the statistics pass;
   target: ratio <= 1.10).
2. The exported ONNX graph of that model scored by onnxruntime against
   ``model.predict`` on the same float32 rows (rows/s ratio; informational),
   and the OpenSearch / Solr / JSON export time against the fit.

Usage::

    python benchmarks/normalize_and_export.py --smoke     # seconds, tiny data
    python benchmarks/normalize_and_export.py              # 1,000,000 x 46 in groups of 20
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import scratch_dir, write_dense_store  # noqa: E402


def _best(f, repeat):
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--features", type=int, default=46)
    p.add_argument("--repeat", type=int, default=3, help="best of R runs, alternating plain / normalized")
    p.add_argument("--smoke", action="store_true", help="20,000 rows, one repeat")
    args = p.parse_args(argv)
    if args.smoke:
        args.rows, args.repeat = 20_000, 1
    import streamrank as sr

    with scratch_dir("normalize_export") as d:
        store = write_dense_store(Path(d) / "s.zarr", args.rows, args.features, 20)
        times = {None: np.inf, "standard": np.inf}
        for norm in times:                      # warm-up: numba compilation and the page cache
            sr.RankRLS(alpha=1.0, normalize=norm).fit(store)
        for _ in range(args.repeat):            # alternate, so drift hits both alike
            for norm in times:
                times[norm] = min(times[norm], _best(lambda n=norm: sr.RankRLS(alpha=1.0, normalize=n).fit(store), 1))
        model = sr.RankRLS(alpha=1.0, normalize="standard").fit(store)
        print(f"rows {args.rows:,} x {args.features} features, groups of 20")
        print(f"fit plain       {times[None]:8.3f} s")
        print(f"fit normalized  {times['standard']:8.3f} s   ratio {times['standard'] / times[None]:.3f} "
              "(target <= 1.10)")
        names = [f"f{j}" for j in range(args.features)]
        X = np.vstack([b.X for _, b in zip(range(4), store.blocks(max_rows=50_000), strict=False)]).astype(np.float32)
        t_pred = _best(lambda: model.predict(X), args.repeat)
        print(f"predict         {len(X) / t_pred:12,.0f} rows/s")
        with tempfile.TemporaryDirectory() as out:
            for fmt in ("opensearch", "solr", "json"):
                t = _best(lambda f=fmt: sr.export(model, Path(out) / f"m.{f}", format=f, feature_names=names), 1)
                print(f"export {fmt:<11s}{t:8.4f} s   ({t / times['standard']:.4f} x the fit)")
            try:
                import onnxruntime as ort
            except ImportError:
                print("onnxruntime not installed: ONNX scoring skipped (pip install onnxruntime)")
                return 0
            sr.export(model, Path(out) / "m.onnx", format="onnx")
            sess = ort.InferenceSession(str(Path(out) / "m.onnx"))
            t_onnx = _best(lambda: sess.run(None, {"X": X}), args.repeat)
            print(f"onnxruntime     {len(X) / t_onnx:12,.0f} rows/s   ratio to predict {t_pred / t_onnx:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

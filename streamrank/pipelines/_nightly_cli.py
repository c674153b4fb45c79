"""The ``streamrank nightly`` command line: its options, their parsing, and the progress display.

:func:`build_parser` holds every option of :func:`streamrank.pipelines.nightly.run_night`
(``--learner`` one of :data:`LEARNERS`, ``--alphas`` in ``streamrank fit``'s grid grammar,
``--storage-options`` a JSON object, ``--gate-fraction``, ``--reject`` / ``--readmit``, the click-log
options of :mod:`streamrank.pipelines._nightly_weights`); :func:`_learner_params` turns the parsed
options into the constructor parameters of a new model; :func:`_with_progress` shows the night's
phases on stderr (on a terminal or with ``--progress``, never with ``-q``).
:func:`streamrank.pipelines.nightly.main` runs the night with them.
"""
from __future__ import annotations

import argparse
import sys

from streamrank.pipelines._nightly_learners import DEFAULT_BLOCK_ROWS, DEFAULT_FOLDS
from streamrank.pipelines._nightly_checks import add_check_options
from streamrank.pipelines._nightly_weights import add_weight_options

__all__ = ["LEARNERS", "build_parser"]

LEARNERS = ("rankrls", "sparse-kernel", "sgd-bilinear", "sgd-pairwise")


#: the parser's description (the first line of :mod:`streamrank.pipelines.nightly`'s docstring, which says the rest)
DESCRIPTION = "Nightly retraining on growing logs."


def _parse_alphas(text):
    """``--alphas GRID``: :func:`streamrank.cli.parse_grid`, the ``streamrank`` command's one grammar."""
    from streamrank.cli import UsageError, parse_grid

    try:
        return parse_grid(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(f"--alphas: {exc}") from None


def build_parser():
    p = argparse.ArgumentParser(prog="streamrank nightly", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", required=True, help="GroupStore of all logs so far (created if missing)")
    p.add_argument("--new", nargs="+", default=[], metavar="DAYFILE",
                   help="the new day's data: LETOR/svmlight text, .npz with X, y, qid, Parquet (--label, --qid "
                        "name its columns), or a zarr store (may be left out with --reject / --readmit)")
    p.add_argument("--reject", action="append", default=[], metavar="DAY",
                   help="exclude a day (its file, or its sha256: batch id) from training from now on; repeatable")
    p.add_argument("--rollback", default=None, metavar="TAG",
                   help="models directory at a URL: promote again the version that the run tagged TAG promoted "
                        "(one commit; every promoted version is tagged with its name), then exit")
    p.add_argument("--readmit", action="append", default=[], metavar="DAY",
                   help="take an excluded day (rejected by the gate or by hand) back into training; repeatable")
    p.add_argument("--gate-fraction", type=float, default=None, metavar="F",
                   help="sgd learners: the fraction of queries never trained on, on which the gate compares the "
                        "candidate with the current model (default 0.1, fixed for a model line; 0: no gate, "
                        "progressive validation on the new day decides)")
    p.add_argument("--label", default="label", metavar="COL", help="Parquet day: the label column (default label)")
    p.add_argument("--qid", default="qid", metavar="COL",
                   help="Parquet day: the query id column, integers or strings (default qid)")
    p.add_argument("--features-from-prefix", default=None, metavar="P",
                   help="Parquet day: the feature columns are those starting with P (default: all others)")
    p.add_argument("--models", required=True, metavar="DIR",
                   help="model directory (versions + current); a URL (s3://bucket/nightly) keeps it on object storage")
    p.add_argument("--storage-options", type=_storage_options, default=None, metavar="JSON",
                   help="options of the filesystem of a --models / --store URL as a JSON object (s3: endpoint_url, "
                        "key, secret, ...); default: the client's environment variables (AWS_ACCESS_KEY_ID, ...)")
    p.add_argument("--learner", default="rankrls", choices=LEARNERS)
    p.add_argument("--alphas", type=_parse_alphas, default=None, metavar="GRID",
                   help="λ grid as for 'streamrank fit': 'a,b,c', 'LO:HI:N' (N log-spaced values) or "
                        "'B^A:B^C' (integer powers) (default 2^-15 … 2^15)")
    p.add_argument("--full", action="store_true", help="retrain from scratch on all data")
    p.add_argument("--keep", type=int, default=None, metavar="N", help="keep only the newest N versions")
    p.add_argument("--tolerance", type=float, default=0.005, help="allowed NDCG@10 drop for promotion")
    p.add_argument("--folds", type=int, default=DEFAULT_FOLDS, help="folds (by query) for λ selection")
    p.add_argument("--validation", default=None, metavar="STORE",
                   help="fixed validation store (default: hold the newest day out of the candidate)")
    p.add_argument("--max-rows", type=int, default=DEFAULT_BLOCK_ROWS, help="block budget (rows)")
    p.add_argument("--verify", action="store_true",
                   help="re-read every batch of the store against its checksum before training "
                        "(default: only tonight's new batches)")
    p.add_argument("--chunk-mb", type=float, default=8.0, help="day file input read per append (MB)")
    p.add_argument("--no-plot", action="store_true", help="do not write metrics.png")
    p.add_argument("-v", "--verbose", action="store_true", help="print the traceback of an error")
    p.add_argument("--progress", action="store_true",
                   help="report each phase (ingest, verify, statistics, λ selection, validation, gate, version) "
                        "with its count on stderr even when it is not a terminal (a log: a line every "
                        "STREAMRANK_PROGRESS_SECONDS); on a terminal they are shown anyway")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr, not even on a terminal")
    p.add_argument("--group-weight", default="pair", choices=("pair", "query", "size"),
                   help="rankrls, sparse-kernel: weight of each query's pairs (fixed at the first night)")
    p.add_argument("--ties", default=None, choices=("include", "exclude"),
                   help="rankrls, sparse-kernel: tied pairs (default include; exclude with --ips; "
                        "sgd-pairwise never samples a tied pair)")
    p.add_argument("--normalize", default=None, choices=("standard", "minmax"),
                   help="scale the features by statistics of the training rows, fitted with the model "
                        "(rankrls: of all rows, every night; sparse-kernel and sgd-pairwise: of the first night's "
                        "rows, kept like the basis / the SGD state; sgd-bilinear: scale only, no centring, of the "
                        "first night's stored query and item vectors)")
    p.add_argument("--n-basis", type=int, default=500, help="sparse-kernel: basis rows (fixed at the first night)")
    p.add_argument("--kernel", default="rbf", help="sparse-kernel: kernel name")
    p.add_argument("--gamma", type=float, default=1.0, help="sparse-kernel: kernel width")
    add_weight_options(p)
    add_check_options(p)
    p.add_argument("--seed", type=int, default=0,
                   help="sparse-kernel: seed of the basis reservoir; sgd-pairwise: seed of the pair sampling")
    return p


def _learner_params(args):
    norm = {} if getattr(args, "normalize", None) is None else {"normalize": args.normalize}
    ties = args.ties or ("exclude" if getattr(args, "ips", False) else "include")
    if args.learner == "sparse-kernel":
        return {"n_basis": args.n_basis, "kernel": args.kernel, "gamma": args.gamma, "random_state": args.seed,
                "group_weight": args.group_weight, "ties": ties, **norm}
    if args.learner == "sgd-pairwise":
        return {"random_state": args.seed, **norm}
    if args.learner == "sgd-bilinear":
        return {"auto_refit": False, **norm} if norm else None
    if args.learner == "rankrls":
        return {"group_weight": args.group_weight, "ties": ties, **norm}
    return None


def _with_progress(args, fn):
    """Run ``fn`` with the phases of :mod:`streamrank._phases` shown on stderr (``streamrank fit``'s display):
    on a terminal, or with ``--progress`` (a log); never with ``--quiet``.  Without them stderr holds only
    the error line of a failure."""
    from streamrank.cli import progress_reporting

    tty = bool(getattr(sys.stderr, "isatty", None) and sys.stderr.isatty())
    if args.quiet or not (args.progress or tty):
        return fn()
    with progress_reporting("nightly"):     # each phase says its own last line
        return fn()


def _storage_options(text):
    """``--storage-options JSON``: the ``streamrank`` command's own parser (imported on use)."""
    from streamrank.cli import parse_storage_options

    return parse_storage_options(text)

"""The argument parser of ``streamrank`` and ``main``: logging, signals, one-line errors and exit codes."""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import traceback

from ._delegate import PIPELINES, RECIPE_HELP, is_delegated, run_delegated
from ._common import (DEFAULT_MAX_ROWS, EXIT_BUG, EXIT_CODES, EXIT_DATA, EXIT_NOT_FOUND, EXIT_SIGINT,
                      EXIT_SIGTERM, EXIT_USAGE, FORMATS, LEARNERS, _Terminated, exit_code, log)
from ._evaluate import cmd_evaluate, cmd_predict
from ._export import cmd_export
from ._fit import cmd_cv, cmd_fit
from ._grid import _folds_type, _grid_type, _positive_float, parse_storage_options
from ._fit_weights import add_weight_args
from ._info import cmd_info
from ._migrate import cmd_migrate
from ._row_columns import add_column_args
from ._ingest import cmd_ingest
from ._options import Given, GivenTrue
from ._plot import cmd_plot
from ._warmup import add_parser as add_warmup_parser


#: the usage lines of ``streamrank --help``
SYNOPSIS = """\
    streamrank ingest   SRC... --store PATH [--format letor|npz|zarr|parquet] [--batch-id ID]
                        [--label COL --qid COL [--features COL,... | --features-from-prefix P]]
    streamrank info     PATH | --model M [--top N]
    streamrank fit      --store PATH --model OUT --learner LEARNER [options] [--alpha A | --alphas GRID --cv K]
    streamrank evaluate --model M --store PATH [--metrics ndcg@10,disagreement,map,auc]
    streamrank predict  --model M --store PATH --out SCORES.npy|SCORES.zarr [--run RUN.trec]
    streamrank export   --model M --format onnx|opensearch|elasticsearch|solr|json --out PATH
    streamrank cv       --store PATH --learner LEARNER --alphas GRID --folds K|query
    streamrank plot     --model M --out PNG
    streamrank nightly  --store PATH --new DAYFILE... --models DIR [--learner LEARNER] [--alphas GRID]
    streamrank distributed --store PATH --model OUT [--workers N | --scheduler ADDR] --learner LEARNER
    streamrank recipe   synthetic|letor|clicks|newsgroups|mnist|reuters [options]"""


EXAMPLES = {
    "ingest": """examples:
  streamrank ingest /data/MQ2008_QueryLevelNorm.tar.gz:MQ2008/Fold1/train.txt --store train.zarr
  streamrank ingest day1.txt.gz day2.npz --store logs.zarr
  streamrank ingest tuples_today.zarr --store tuples.zarr --format zarr
  streamrank ingest logs/day-*.parquet --store logs.zarr --label label --qid query_id --features-from-prefix f_

SRC is LETOR/svmlight text (plain, .gz, or ARCHIVE.tar.gz:MEMBER), a .npz with
arrays X, y, qid, Parquet (a file, or a directory / quoted glob of part files,
read in name order as one batch; needs --label and --qid; feature columns:
--features a,b,c, --features-from-prefix P, or every other column; pip install
'streamrank[parquet]'), or a zarr store (GroupStore, or a TupleStore — tuples for
sgd-bilinear can only be ingested from a TupleStore, i.e. --format zarr).
Each chunk is one atomic append with batch id ID#i (default ID: file name +
hash of path, size, mtime): ingesting the same source again adds nothing, and
an interrupted ingest continues where it stopped.""",
    "info": """examples:
  streamrank info train.zarr
  streamrank info train.zarr --verify
  streamrank info model.zarr --json
  streamrank info --model model.zarr --top 5""",
    "fit": """examples:
  streamrank fit --store train.zarr --model m.zarr --learner rankrls --alphas 2^-10:2^10 --cv 5
  streamrank fit --store train.zarr --model m.zarr --learner cg --alpha 1 --tol 1e-8
  streamrank fit --store train.zarr --model k.zarr --learner sparse-kernel --n-basis 500 --gamma 0.05
  streamrank fit --store tuples.zarr --model w.zarr --learner sgd-bilinear --steps 100000 --l1 1e-5

GRID: '0.1,1,10' (these values) | 'LO:HI:N' (N log-spaced values, ends included:
'10^-3:10^3:7' is 0.001 ... 1000) | 'B^A:B^C' (integer powers: '2^-15:2^15' is
31 values).  Anything else is a usage error; N is a count, never a step.
--cv K chooses alpha by K-fold CV by query (or 'query': leave-one-query-out)
from the learner's statistics (rankrls, kernel, sparse-kernel only).""",
    "evaluate": """examples:
  streamrank evaluate --model m.zarr --store test.zarr
  streamrank evaluate --model m.zarr --store test.zarr --metrics ndcg@5,map,auc --json
  streamrank evaluate --model m.zarr --data test.txt.gz          # a LETOR file, streamed (not ingested)
  streamrank evaluate --model w.zarr --store test_tuples.zarr     # tuple error
  streamrank evaluate --model m.zarr --store test.zarr --metrics ndcg@1,3,5,10,map,mrr,p@10,err@10 \
      --gain linear --empty zero --json
  streamrank evaluate --run run.txt --qrels qrels.txt --metrics ndcg@10,map,p@10 --gain linear --empty zero""",
    "predict": """examples:
  streamrank predict --model m.zarr --store test.zarr --out scores.npy
  streamrank predict --model m.zarr --store test.zarr --out scores.zarr   # + qid, group_ptr
  streamrank predict --model m.zarr --store test.zarr --run run.trec      # TREC run (qid Q0 docid rank score tag)
  streamrank predict --model m.zarr --store test.zarr --run run.trec --qrels qrels.txt   # + the store's labels
  streamrank predict --model m.zarr --data day.parquet --qid query --out scores.npy   # no label needed
  streamrank predict --model m.zarr --data test.txt --run run.trec   # doc ids: the lines' '#docid = ID'""",
    "export": """examples:
  streamrank export --model m.zarr --format opensearch --out m.json --name mq2008_rankrls
  streamrank export --model m.zarr --format solr --out m.json --feature-names @features.txt
  streamrank export --model k.zarr --format onnx --out k.onnx

FORMAT: onnx (every named-kernel model; needs the export extra: pip install
'streamrank[export]'), opensearch / elasticsearch (the LTR plugin's
_createmodel body: POST it to _ltr/_featureset/SET/_createmodel), solr (a
LinearModel for the model store), json (a plain versioned description).  The
search-engine formats take linear models (rankrls, cg, sgd-pairwise) and name
every feature: the store's feature names, or --feature-names.  A format that
cannot express the model exits 6 naming the formats that can.""",
    "cv": """examples:
  streamrank cv --store train.zarr --learner rankrls --alphas 2^-15:2^15 --folds 5
  streamrank cv --store train.zarr --learner kernel --alphas 1e-3:1e3:7 --folds query --scoring ndcg@10 \
      --plot path.png""",
    "plot": """examples:
  streamrank plot --model m.zarr --out path.png          # λ path of a model fitted with --alphas/--cv
  streamrank plot --model w.zarr --out curve.png         # learning curve of an sgd model
  streamrank plot --model nightly_models/ --out nights.png   # history of the nightly pipeline""",
}


def _file_options(p):
    g = p.add_argument_group("reading a file directly (instead of a store)")
    g.add_argument("--n-features", type=int, default=None, metavar="N",
                   help="text: pad a file whose largest feature index is below the model's N on purpose "
                        "(without it that is an error)")
    g.add_argument("--label", default=None, metavar="COL",
                   help="Parquet: the label column (evaluate needs it; predict reads a file without labels)")
    g.add_argument("--qid", default=None, metavar="COL", help="Parquet: the query id column")
    g.add_argument("--features", type=_features_type, default=None, metavar="COL,COL,...",
                   help="Parquet: the feature columns (default: the model's feature names, else all others)")
    g.add_argument("--features-from-prefix", default=None, metavar="P",
                   help="Parquet: every column whose name starts with P is a feature")
    return g


def _common(p):
    g = p.add_argument_group("output")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress or log messages (results still printed)")
    g.add_argument("-v", "--verbose", action="store_true", help="debug messages; tracebacks on errors")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line + the usage hint, exit code 2
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _SetFlag(argparse.Action):
    """Store the value and remember that the option was given."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, self.dest + "_given", True)


def _learner_options(p, *, cv_option: bool):
    p.add_argument("--learner", required=True, choices=LEARNERS, metavar="LEARNER",
                   help="one of: " + ", ".join(LEARNERS))
    if cv_option:
        p.add_argument("--alpha", type=_positive_float, default=1.0, action=Given,
                       help="regularization λ (default 1)")
    p.add_argument("--max-rows", type=int, default=DEFAULT_MAX_ROWS, help="block budget in rows (default 65536)")
    p.add_argument("--scoring", action=Given, default="squared",
                   help="CV score: squared (least-squares ranking loss, default), disagreement, ndcg@K")
    r = p.add_argument_group("RankRLS (rankrls, cg, kernel, sparse-kernel)")
    r.add_argument("--group-weight", action=Given, choices=("pair", "query", "size"), default="pair",
                   help="weight of a query's pairs (default pair)")
    r.add_argument("--ties", action=Given, choices=("include", "exclude"), default="include")
    r.add_argument("--tol", action=Given, type=_positive_float, default=1e-6, help="cg: relative residual tolerance")
    r.add_argument("--max-iter", action=Given, type=int, default=None, help="cg: iteration limit")
    k = p.add_argument_group("kernels (kernel, sparse-kernel)")
    k.add_argument("--kernel", action=Given, choices=("rbf", "linear", "poly"), default="rbf")
    k.add_argument("--gamma", action=Given, type=_positive_float, default=1.0)
    k.add_argument("--degree", action=Given, type=int, default=2)
    k.add_argument("--coef0", action=Given, type=float, default=0.0)
    k.add_argument("--n-basis", action=Given, type=int, default=256, help="sparse-kernel: basis rows (default 256)")
    s = p.add_argument_group("SGD (sgd-bilinear, sgd-pairwise)")
    s.add_argument("--eta0", action=Given, type=_positive_float, default=None, help="step size C of eta_t = C/sqrt(t)")
    s.add_argument("--l1", action=Given, type=float, default=None,
                   help="cumulative L1 strength (default: the learner's)")
    s.add_argument("--l2", action=Given, type=float, default=None, help="sgd-pairwise: L2 strength (default 0)")
    s.add_argument("--loss", action=Given, choices=("hinge", "logistic"), default=None,
                   help="sgd-pairwise loss (default hinge)")
    s.add_argument("--shrink-every", action=Given, type=int, default=None,
                   help="T: soft-threshold every T steps (default 100)")
    s.add_argument("--init", action=Given, choices=("identity", "zeros"), default=None,
                   help="sgd-bilinear W_0 (default identity)")
    s.add_argument("--no-refit", action=GivenTrue, help="sgd-bilinear: skip the refit on the support")
    s.add_argument("--max-memory-mb", action=Given, type=_positive_float, default=None, metavar="MB",
                   help="sgd-bilinear: bound on the memory of W; kernel: bound on the exact fit's estimated "
                        "memory (32·rows² bytes) — default: half the physical memory; reaching it is an error "
                        "(exit 6): raise --l1 for a sparser W, or use sparse-kernel")
    s.add_argument("--steps", action=Given, type=int, default=None, help="sgd-bilinear: SGD steps (default: one pass)")
    s.add_argument("--n-pairs", action=Given, type=int, default=None,
                   help="sgd-pairwise: pairs sampled within queries (default: one per row)")
    s.add_argument("--batch-size", action=Given, type=int, default=1024)
    s.add_argument("--checkpoint-every", action=Given, type=int, default=None,
                   help="sgd-bilinear: record history every N steps (default steps/20)")
    s.add_argument("--validation", action=Given, default=None, metavar="TUPLESTORE",
                   help="sgd-bilinear: tuple store whose tuple error is recorded in the history")
    p.add_argument("--seed", action=Given, type=int, default=0, help="random seed (basis sample, tuple order)")
    p.add_argument("--normalize", action=Given, choices=("standard", "minmax"), default=None,
                   help="scale features by statistics of the training rows, kept in the model and its exports "
                        "(every learner; sgd-bilinear: scale only, no centring)")
    add_weight_args(p)


def _features_type(text: str):
    """``--features``: an integer (text formats: the feature count) or a comma list of column names."""
    t = text.strip()
    if t.isdigit():
        return int(t)
    names = [c.strip() for c in t.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"--features {text!r}: expected a number or COL,COL,... without empty names")
    return names


def build_parser() -> argparse.ArgumentParser:
    top = _Parser(prog="streamrank", description="streamrank: learning to rank from data that does not fit in "
                  "memory.\n\n" + SYNOPSIS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit codes: " + "; ".join(f"{k} {v}" for k, v in EXIT_CODES.items())
        + "\nRun 'streamrank COMMAND --help' for each command's options and an example.")
    top.add_argument("--version", action="version", version=_version())
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    fmt = argparse.RawDescriptionHelpFormatter

    p = sub.add_parser("ingest", help="append LETOR text, .npz, Parquet or zarr stores to a store",
                       epilog=EXAMPLES["ingest"],
                       formatter_class=fmt, description="Append data to a GroupStore (or TupleStore), atomically.")
    p.add_argument("sources", nargs="+", metavar="SRC")
    p.add_argument("--store", required=True, help="store to append to (created if missing)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="letor (svmlight text), npz (X, y, qid) or zarr (a store); default: by the path")
    p.add_argument("--batch-id", default=None, metavar="ID", help="batch id in the store's append log")
    p.add_argument("--features", type=_features_type, default=None, metavar="N|COL,COL,...",
                   help="text: number of features (default: inferred); Parquet: the feature columns")
    p.add_argument("--n-features", type=int, default=None, metavar="N",
                   help="text: the number of features, on purpose: a file whose largest index is below N is "
                        "padded with zero features (without it, a text with fewer features than the store "
                        "is an error)")
    p.add_argument("--features-from-prefix", default=None, metavar="P",
                   help="Parquet: every column whose name starts with P is a feature")
    p.add_argument("--label", default=None, metavar="COL", help="Parquet: the label column")
    p.add_argument("--qid", default=None, metavar="COL", help="Parquet: the query id column (integers or strings)")
    p.add_argument("--group-identity", choices=("batch", "global"), default="batch",
                   help="new stores: a group is (batch, qid) (default) or a query id is unique in the store")
    p.add_argument("--max-features", type=int, default=1 << 24, metavar="N",
                   help="cap on a feature count inferred from text (default 2^24; a larger index is an error "
                        "naming its line: pass --features if the data really is that wide)")
    p.add_argument("--sparse", action="store_true", help="store X as CSR (new stores)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="stop after about N rows (whole queries)")
    p.add_argument("--chunk-mb", type=float, default=8.0, help="text parsed per append (MB, default 8)")
    p.add_argument("--null-value", type=float, default=None, help="value for NULL features (LETOR 3.0)")
    p.add_argument("--docids", action="store_true",
                   help="keep document ids (new stores): LETOR text's '#docid = ID' comments, an .npz's 'docid' "
                        "array; predict --run names documents by them (a zarr store's ids are always kept)")
    p.add_argument("--docid-column", default=None, metavar="COL",
                   help="Parquet: the column of document ids (strings or integers), kept in the store")
    add_column_args(p)
    p.add_argument("--max-rows", type=int, default=DEFAULT_MAX_ROWS, help="rows per append when copying a store")
    _common(p)
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("info", help="describe a store or a saved model", epilog=EXAMPLES["info"], formatter_class=fmt,
                       description="Rows, groups, features, size on disk, batches appended and format version "
                                   "of a store; class, parameters and training record of a model.")
    p.add_argument("path", metavar="PATH", nargs="?", default=None)
    p.add_argument("--model", default=None, metavar="M",
                   help="a saved model (instead of PATH); linear models also list their top weights by feature name")
    p.add_argument("--top", type=int, default=10, metavar="N", help="--model: how many weights to list (default 10)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--verify", action="store_true",
                   help="re-read every committed batch of a store and check it against its logged checksum "
                        "(catches damaged or deleted chunk files; exit 4 naming the batch if one does not match)")
    _common(p)
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("fit", help="fit a learner on a store and save the model", epilog=EXAMPLES["fit"],
                       formatter_class=fmt, description="Fit a learner on a store and save it with sr.save "
                                                        "(atomic: the model appears complete or not at all).")
    p.add_argument("--store", required=True)
    p.add_argument("--model", required=True, metavar="OUT", help="where to save the model (a zarr directory)")
    p.add_argument("--overwrite", action="store_true", help="replace a model already saved at OUT")
    _learner_options(p, cv_option=True)
    p.add_argument("--alphas", type=_grid_type, default=None, metavar="GRID",
                   help="λ grid to choose from by CV: 'a,b,c', 'LO:HI:N' (N log-spaced values) or 'B^A:B^C'")
    p.add_argument("--cv", type=_folds_type, default=5, action=_SetFlag, metavar="K|query",
                   help="folds by query for --alphas (default 5)")
    _common(p)
    p.set_defaults(func=cmd_fit, cv_given=False)

    p = sub.add_parser("evaluate", help="ranking metrics of a model on a store", epilog=EXAMPLES["evaluate"],
                       formatter_class=fmt, description="Stream a store through a model; print the mean "
                                                        "metrics over queries (AUC: one global group).")
    p.add_argument("--model", metavar="M", help="a saved model (with --store)")
    p.add_argument("--store", "--data", dest="store", metavar="STORE|FILE",
                   help="a group or tuple store, or a LETOR/svmlight text (.gz, ARCHIVE.tar.gz:MEMBER) or Parquet "
                        "file read directly, streamed, not ingested (with --model)")
    p.add_argument("--run", metavar="RUN", help="a TREC run file: qid Q0 docid rank score tag (with --qrels)")
    p.add_argument("--qrels", metavar="QRELS", help="TREC judgments: qid iter docid rel (with --run)")
    p.add_argument("--metrics", default="ndcg@10,disagreement,map",
                   help="comma list of ndcg@K[,K..], map[@K], mrr[@K], p@K, recall@K, err@K, disagreement, auc")
    p.add_argument("--gain", choices=("exp2", "linear"), default="exp2",
                   help="NDCG/ERR gain: 2^rel - 1 (default) or rel (trec_eval)")
    p.add_argument("--empty", choices=("skip", "zero", "one"), default="skip",
                   help="queries without a relevant item: leave out (default), count 0 (trec_eval) or 1")
    p.add_argument("--ties", choices=("expected", "trec"), default=None,
                   help="tied scores: expected value (default with --store) or trec_eval's docid order "
                        "(default with --run)")
    p.add_argument("--output", type=int, default=0, help="score column for multi-output stores")
    p.add_argument("--max-rows", type=int, default=DEFAULT_MAX_ROWS)
    p.add_argument("--json", action="store_true", help="print JSON")
    _file_options(p)
    _common(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("predict", help="write the scores of every row of a store", epilog=EXAMPLES["predict"],
                       formatter_class=fmt, description="Scores in store row order, float64, written atomically.")
    p.add_argument("--model", required=True, metavar="M")
    p.add_argument("--store", "--data", dest="store", required=True, metavar="STORE|FILE",
                   help="a store, or a LETOR/svmlight text (.gz, ARCHIVE.tar.gz:MEMBER) or Parquet file read "
                        "directly (streamed, not ingested; scores in file row order)")
    p.add_argument("--out", default=None, metavar="SCORES", help="SCORES.npy or SCORES.zarr")
    p.add_argument("--run", default=None, metavar="RUN",
                   help="also (or instead) write a TREC run file: qid Q0 docid rank score tag, doc ids from the "
                        "store (ingest --docids), a text file's '#docid = ID' comments or --docid-column, "
                        "else row<N>")
    p.add_argument("--qrels", default=None, metavar="QRELS",
                   help="with --run, from a store: also write its labels as TREC judgments (qid 0 docid rel), "
                        "the rows named as in the run, for evaluate --run RUN --qrels QRELS")
    p.add_argument("--run-tag", default="streamrank", metavar="TAG", help="the run's tag column (default streamrank)")
    p.add_argument("--output", type=int, default=0, help="--run: score column of a multi-output model")
    p.add_argument("--max-rows", type=int, default=DEFAULT_MAX_ROWS)
    _file_options(p).add_argument("--docid-column", default=None, metavar="COL",
                                  help="Parquet: the column of document ids --run names rows by")
    _common(p)
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("export", help="write a saved model for a search engine or runtime", epilog=EXAMPLES["export"],
                       formatter_class=fmt, description="Write a saved model as ONNX, an OpenSearch/Elasticsearch "
                                                        "LTR model, a Solr LTR model or plain JSON (atomic).")
    p.add_argument("--model", required=True, metavar="M")
    p.add_argument("--format", required=True, choices=("onnx", "opensearch", "elasticsearch", "solr", "json"),
                   metavar="FORMAT", help="onnx, opensearch, elasticsearch, solr or json")
    p.add_argument("--out", required=True, metavar="PATH")
    p.add_argument("--name", default=None, help="the model's name in the engine (default: PATH's stem)")
    p.add_argument("--feature-names", default=None, metavar="NAMES",
                   help="the engine's feature names in column order: 'a,b,c' or @FILE (one per line); "
                        "default: the names the model was fitted with")
    p.add_argument("--solr-store", default="_DEFAULT_", help="solr: the feature store (default _DEFAULT_)")
    p.add_argument("--bilinear-graph", choices=("auto", "dense", "gather"), default="auto",
                   help="onnx of sgd-bilinear: W dense or as its nonzeros (default auto: dense up to 2^22 entries)")
    _common(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("cv", help="cross-validate λ over a grid", epilog=EXAMPLES["cv"], formatter_class=fmt,
                       description="Group cross-validation of a grid of λ from one pass of statistics; "
                                   "prints the score of every λ and the best.")
    p.add_argument("--store", required=True)
    _learner_options(p, cv_option=False)
    p.add_argument("--alphas", type=_grid_type, required=True, metavar="GRID")
    p.add_argument("--folds", type=_folds_type, default=5, metavar="K|query", help="K folds by query, or 'query'")
    p.add_argument("--model", default=None, metavar="OUT", help="also save the model refitted with the best λ")
    p.add_argument("--overwrite", action="store_true", help="replace a model already saved at OUT")
    p.add_argument("--json", default=None, metavar="FILE", help="write the scores as JSON")
    p.add_argument("--plot", default=None, metavar="PNG", help="write the λ path plot")
    _common(p)
    p.set_defaults(func=cmd_cv)

    p = sub.add_parser("plot", help="plot a λ path, learning curve or nightly history", epilog=EXAMPLES["plot"],
                       formatter_class=fmt, description="Write a PNG (needs matplotlib: the plot extra).")
    p.add_argument("--model", required=True, metavar="M", help="a saved model, or a nightly model directory")
    p.add_argument("--out", required=True, metavar="PNG")
    p.add_argument("--kind", choices=("auto", "path", "learning-curve", "curve", "nightly"), default="auto")
    p.add_argument("--width", type=int, default=800, help="pixels (default 800)")
    p.add_argument("--height", type=int, default=500, help="pixels (default 500)")
    p.add_argument("--dpi", type=int, default=100)
    _common(p)
    p.set_defaults(func=cmd_plot)
    add_warmup_parser(sub, _common, main)

    p = sub.add_parser("migrate", help="copy a store of the previous object-storage layout into a repository",
                       formatter_class=fmt, description="Copy the store at STORE (a URL in the previous layout, "
                       "or a local directory) byte for byte into a new Icechunk repository at DST (one commit), "
                       "verifying every batch of the source and of the copy. Nothing is deleted at STORE.")
    p.add_argument("store", metavar="STORE")
    p.add_argument("dst", metavar="DST")
    _common(p)
    p.set_defaults(func=cmd_migrate)
    for p in sub.choices.values():      # every command that takes a store or a model: object-storage options
        if any(a.dest in ("store", "model") for a in p._actions):
            p.add_argument("--storage-options", metavar="JSON", type=parse_storage_options, default=None,
                           help="for a --store or --model at a URL (s3://bucket/prefix/store.zarr): options of its "
                                "filesystem as a JSON object, e.g. '{\"endpoint_url\": \"http://minio:9000\"}' "
                                "(one set for both); without it the usual AWS_* environment variables apply")

    # listed here for --help; main() hands these to the module's own parser (cli/_delegate.py)
    for name, (_, text) in PIPELINES.items():
        sub.add_parser(name, help=text, add_help=False)
    sub.add_parser("recipe", help="write a store from a dataset: " + ", ".join(RECIPE_HELP), add_help=False)
    return top


def _version():
    from .. import __version__

    return f"streamrank {__version__}"


# --------------------------------------------------------------------- main
def _setup_logging(args):
    level = logging.ERROR if args.quiet else (logging.DEBUG if args.verbose else logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("streamrank: %(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(level)
    log.propagate = False


def _show_warning(args):
    """Warnings as one ``streamrank: warning: ...`` line (none with --quiet; the source line with --verbose)."""
    import warnings

    default = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if args.verbose:
            return default(message, category, filename, lineno, file, line)
        if not args.quiet:
            print(f"streamrank: warning: {message}", file=sys.stderr, flush=True)

    return show


def _on_sigterm(signum, frame):
    raise _Terminated()


def main(argv=None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    console = argv is None                    # the console script / python -m: supervised below
    argv = sys.argv[1:] if argv is None else list(argv)
    if is_delegated(argv):  # nightly, distributed, recipe NAME: the module's own main(argv)
        from ._supervise import can_supervise, supervised

        if console and can_supervise():       # Ctrl-C within a second there too (its dask workers included)
            return supervised(lambda: run_delegated(argv), argv[0])
        return run_delegated(argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return int(exc.code or 0)
    from ._supervise import can_supervise, supervised

    if console and can_supervise():           # the console script: Ctrl-C stops even native code (_supervise)
        return supervised(lambda: _run(args), args.command)
    return _run(args)


def _run(args) -> int:
    """Run the parsed command: logging, signals, one-line errors and exit codes."""
    import warnings

    saved_log = (list(log.handlers), log.level, log.propagate)
    _setup_logging(args)
    old = None
    try:
        old = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (e.g. called from a test thread)
        pass
    from . import _stores

    _stores.STORAGE_OPTIONS = getattr(args, "storage_options", None)   # for a --store at a URL
    try:
        with warnings.catch_warnings():
            if not args.verbose:
                warnings.simplefilter("ignore", category=RuntimeWarning)
            warnings.showwarning = _show_warning(args)
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"streamrank {args.command}: interrupted; nothing half-written was left (stores keep their "
              "last commit, models are written whole or not at all)", file=sys.stderr, flush=True)
        return EXIT_SIGINT
    except _Terminated:
        print(f"streamrank {args.command}: terminated (SIGTERM); nothing half-written was left",
              file=sys.stderr, flush=True)
        return EXIT_SIGTERM
    except Exception as exc:  # noqa: BLE001 - every error becomes one line and an exit code
        code = exit_code(exc)
        if args.verbose:
            traceback.print_exc(file=sys.stderr)
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, KeyError):
            msg = f"missing entry {msg}"
        if isinstance(exc, MemoryError) and msg == "MemoryError":
            msg = "out of memory (MemoryError); try a smaller --max-rows or --batch-size"
        hint = {EXIT_BUG: f" [{type(exc).__name__}; unexpected: rerun with --verbose and report it]",
                EXIT_NOT_FOUND: " (check the path)"}.get(code, "")
        if code == EXIT_DATA and not args.verbose:
            hint = " (--verbose for details)"
        print(f"streamrank {args.command}: error: {msg}{hint}", file=sys.stderr, flush=True)
        return code
    finally:
        log.handlers[:], log.level, log.propagate = saved_log
        if old is not None:
            try:
                signal.signal(signal.SIGTERM, old)
            except ValueError:
                pass

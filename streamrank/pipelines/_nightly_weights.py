"""Nightly training on click logs: the store's row weights or inverse propensity scoring (IPS).

``--weight-column / --click-column / --position-column COL`` map a day's
Parquet columns (or ``.npz`` arrays) into the store's row columns
(:mod:`streamrank.io.row_columns`; a day that is a store brings its own).
``--weights weight`` trains on ``with_weights(store, "weight")``;
``--ips --propensity eta=E|estimate:STORE|FILE [--clip TAU]`` on
``ips_weighted(store, p, clip=TAU)`` — clicks as targets, (clicked i, not
clicked j) pairs weighted 1 / p(pos_i), ``ties="exclude"``
(:mod:`streamrank.io.weighted`, :mod:`streamrank.clicks`).

Every learner line whose learner takes row weights: rankrls and sparse-kernel
(their fold statistics take the row weights block by block, so a night adds
the new groups' weighted statistics and equals a from-scratch weighted (IPS)
fit on the whole store) and sgd-pairwise (``partial_fit(..., sample_weight=)``
on each block of the new groups: pair (i, j) steps with weight w_i w_j).
sgd-bilinear is refused (:data:`UNWEIGHTED`: a TupleStore has no row
weights).  The weighting is fixed for a model
line (recorded in ``version.json["weighting"]``): a night asking another
one needs ``--full``.  Validation and the promotion gate score what the line
trains on: the same row weights and, with ``--ips``, the clicks as targets
(weighted NDCG and disagreement of :mod:`streamrank.metrics`; the report
says ``ips-weighted`` / ``weighted``).
"""
from __future__ import annotations

__all__ = ["UNWEIGHTED", "refusal", "add_weight_options", "weighting_of", "row_column_names", "weighted_store",
           "check_same_weighting"]

_COLUMNS = ("weight", "click", "position", "ranker")

#: the nightly learner lines that refuse ``--weights`` / ``--ips``, and why (every other line takes them)
UNWEIGHTED = {
    "sgd-bilinear": "it learns from (query, item) preference tuples in a TupleStore, which has no row weights "
                    "nor click/position columns",
}


def add_weight_options(p) -> None:
    for name in _COLUMNS:
        p.add_argument(f"--{name}-column", default=None, metavar="COL",
                       help=f"Parquet day column / .npz array kept as the store's {name!r} column")
    p.add_argument("--weights", default=None, metavar="COL",
                   help="rankrls, sparse-kernel, sgd-pairwise: train with the store's row weights "
                        "(the column 'weight')")
    p.add_argument("--ips", action="store_true",
                   help="rankrls, sparse-kernel, sgd-pairwise: inverse propensity scoring from the store's "
                        "'click' and 'position' columns "
                        "(clicks as targets, ties excluded; needs --propensity)")
    p.add_argument("--propensity", default=None, metavar="SPEC",
                   help="--ips: eta=E (p(k) = (1/k)^E), estimate:em / estimate:harvest (re-estimated every night "
                        "from the accepted days, warm-started; the line retrains in full), "
                        "estimate:STORE (CTR(k)/CTR(1) on randomized traffic) "
                        "or a file of p(1), p(2), ...")
    p.add_argument("--clip", type=float, default=None, metavar="TAU", help="--ips: p := max(p, TAU)")


def refusal(learner: str) -> str | None:
    """Why the nightly line ``learner`` cannot be weighted (one line), or None when it can."""
    why = UNWEIGHTED.get(learner)
    return None if why is None else f"--learner {learner} cannot be weighted: {why}"


def row_column_names(args) -> dict | None:
    """``{store column: day column}`` of the ``--<col>-column`` options given, or None."""
    named = {n: getattr(args, f"{n}_column") for n in _COLUMNS if getattr(args, f"{n}_column", None) is not None}
    return named or None


def weighting_of(args, error) -> dict | None:
    """The night's weighting ``{"weights": "weight"}`` / ``{"ips": {"propensity", "clip"}}`` or None;
    ``error(message)`` for a usage error (argparse's: exit 2)."""
    if args.weights is not None and args.ips:
        error("give --weights COL or --ips, not both")
    if not args.ips and (args.propensity is not None or args.clip is not None):
        error("--propensity / --clip are options of --ips")
    if args.ips and args.propensity is None:
        error("--ips needs --propensity eta=E | estimate:em | estimate:harvest | estimate:STORE | FILE")
    if (args.weights is not None or args.ips) and args.learner in UNWEIGHTED:
        error(f"--weights / --ips: {refusal(args.learner)}")
    if args.weights is not None and args.weights != "weight":
        error(f"--weights {args.weights}: the store's row weights are its column 'weight'")
    if args.ips and args.ties == "include":
        error("--ips trains with tied click pairs excluded; --ties include would keep them: not the IPS objective")
    if args.weights is not None:
        return {"weights": args.weights}
    if args.ips:
        return {"ips": {"propensity": args.propensity, "clip": args.clip}}
    return None


def weighted_store(store, weighting, storage_options=None, propensity=None):
    """``store`` as the night trains on it (itself without a weighting); ``propensity``: tonight's estimated θ
    (``--propensity estimate:em|harvest``: :mod:`streamrank.pipelines._nightly_propensity`)."""
    from streamrank.io.weighted import ips_weighted, propensity_from_spec, with_weights

    if not weighting:
        return store
    if "weights" in weighting:
        return with_weights(store, weighting["weights"])
    spec = weighting["ips"]
    p = propensity if propensity is not None else propensity_from_spec(spec["propensity"],
                                                                       storage_options=storage_options)
    return ips_weighted(store, p, clip=spec["clip"])


def check_same_weighting(base_meta: dict, weighting, base: str) -> None:
    """An incremental night keeps the model line's weighting (its statistics were accumulated with it)."""
    was = base_meta.get("weighting")
    if (was or None) != (weighting or None):
        raise ValueError(f"the current model {base} was trained with weighting {was or 'none'}; tonight asks for "
                         f"{weighting or 'none'}: its statistics cannot be mixed, run once with --full")

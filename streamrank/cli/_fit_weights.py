"""``streamrank fit/cv --weights weight`` and ``--ips --propensity SPEC [--clip TAU]``: training on click logs.

A store may keep per-row ``weight``, ``click`` and ``position`` columns
(``ingest --weight-column/--click-column/--position-column``).  Weights are
opt-in, as ``sample_weight`` is in scikit-learn:

``--weights weight``
    every row weighs its ``weight`` (a pair w_i w_j): ``with_weights(store, "weight")``.
``--ips --propensity SPEC``
    inverse propensity scoring (Joachims et al. 2017): targets = the
    ``click`` column, pairs (clicked i, not clicked j) weighted 1 / p(pos_i)
    — ``ips_weighted(store, p, clip=TAU)``.  SPEC: ``eta=E`` (p(k) = (1/k)^E),
    ``estimate:STORE`` (CTR(k)/CTR(1) on a store of result-randomization
    traffic), or a file of p(1), p(2), … (:func:`streamrank.io.weighted.propensity_from_spec`).
    ``estimate:em`` / ``estimate:harvest`` estimate p from the training store
    itself, before the fit: regression EM of the position-based click model
    on its features, clicks and positions, or intervention harvesting across
    the rankers of its ``ranker`` column (:mod:`streamrank.position_bias`);
    the estimate is kept in the model record (``ips.estimated``).
    The RankRLS learners train with ``ties="exclude"`` (``--ties include``
    would keep the tied pairs: not the IPS objective, refused).

Both apply to the RankRLS learners and sgd-pairwise; sgd-bilinear (tuple
stores) refuses them, as does a store without the columns — before any pass.
"""
from __future__ import annotations

from ._common import UsageError
from ._options import Given, GivenTrue, was_given

__all__ = ["add_weight_args", "check_weight_args", "weighted_view"]


def add_weight_args(p) -> None:
    c = p.add_argument_group("click logs (rankrls, cg, kernel, sparse-kernel, sgd-pairwise)")
    c.add_argument("--weights", action=Given, default=None, metavar="COL",
                   help="train with the store's row weights: the column 'weight' (ingest --weight-column)")
    c.add_argument("--ips", action=GivenTrue,
                   help="inverse propensity scoring: clicks as targets, (clicked, unclicked) pairs weighted "
                        "1/p(position) (store columns 'click' and 'position'; needs --propensity)")
    c.add_argument("--propensity", action=Given, default=None, metavar="SPEC",
                   help="--ips: eta=E (p(k) = (1/k)^E), estimate:em (regression EM on this store's clicks), "
                        "estimate:harvest (across the rankers of its 'ranker' column), "
                        "estimate:STORE (CTR(k)/CTR(1) on randomized traffic) "
                        "or a file of p(1), p(2), ...")
    c.add_argument("--clip", action=Given, type=float, default=None, metavar="TAU",
                   help="--ips: propensity clipping, p := max(p, TAU) (weights at most 1/TAU)")


def check_weight_args(args, store=None) -> None:
    """Refuse combinations that cannot apply (before any data is read); with ``store``, its columns too."""
    ips, col = bool(getattr(args, "ips", False)), getattr(args, "weights", None)
    if ips and col is not None:
        raise UsageError("give --weights COL or --ips, not both (the IPS weights come from clicks and positions)")
    if not ips and (getattr(args, "propensity", None) is not None or getattr(args, "clip", None) is not None):
        raise UsageError("--propensity / --clip are options of --ips")
    if ips and getattr(args, "propensity", None) is None:
        raise UsageError("--ips needs --propensity eta=E | estimate:STORE | FILE")
    if ips and args.learner in ("rankrls", "cg", "kernel", "sparse-kernel") and was_given(args, "ties") \
            and args.ties != "exclude":
        raise UsageError("--ips trains RankRLS with --ties exclude (tied click pairs drop out); --ties include "
                         "would keep them: not the IPS objective")
    if col is not None and col != "weight":
        raise UsageError(f"--weights {col}: the store's row weights are its column 'weight'")
    if ips and args.learner in ("rankrls", "cg", "kernel", "sparse-kernel"):
        args.ties = "exclude"
    if store is not None:
        from ..position_bias import ESTIMATED_SPECS

        need = (ESTIMATED_SPECS.get(args.propensity, ("click", "position")) if ips
                else ((col,) if col is not None else ()))
        missing = [c for c in need if c not in store.row_columns]
        if missing:
            raise UsageError(f"{'--ips' if ips else '--weights'}: the store {args.store} keeps no {missing[0]!r} "
                             f"column (it keeps {list(store.row_columns) or 'none'}; ingest with "
                             f"--{missing[0]}-column COL)")


def weighted_view(args, source, record: dict, store=None):
    """``source`` weighted as asked (or itself), noting what in ``record``; ``store``: the GroupStore under
    ``source`` (what ``--propensity estimate:em|harvest`` estimates from; default ``source``)."""
    from ..io.weighted import ips_weighted, propensity_from_spec, with_weights
    from ._stores import url_options

    if getattr(args, "weights", None) is not None:
        record["weights"] = args.weights
        return with_weights(source, args.weights)
    if getattr(args, "ips", False):
        from ..position_bias import ESTIMATED_SPECS, store_propensity

        if args.propensity in ESTIMATED_SPECS:
            try:
                p, note = store_propensity(source if store is None else store, args.propensity,
                                           max_rows=getattr(args, "max_rows", None) or 65536)
            except ValueError as exc:
                raise UsageError(f"--propensity {args.propensity}: {exc}") from None
            record["ips"] = {"propensity": args.propensity, "clip": args.clip, "estimated": note}
            return ips_weighted(source, p, clip=args.clip)
        try:
            p = propensity_from_spec(args.propensity, storage_options=url_options(args.propensity[9:])
                                     if args.propensity.startswith("estimate:") else None)
        except ValueError as exc:
            raise UsageError(f"--propensity: {exc}") from None
        record["ips"] = {"propensity": args.propensity, "clip": args.clip}
        return ips_weighted(source, p, clip=args.clip)
    return source

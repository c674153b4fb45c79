"""Sparse (basis) KernelRankRLS on a cluster: a distributed reservoir of the basis rows, then statistics."""
from __future__ import annotations

import numpy as np

from .._phases import phase
from ._cluster import _compact, _params_only, _ship_source, get_client
from ._retry import with_retries
from ._statistics import reduce_counted

__all__ = ["fit_kernel_sparse"]


class _Reservoir:
    """Mergeable Algorithm-R reservoir: slot -> (row index t, row); the largest t wins a slot.

    ``moments``: the column moments of the rows seen (normalize=; they ride on the sampling pass, as locally).
    """

    def __init__(self, slots, moments=None):
        self.slots = slots
        self.moments = moments

    def merge(self, other):
        for k, (t, row) in other.slots.items():
            cur = self.slots.get(k)
            if cur is None or t > cur[0]:
                self.slots[k] = (t, row)
        if getattr(other, "moments", None) is not None:
            self.moments = other.moments.copy() if self.moments is None else self.moments.merge(other.moments)
        return self


def _moments_task(plan, ref):
    """Column moments of one block (normalize= with a given basis: no sampling pass to ride on)."""
    from ..normalize import FeatureMoments

    block = ref.open().read_block(*plan)
    return _Reservoir({}, FeatureMoments(block.X.shape[1]).update(block.X))


def _reservoir_task(plan, ref, r, state, moments=False):
    """Slots won by this block's rows: the draw of global row t is the t-th uniform of the stream."""
    import scipy.sparse as sp

    block = ref.open().read_block(*plan)
    n = block.n_rows
    t = block.start + np.arange(n)
    bg = getattr(np.random, state["bit_generator"])()
    bg.state = state
    bg.advance(block.start)          # one 64-bit draw per uniform: jump to this block's first row
    u = np.random.Generator(bg).random(n)
    j = np.where(t < r, t, np.floor(u * (t + 1)).astype(np.int64))
    slots = {}
    for row in np.flatnonzero(j < r):   # later rows overwrite earlier ones, as in the local pass
        x = block.X[row] if sp.issparse(block.X) else np.array(block.X[row], dtype=np.float64)
        slots[int(j[row])] = (int(t[row]), x)
    mom = None
    if moments:
        from ..normalize import FeatureMoments

        mom = FeatureMoments(block.X.shape[1]).update(block.X)
    return _Reservoir(slots, mom)


def _kernel_stats_task(plan, ref, est, basis, n_outputs, normalizer=None):
    from ..rankrls._statistics import block_statistics

    block = ref.open().read_block(*plan)
    spec = est.kernel_function()
    if normalizer is None:
        def transform(X):
            return spec(X, basis)
    else:                                   # k(x̃, R̃): rows scaled as the local NormalizedSource does
        def transform(X):
            return spec(normalizer.transform(X), basis)
    return _compact(block_statistics(block, group_weight=est.group_weight, ties=est.ties,
                                     transform=transform, n_outputs=n_outputs, per_output=True))


def fit_kernel_sparse(est, source, client, *, max_rows, split_every):
    """Sparse (basis) KernelRankRLS: distributed reservoir of the basis rows, then distributed statistics.

    The reservoir reproduces the local one exactly (Algorithm R with the
    t-th uniform of ``default_rng(random_state)`` for row t; each worker
    jumps its generator to its block's first row with ``advance``), so the
    basis, and hence the model, equal ``est.fit(source)``'s.  With
    ``normalize=`` the column moments are reduced with the reservoir (a given
    basis: one pass of their own, as locally), the basis rows and every
    block are scaled by the fitted normalizer before the kernel.
    """
    import scipy.sparse as sp

    from .._validation import check_X

    from ..normalize import NormalizedSource

    est.check_params()
    m = source.n_rows
    proto = _params_only(est)
    want = getattr(est, "normalize", None) is not None
    moments = None
    with get_client(client) as c:
        ref = _ship_source(c, source)
        if isinstance(est.basis, str):
            r = int(est.n_basis)
            if r > m:
                raise ValueError(f"n_basis={r} exceeds the number of training rows ({m})")
            rng = np.random.default_rng(est.random_state)
            state = rng.bit_generator.state
            if not hasattr(rng.bit_generator, "advance"):
                raise NotImplementedError(f"random_state's bit generator {state['bit_generator']} cannot jump "
                                          "ahead; pass an int seed")
            parts = c.map(_reservoir_task, source.plan(max_rows, split_groups=True), ref=ref, r=r, state=state,
                          moments=want, pure=False)
            res = reduce_counted(c, parts, f"basis reservoir ({r:,} rows)", split_every=split_every)
            moments = res.moments
            rows = [res.slots[k][1] for k in range(r)]
            Xb = (sp.vstack(rows, format="csr").astype(np.float64) if sp.issparse(rows[0])
                  else np.vstack(rows).astype(np.float64))
        else:
            Xb = check_X(est.basis, "basis", n_features=source.n_features, min_rows=1)
            r = Xb.shape[0]
            if want:
                parts = c.map(_moments_task, source.plan(max_rows, split_groups=True), ref=ref, pure=False)
                moments = reduce_counted(c, parts, "feature moments", split_every=split_every).moments
        normalizer = None
        if want:
            normalizer = moments.normalizer(est.normalize)
            Xb = normalizer.transform(Xb)
        refs = [ref]

        def kernel_stats():
            basis = c.scatter(Xb, hash=False)       # not broadcast (streamrank.distributed._retry)
            parts = c.map(_kernel_stats_task, source.plan(max_rows, split_groups=True), ref=refs[0], est=proto,
                          basis=basis, n_outputs=source.n_outputs, normalizer=normalizer, pure=False)
            return reduce_counted(c, parts, f"kernel statistics ({Xb.shape[0]:,} basis rows)",
                                  split_every=split_every)

        stats, _ = with_retries(c, kernel_stats, on_loss=lambda: refs.__setitem__(0, _ship_source(c, source)))
    if normalizer is not None:
        source = NormalizedSource(source, normalizer)
    with phase(f"solve ({Xb.shape[0]:,} x {Xb.shape[0]:,})"):
        return est.fit_basis_statistics(stats, Xb, source, max_rows, normalizer=normalizer)

"""ONNX graphs of streamrank models (opset 17), for onnxruntime, Vespa and model servers.

Inputs and outputs are float32, as serving runtimes feed them; the arithmetic
inside is float64 (one ``Cast`` in, one out), the precision ``predict`` uses,
so an exported model's scores equal ``predict`` of the same float32 rows to
float32 rounding.  The graphs:

* linear (RankRLS, PairwiseSGDRanker)::

      X (N, n) → Cast → [ (X − offset) / scale ] → MatMul W (n, v) → score (N,) or (N, v)

* kernel (KernelRankRLS dual and sparse, TransductiveRankRLS), f(x) = k(x̃, R) A with
  the basis R as an initializer (Rᵀ, (n, r)) and P = x̃ Rᵀ:

      linear  K = P
      poly    K = (γ P + coef0)^degree
      rbf     K = exp(−γ · max(‖x̃‖² − 2 P + ‖R‖², 0))     (the expansion ``predict`` uses)

  then score = K A.  A sparse basis is densified (r · n float64 entries).
* bilinear (SparseSGDRanker), f(q, d) = qᵀ W d for row-aligned inputs ``Q`` (N, n_q)
  and ``D`` (N, n_d):

      "dense":  score = ReduceSum((Q W) ∘ D, axis 1)                   W dense (n_q, n_d)
      "gather": score = ReduceSum(Q[:, rows] ∘ w ∘ D[:, cols], axis 1)  W as its nnz (rows, cols, w)

  ``"auto"`` takes "dense" while n_q · n_d ≤ :data:`DENSE_W_MAX_ENTRIES`
  (2²², a 32 MB float64 initializer), else "gather", whose size and cost are
  ∝ nnz(W) (memory N · nnz per batch).  The inputs are dense rows in both;
  ONNX sparse-tensor inputs are not accepted by the common runtimes.

Normalization (``normalize=``) is part of the graph (bilinear: its scales are
folded into W, W' = diag(1/s) W diag(1/t), by :func:`~streamrank.exporters._describe.describe`).
Every graph carries the feature names (if known) and the streamrank class in its metadata.
"""
from __future__ import annotations

import json

import numpy as np
import scipy.sparse as sp

from ._describe import CannotExport, ModelDescription
from ._optional import require

__all__ = ["to_onnx", "DENSE_W_MAX_ENTRIES", "OPSET", "BILINEAR_GRAPHS"]

OPSET = 17
IR_VERSION = 8            # read by onnxruntime >= 1.10
DENSE_W_MAX_ENTRIES = 1 << 22
BILINEAR_GRAPHS = ("auto", "dense", "gather")
DENSE_BASIS_MAX_ENTRIES = 1 << 27   # 1 GB of float64: beyond this protobuf's 2 GB limit is near


def _onnx():
    return require("onnx")


class _Graph:
    """A tiny builder: named float64 initializers and nodes with fresh output names."""

    def __init__(self):
        self.onnx = _onnx()
        self.nodes, self.inits, self._k = [], [], 0

    def const(self, name, value, dtype=np.float64):
        arr = np.asarray(value, dtype=dtype)
        self.inits.append(self.onnx.numpy_helper.from_array(arr, name=name))
        return name

    def op(self, op_type, *inputs, **attrs):
        self._k += 1
        out = f"{op_type.lower()}_{self._k}"
        self.nodes.append(self.onnx.helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def model(self, inputs, out, out_shape, desc, graph_name):
        h, TP = self.onnx.helper, self.onnx.TensorProto
        final = self.op("Cast", out, to=TP.FLOAT)
        self.nodes.append(h.make_node("Identity", [final], ["score"]))
        graph = h.make_graph(self.nodes, graph_name,
                             [h.make_tensor_value_info(n, TP.FLOAT, shape) for n, shape in inputs],
                             [h.make_tensor_value_info("score", TP.FLOAT, out_shape)],
                             initializer=self.inits)
        m = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)], producer_name="streamrank")
        m.ir_version = IR_VERSION
        meta = {"streamrank_class": desc.model_class, "kind": desc.kind}
        if desc.feature_names is not None:
            meta["feature_names"] = json.dumps(desc.feature_names)
        if desc.query_feature_names is not None:
            meta["query_feature_names"] = json.dumps(desc.query_feature_names)
        if desc.normalizer is not None:
            meta["normalize"] = desc.normalizer.kind
        h.set_model_props(m, meta)
        self.onnx.checker.check_model(m)
        return m


def _normalized_input(g: _Graph, desc: ModelDescription, name="X"):
    x = g.op("Cast", name, to=g.onnx.TensorProto.DOUBLE)
    norm = desc.normalizer
    if norm is not None:
        x = g.op("Div", g.op("Sub", x, g.const("feature_offset", norm.offset)),
                 g.const("feature_scale", norm.scale))
    return x


def _output(g: _Graph, t, v):
    """(N, v) → (N,) for one output."""
    if v == 1:
        return g.op("Reshape", t, g.const("flat_shape", [-1], np.int64)), ["N"]
    return t, ["N", v]


def _linear(desc, name):
    g = _Graph()
    x = _normalized_input(g, desc)
    W = desc.weights.reshape(desc.n_features, -1)
    out, shape = _output(g, g.op("MatMul", x, g.const("weights", W)), W.shape[1])
    return g.model([("X", ["N", desc.n_features])], out, shape, desc, name)


def _kernel(desc, name):
    g = _Graph()
    R = desc.basis
    r, n = R.shape
    if sp.issparse(R):
        if r * n > DENSE_BASIS_MAX_ENTRIES:
            raise CannotExport(f"the sparse basis ({r} x {n}) is too large to hold densely in an ONNX graph "
                               f"(limit {DENSE_BASIS_MAX_ENTRIES} entries); export it with format='json'")
        R = R.toarray()
    R = np.asarray(R, dtype=np.float64)
    x = _normalized_input(g, desc)
    P = g.op("MatMul", x, g.const("basis_T", np.ascontiguousarray(R.T)))
    k = desc.kernel
    if k["name"] == "linear":
        K = P
    elif k["name"] == "poly":
        K = g.op("Pow", g.op("Add", g.op("Mul", P, g.const("gamma", k["gamma"])), g.const("coef0", k["coef0"])),
                 g.const("degree", float(k["degree"])))
    elif k["name"] == "rbf":
        xx = g.op("ReduceSum", g.op("Mul", x, x), g.const("axis_1", [1], np.int64), keepdims=1)
        zz = g.const("basis_sq_norms", (R * R).sum(axis=1)[None, :])
        d2 = g.op("Add", g.op("Sub", xx, g.op("Mul", P, g.const("two", 2.0))), zz)
        d2 = g.op("Max", d2, g.const("zero", 0.0))
        K = g.op("Exp", g.op("Mul", d2, g.const("minus_gamma", -k["gamma"])))
    else:  # pragma: no cover - describe() refuses callables, check_kernel the rest
        raise CannotExport(f"kernel {k['name']!r} has no ONNX form")
    A = desc.dual_coef.reshape(r, -1)
    out, shape = _output(g, g.op("MatMul", K, g.const("dual_coef", A)), A.shape[1])
    return g.model([("X", ["N", n])], out, shape, desc, name)


def _bilinear(desc, name, graph):
    if graph not in BILINEAR_GRAPHS:
        raise ValueError(f"bilinear_graph must be one of {BILINEAR_GRAPHS}, got {graph!r}")
    W = desc.W.tocoo()
    nq, nd = W.shape
    if graph == "auto":
        graph = "dense" if nq * nd <= DENSE_W_MAX_ENTRIES else "gather"
    g = _Graph()
    q = g.op("Cast", "Q", to=g.onnx.TensorProto.DOUBLE)
    d = g.op("Cast", "D", to=g.onnx.TensorProto.DOUBLE)
    axis = g.const("axis_1", [1], np.int64)
    if graph == "dense":
        prod = g.op("Mul", g.op("MatMul", q, g.const("W", W.toarray())), d)
    else:
        gq = g.op("Gather", q, g.const("W_rows", W.row.astype(np.int64), np.int64), axis=1)
        gd = g.op("Gather", d, g.const("W_cols", W.col.astype(np.int64), np.int64), axis=1)
        prod = g.op("Mul", g.op("Mul", gq, g.const("W_values", W.data)), gd)
    out = g.op("ReduceSum", prod, axis, keepdims=0)
    return g.model([("Q", ["N", nq]), ("D", ["N", nd])], out, ["N"], desc, name)


def to_onnx(desc: ModelDescription, *, name: str = "streamrank", bilinear_graph: str = "auto"):
    """The ``onnx.ModelProto`` of a described model (see the module docstring)."""
    if desc.kind == "linear":
        return _linear(desc, name)
    if desc.kind == "kernel":
        return _kernel(desc, name)
    return _bilinear(desc, name, bilinear_graph)

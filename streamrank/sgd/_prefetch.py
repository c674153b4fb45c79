"""``prefetch(arr, idx)``: a hint to the CPU to fetch ``arr[idx]`` into cache (``llvm.prefetch``).

For numba kernels whose memory accesses are scattered but known a few steps
ahead (rows of the bilinear W in its pool).  A hint only: it never changes a
result.
"""
from __future__ import annotations

import llvmlite
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["prefetch"]

# the intrinsic's name mangles the pointer type: typed pointers (llvmlite <= 0.50 default) vs opaque
_PREFETCH_NAME = ("llvm.prefetch.p0i8" if getattr(llvmlite, "ir_layer_typed_pointers_enabled", True)
                  else "llvm.prefetch.p0")


@intrinsic
def prefetch(typingctx, arr, idx):
    """``llvm.prefetch`` (read, high locality) of ``arr[idx]``: a hint, no effect on results."""
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), _PREFETCH_NAME)
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3),
                          ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen

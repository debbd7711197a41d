"""``prefetch(arr, i)``: a cache prefetch hint for ``arr[i]`` inside numba kernels (LLVM ``llvm.prefetch``).

Why: on large devices the maps (L2P, P2L: hundreds of MB) do not fit in cache, and each host
write starts with a dependent L2P load that misses to DRAM; fetching the L2P entries of the next
ops (and of the pages a GC victim is about to move) ahead of use overlaps those misses. It is only
a hint: any index (even a stale one) is safe, nothing is read into the program.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def prefetch(typingctx, arr, idx):
    if not isinstance(arr, types.Array) or not isinstance(idx, types.Integer):
        return None
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        # rw = 1 (the entry is written soon), locality = 3 (keep), data cache
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(1), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen

"""Arrow arrays to and from numpy through their buffers, for the plain types kvbed's files hold.

pyarrow's own conversions (``Array.to_numpy``, ``pa.array``) import pandas the first time they run, to
recognise pandas objects kvbed never passes: about 0.2 s of CPU in every replay. Fixed-width numbers and
strings need no pandas; anything else still goes through pyarrow.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pyarrow as pa


def _numpy_dtype(t: pa.DataType) -> np.dtype | None:
    kind = ("i" if pa.types.is_signed_integer(t) else "u" if pa.types.is_unsigned_integer(t)
            else "f" if pa.types.is_floating(t) else None)
    return None if kind is None else np.dtype(f"<{kind}{t.bit_width // 8}")


def to_numpy(arr: pa.Array) -> np.ndarray:
    """The values of a fixed-width numeric array without nulls as a read-only view of its data buffer (what
    ``arr.to_numpy()`` gives); any other array through ``to_numpy(zero_copy_only=False)``."""
    dtype = _numpy_dtype(arr.type)
    if dtype is None or arr.null_count:
        return arr.to_numpy(zero_copy_only=False)
    return np.frombuffer(arr.buffers()[1], dtype, count=len(arr), offset=arr.offset * dtype.itemsize)


def column_to_numpy(column: pa.ChunkedArray, dtype: np.dtype | type | None = None) -> np.ndarray:
    """A column's values, chunks concatenated, as a new (writable) array of ``dtype`` (default: the column's)."""
    if not column.num_chunks:
        return np.zeros(0, dtype or _numpy_dtype(column.type) or object)
    out = np.concatenate([to_numpy(c) for c in column.chunks])
    return out if dtype is None else out.astype(dtype, copy=False)


def from_values(values: Sequence[Any], typ: pa.DataType) -> pa.Array:
    """``pa.array(values, typ)`` for a list of numbers or strings with None for null, and ``typ`` a fixed-width
    numeric type or ``pa.string()``; a numpy array is taken as it is (no nulls)."""
    n = len(values)
    if isinstance(values, np.ndarray):
        valid, nulls = None, 0
    else:
        valid = np.fromiter((v is not None for v in values), bool, n)
        nulls = n - int(np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    if pa.types.is_string(typ):
        data = [b"" if v is None else v.encode() for v in values]
        offsets = np.zeros(n + 1, np.int32)
        np.cumsum(np.fromiter(map(len, data), np.int32, n), out=offsets[1:])
        return pa.Array.from_buffers(typ, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))],
                                     null_count=nulls)
    dtype = _numpy_dtype(typ)
    if dtype is None:
        raise TypeError(f"from_values: {typ} is neither a fixed-width number nor a string")
    if nulls:
        values = [0 if v is None else v for v in values]
    data = np.ascontiguousarray(values, dtype)
    return pa.Array.from_buffers(typ, n, [bitmap, pa.py_buffer(data)], null_count=nulls)

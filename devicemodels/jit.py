"""``kernel``: the njit flavour for functions that take a device's state tuple.

Why not plain ``@njit``: numba reference-counts every array it touches through a tuple argument
(an out-of-line NRT call per array per use), which made a call to a small per-line helper such as
"close this line" cost ~150-300 ns (~5 ns without). Kernels here never allocate or return arrays,
so they are compiled without the runtime (``_nrt=False``; numba's own flag, used in its tests):
no reference counting at all. Scratch space lives in the state instead of being allocated.
The replay's layout and hint kernels use it for the same reason (they share small helpers).
"""

from __future__ import annotations

from numba import njit


def kernel(fn=None, **options):
    """``@kernel`` / ``@kernel(inline="always")``: cached njit without reference counting."""
    deco = njit(cache=True, _nrt=False, **options)
    return deco if fn is None else deco(fn)

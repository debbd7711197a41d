"""The one place kvbed's numba kernels come from: ``njit`` (cached) and ``kernel`` (cached, no refcounting).

Why a cache of our own: numba keys a cached kernel on its own source file only, not on the modules it
inlines from (histogram.py, ftl_state.py, layout/common.py...), so after such an edit a stale kernel would
silently run the old code. Here every kernel's cache index is stamped with a fingerprint of all kernel
sources (devicemodels/ and kvreplay/): any edit there makes every kernel recompile once.

Why lazy: numba's own cache sets up its directory when a function is decorated, i.e. on import. Ours
does nothing until a kernel is first compiled or loaded: importing kvbed changes no environment
variable and touches no file. The directory is ``NUMBA_CACHE_DIR`` when the user set it (the Makefile
sets ``.cache/numba``), else ``$XDG_CACHE_HOME/kvbed/numba``; if it cannot be made, kernels still
run, compiled in every process.

Why ``kernel`` (``_nrt=False``): numba reference-counts every array it touches through a tuple argument
(an out-of-line NRT call per array per use), which made a call to a small per-line helper such as "close
this line" cost ~150-300 ns (~5 ns without). Kernels here never allocate or return arrays, so they are
compiled without the runtime (numba's own flag, used in its tests): no reference counting at all.
Scratch space lives in the state instead of being allocated. The replay's layout and hint kernels use
it for the same reason (they share small helpers).

Compile time: :func:`compile_clock` measures the wall time a block spends compiling kernels or loading
them from the cache, so a run can report its own speed apart from it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import threading
from pathlib import Path
from typing import Iterator

import numba
from numba.core import caching, event

_PACKAGES = ("devicemodels", "kvreplay")
_ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def source_fingerprint(root: Path = _ROOT) -> str:
    """sha1 over the path and bytes of every .py file of the kernel packages (read once per process)."""
    h = hashlib.sha1()
    for pkg in _PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            h.update(path.relative_to(root).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cache_base() -> Path:
    """Where compiled kernels are kept (read, never set, from the environment)."""
    given = numba.config.CACHE_DIR or os.environ.get("NUMBA_CACHE_DIR")
    if given:
        return Path(given)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "kvbed" / "numba"


class _Locator(caching._CacheLocator):
    """numba's locator contract: a directory per source directory under :func:`cache_base`, and the
    kernel sources' fingerprint as the freshness stamp (instead of the kernel's own file)."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = str(cache_base() / self.get_suitable_cache_subpath(py_file))

    def get_cache_path(self):
        return self._cache_path

    def get_source_stamp(self):
        return source_fingerprint()

    def get_disambiguator(self):
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        self = cls(py_func, py_file)
        try:
            self.ensure_cache_path()
        except OSError:
            return None
        return self


class _Impl(caching.CompileResultCacheImpl):
    _locator_classes = [_Locator]


class _FunctionCache(caching.FunctionCache):
    _impl_class = _Impl


class _LazyCache(caching._Cache):
    """Stands in for numba's per-function cache; builds the real one at the first load or save."""

    def __init__(self, py_func):
        self._py_func = py_func
        self._real: caching._Cache | None = None
        self._lock = threading.Lock()

    def _get(self) -> caching._Cache:
        with self._lock:
            if self._real is None:
                try:
                    self._real = _FunctionCache(self._py_func)
                except RuntimeError:  # no usable directory: compile every time, as without a cache
                    self._real = caching.NullCache()
            return self._real

    @property
    def cache_path(self):
        return self._get().cache_path

    def load_overload(self, sig, target_context):
        return self._get().load_overload(sig, target_context)

    def save_overload(self, sig, data):
        return self._get().save_overload(sig, data)

    def enable(self):
        self._get().enable()

    def disable(self):
        self._get().disable()

    def flush(self):
        self._get().flush()


def _cached(options: dict):
    def deco(fn):
        disp = numba.njit(**options)(fn)
        disp._cache = _LazyCache(disp.py_func)  # what Dispatcher.enable_caching() does, minus the I/O
        return disp

    return deco


def njit(fn=None, **options):
    """``@njit`` / ``@njit(inline="always", nogil=True)``: numba's njit with kvbed's lazy, fingerprinted cache."""
    deco = _cached(options)
    return deco if fn is None else deco(fn)


def kernel(fn=None, **options):
    """``@kernel`` / ``@kernel(inline="always")``: cached njit without reference counting."""
    deco = _cached({"_nrt": False, **options})
    return deco if fn is None else deco(fn)


@contextlib.contextmanager
def compile_clock() -> Iterator[event.TimingListener]:
    """``with compile_clock() as c: ...``: ``compile_seconds(c)`` is the wall time the body spent compiling
    kernels or loading them from the cache, in any thread: numba holds (or waits for) its compiler lock
    for both, and a cache load is no ``numba:compile`` event."""
    with event.install_listener("numba:compiler_lock", event.TimingListener()) as listener:
        yield listener


def compile_seconds(clock: event.TimingListener) -> float:
    return clock.duration if clock.done else 0.0

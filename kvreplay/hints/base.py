"""The hint-policy contract.

A policy gives every write of the replayed tier a placement class in
``[0, n_classes)``; the replay maps classes to FDP placement ids or ZNS zone
groups. Policies differ in what they may know, and each says so in ``knows``
(echoed into result.json), because a hint is only as honest as its information:

- an *online* policy sees the trace strictly in order, every tier's events up to
  and including the write it classifies, and nothing after it. Its state lives
  in numba arrays, and its answers must not depend on how the trace is cut into
  batches (tests replay with different batch sizes and with the future removed);
- an *offline* policy (``needs_future = True``) is additionally given the
  :class:`Future` of the replayed tier (when every write dies), computed in the
  replay's first pass; it exists to bound what any online policy could reach.
"""

from __future__ import annotations

import abc
import functools
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Iterator

import numpy as np

from kvreplay.layout.actions import pages_of
from kvreplay.schema import COLUMNS, EventBatch
from kvbed.core.errors import KvbedError
from kvbed.core.params import check_fields


@dataclass(frozen=True)
class NoParams:
    """A policy without parameters."""


@dataclass
class Future:
    """What the first pass learned about the replayed tier's writes, in write order.

    ``lifetime`` is how long each written copy lived on the lifetime clock
    (``clock``: "bytes" = bytes written to the tier meanwhile, "time" = trace
    ns), -1 for a copy still resident at the end of the trace. ``weight`` (its
    size in mapping units) weights the quantiles.
    """

    clock: str
    lifetime: np.ndarray  # int64, -1 = never dies
    weight: np.ndarray  # int32 mapping units

    @property
    def n(self) -> int:
        return len(self.lifetime)


@dataclass(frozen=True)
class DeviceFacts:
    """What a host reads from its drive before it writes: the mapping unit, the placement unit its streams fill
    (an FDP reclaim unit's nominal size from the FDP configurations log page, a zone's writable capacity; 0:
    none), the namespace's capacity, and the bytes the store keeps beside every object's payload (a recovery
    contract's header). A policy that uses them says so in ``knows``."""

    page_bytes: int
    unit_pages: int
    header_bytes: int = 0
    logical_pages: int = 0  # the namespace's capacity in pages (0: not known)

    def pages(self, nbytes: np.ndarray) -> np.ndarray:
        """Mapping units each write occupies on the device (as the replay's layout counts them)."""
        return pages_of(nbytes, self.page_bytes, self.header_bytes)


#: ``assign``'s ``seen`` when the caller did not run :meth:`HintPolicy.observe` ahead (None may be what it returned)
UNSEEN: Any = object()


#: the trace columns every policy is given; ``HintPolicy.columns`` names the others it reads
BASE_COLUMNS = ("ts_ns", "op", "obj_id", "tier", "nbytes")


class HintPolicy(abc.ABC):
    name: ClassVar[str]
    knows: ClassVar[str]  # one sentence: the information this policy uses
    needs_future: ClassVar[bool] = False
    Params: ClassVar[type] = NoParams
    #: trace columns read besides ts_ns, op, obj_id, tier, nbytes
    columns: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A policy's own ``__init__``, ``know_device`` and ``prepare`` (the replay calls them, as it calls
        ``_assign`` through :meth:`calling`): an exception in them gains a last line naming the policy."""
        super().__init_subclass__(**kwargs)
        for meth in ("__init__", "know_device", "prepare"):
            fn = cls.__dict__.get(meth)
            if fn is not None and not getattr(fn, "_kvbed_noting", False):
                setattr(cls, meth, _noting(fn, meth))

    def __init__(self, n_classes: int, params: Any = None, *, seed: int = 0, tier: int = 3):
        if n_classes < 1:
            raise ValueError("n_classes must be >= 1")
        self.n_classes = int(n_classes)
        label = f"hints {getattr(self, 'name', type(self).__name__)}"  # an unregistered class has no name
        self.params = check_fields(params if params is not None else self.Params(), label=label)
        self.seed = int(seed)
        self.tier = int(tier)
        self.writes_seen = 0
        self.device: DeviceFacts | None = None  # set by know_device() before the first write, when known

    def know_device(self, facts: DeviceFacts) -> None:
        """The drive's facts (:class:`DeviceFacts`), given before the first write; a policy may ignore them."""
        self.device = facts

    def prepare(self, future: Future) -> None:
        """Offline policies receive the tier's future here (called once, before replay)."""

    @abc.abstractmethod
    def _assign(self, batch: EventBatch, actions: np.ndarray, writes: np.ndarray) -> np.ndarray:
        """Classes (int16) for the events at ``writes`` (indices of WRITE actions in ``batch``). A policy that
        defines :meth:`observe` takes its result as a keyword argument, ``seen``."""

    def observe(self, batch: EventBatch, actions: np.ndarray, writes: np.ndarray) -> Any:
        """The part of classifying a batch that needs only the trace's events, none of the classes given before
        (``learned``'s causal feature pass); a policy that defines it gets its result in ``_assign(...,
        seen=...)``.

        The replay calls it for every batch in trace order, in its reading thread, up to three batches ahead of
        :meth:`assign` for the same batch, which then gets the result: the two halves overlap on two cores. So
        observe must touch only state that ``_assign`` never reads or writes (:func:`~kvreplay.hints.testing.
        check_online` checks it). A caller of :meth:`assign` without ``seen`` need not call it: assign does."""
        return None

    @classmethod
    def observes(cls) -> bool:
        """Whether the policy splits its work with :meth:`observe`."""
        return cls.observe is not HintPolicy.observe

    def assign(self, batch: EventBatch, actions: np.ndarray, writes: np.ndarray, seen: Any = UNSEEN) -> np.ndarray:
        """Classes (int16) for the writes of one batch, batches given in trace order; ``seen``: what
        :meth:`observe` returned for this batch, when the caller ran it ahead.

        What ``_assign`` returns is checked as it is, before any cast (:func:`checked_classes`): a numpy array of
        integers, one per write, each in ``[0, n_classes)``; anything else is a :class:`KvbedError` naming the
        policy."""
        batch = self.own_columns(batch)
        if self.observes():
            if seen is UNSEEN:
                seen = self.observe_batch(batch, actions, writes)
            with self.calling("_assign", batch):
                cls = self._assign(batch, actions, writes, seen=seen)
        else:
            with self.calling("_assign", batch):
                cls = self._assign(batch, actions, writes)
        self.writes_seen += len(writes)
        return checked_classes(policy_label(self), cls, len(writes), self.n_classes)

    def observe_batch(self, batch: EventBatch, actions: np.ndarray, writes: np.ndarray) -> Any:
        """:meth:`observe`, its failures said as :meth:`calling` says them (the replay's reading thread calls this)."""
        batch = self.own_columns(batch)
        with self.calling("observe", batch):
            return self.observe(batch, actions, writes)

    def own_columns(self, batch: EventBatch) -> EventBatch:
        """``batch`` with only the columns the policy may read (``ts_ns, op, obj_id, tier, nbytes`` and its
        ``columns``): a column the replay reads for another reason (a multi-tier run's ``request_id``) is not
        the policy's to read unless it declares it, so reading an undeclared one fails in every run alike."""
        allowed = (*BASE_COLUMNS, *self.columns)
        if all(k in allowed for k in batch):
            return batch
        return EventBatch({k: v for k, v in batch.items() if k in allowed})

    @contextmanager
    def calling(self, what: str, batch: EventBatch | None = None) -> Iterator[None]:
        """Run a piece of the policy's own code (``what``: the method). A trace column read from ``batch`` that
        the policy does not declare in ``columns`` is a one-line :class:`KvbedError`; any other exception keeps its
        traceback (the policy's author needs it) and gains a last line naming the policy."""
        try:
            yield
        except KvbedError:
            raise
        except KeyError as exc:
            col = exc.args[0] if len(exc.args) == 1 else None
            if batch is not None and isinstance(col, str) and col in COLUMNS and col not in batch:
                raise KvbedError(f"hint policy {policy_label(self)!r} reads the trace column {col!r} "
                                 f"(batch[{col!r}] in {what}) without declaring it: add {col!r} to its `columns`"
                                 ) from None
            _note(exc, self, what)
            raise
        except Exception as exc:
            _note(exc, self, what)
            raise

    def describe(self) -> dict[str, Any]:
        """Facts for result.json (edges learned, tables sizes...)."""
        return {}

    def memory_bytes(self) -> int:
        return 0


def policy_label(policy: Any) -> str:
    """What a policy (class or instance) is called in an error: its registry name (a plugin's spec), else its
    class name."""
    cls = policy if isinstance(policy, type) else type(policy)
    return cls.__dict__.get("name") or getattr(cls, "name", None) or cls.__name__


def _note(exc: BaseException, policy: Any, what: str) -> None:
    """Add the last line naming the policy to an exception from its code (once: the innermost call says it)."""
    if not getattr(exc, "_kvbed_policy_noted", False):
        exc.add_note(f"kvbed: the exception above was raised by hint policy {policy_label(policy)!r} (in its {what})")
        exc._kvbed_policy_noted = True  # type: ignore[attr-defined]


def _noting(fn: Any, what: str) -> Any:
    """``fn`` (a method of a policy), an exception from it noted as :func:`_note` does."""
    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except KvbedError:
            raise
        except Exception as exc:
            _note(exc, self, what)
            raise

    method._kvbed_noting = True  # type: ignore[attr-defined]
    return method


def checked_classes(label: str, cls: Any, n_writes: int, n_classes: int) -> np.ndarray:
    """``cls``, what a policy gave for ``n_writes`` writes, as int16 once it is what the contract asks: a numpy
    array of an integer dtype, one class per write, each in ``[0, n_classes)``. Checked on the value as given,
    before any cast (65537 would wrap to 1 in int16, 1.9 truncate to 1): otherwise a one-line
    :class:`KvbedError` naming the policy ``label``."""
    def bad(what: str) -> KvbedError:
        return KvbedError(f"hint policy {label!r} {what}")

    if not isinstance(cls, np.ndarray):
        raise bad(f"returned a {type(cls).__name__}, not a numpy array of integer classes (one per write)")
    if cls.dtype.kind not in "iu":
        raise bad(f"returned classes of dtype {cls.dtype}: classes are integers (an integer numpy dtype)")
    if cls.shape != (n_writes,):
        raise bad(f"returned {cls.shape[0] if cls.ndim == 1 else 'an array of shape ' + str(cls.shape)} classes "
                  f"for {n_writes} writes: one class per write")
    if n_writes:
        lo, hi = int(cls.min()), int(cls.max())
        if lo < 0 or hi >= n_classes:
            outside = np.unique(cls[(cls < 0) | (cls >= n_classes)])
            shown = ", ".join(map(str, outside[:5].tolist())) + (", ..." if len(outside) > 5 else "")
            raise bad(f"returned a class outside [0, {n_classes}): {shown}")
    return np.ascontiguousarray(cls, dtype=np.int16)


def lifetime_edges(lifetime: np.ndarray, weight: np.ndarray, n_classes: int) -> np.ndarray:
    """``n_classes - 1`` class edges at the weighted quantiles k/n of ``lifetime``.

    Class k holds lifetimes in (edge[k-1], edge[k]]: every class then carries
    about the same number of bytes, so each placement id sees a similar write
    rate. ``lifetime`` may hold +inf (never dies). When at least 1/n of the bytes
    never die, plain quantiles would put infinite edges on several classes and
    leave some empty; instead the never-dying copies get the top class alone and
    the finite lifetimes are split into the other n-1 at their own quantiles.
    """
    if n_classes <= 1 or len(lifetime) == 0:
        return np.zeros(0, np.float64)
    inf = ~np.isfinite(lifetime)
    w = weight.astype(np.float64)
    if inf.any() and w[inf].sum() * n_classes >= w.sum() and (~inf).any():
        finite = lifetime[~inf]
        return np.concatenate([lifetime_edges(finite, weight[~inf], n_classes - 1), [finite.max()]])
    order = np.argsort(lifetime, kind="stable")
    lt = lifetime[order]
    cw = np.cumsum(weight[order].astype(np.float64))
    targets = cw[-1] * np.arange(1, n_classes) / n_classes
    pos = np.minimum(np.searchsorted(cw, targets, side="left"), len(lt) - 1)
    return lt[pos].astype(np.float64)


def classes_from_edges(lifetime: np.ndarray, edges: np.ndarray) -> np.ndarray:
    return np.searchsorted(edges, lifetime, side="left").astype(np.int16)

"""Test helpers for hint policies, built-in or plugins: :func:`check_online` and :func:`classes_of`.

``check_online(MyPolicy)`` (or ``check_online(MyPolicy, trace="my.parquet")``) checks what the online contract
of :mod:`kvreplay.hints.base` asks and a static check cannot:

- *batch-independent*: the same classes whatever the batch boundaries (two different batch sizes). It is
  checked first, so a policy that reads later rows of its own batch usually fails here (what it sees ahead
  changes with the batch size);
- *causal*: the class of every write is the same whether or not the rest of the trace exists (the policy
  is run on the whole trace and on its first ``cut`` share of events, and the classes of the prefix
  compared) - a policy whose early classes depend on later batches fails;
- *observe apart*: a policy that splits its work with ``observe`` gives the same classes when every batch is
  observed before the first is assigned (the replay runs observe in its reading thread, ahead of assign);
- *well-formed*: ``knows`` says what it may know, ``needs_future`` is False, what ``_assign`` gives is what
  the replay takes (:func:`kvreplay.hints.base.checked_classes`: an integer numpy array, one class per write,
  in ``[0, n_classes)``, checked before any cast; the trace columns read declared), ``describe()`` is JSON,
  and it is deterministic for a seed.

It compares runs of the policy on the trace it is given, so it cannot see what the policy learns elsewhere: a
policy that reads the trace file itself (in ``__init__``, say) or a file of precomputed classes passes. It
checks ``n_classes=4`` unless told (a default FDP replay has 8).

It raises :class:`OnlineCheckFailed` (an AssertionError, so pytest shows it as a failed test) naming the
first failed property, and returns what it checked (:class:`OnlineReport`). The oracle fails it, by design
(tests/kvreplay/hints/test_plugins.py shows the check bites).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from kvbed.core.errors import KvbedError
from kvreplay import schema as S
from kvreplay.hints.base import DeviceFacts, Future, HintPolicy
from kvreplay.layout.actions import A_WRITE, action_table, select
from kvreplay.replay.scan import SCAN_COLUMNS, scan_trace


class OnlineCheckFailed(AssertionError):
    """A hint policy broke the online contract; the message says which property and where."""


@dataclass(frozen=True)
class OnlineReport:
    """What :func:`check_online` checked."""

    policy: str
    trace: str
    writes: int  # tier writes classified on the whole trace
    prefix_writes: int  # of them, in the prefix the causality check compares
    classes_used: int  # distinct classes given (1: the causality check shows little)
    n_classes: int


def _batches(batch: S.EventBatch, rows: int) -> Iterable[S.EventBatch]:
    for lo in range(0, batch.n, rows):
        yield batch.take(slice(lo, lo + rows))


def classes_of(policy_cls: type[HintPolicy], batches: Iterable[S.EventBatch], *, n_classes: int = 4,
               params: Any = None, seed: int = 0, tier: int = S.TIER_SSD,
               future_of: Path | None = None, future: Future | None = None,
               device: DeviceFacts | None = None, observe_ahead: bool = False) -> np.ndarray:
    """Run a policy over batches of trace events as the replay does; the class of every tier write, in order.
    An offline policy is prepared from ``future``, or from the future of the trace at ``future_of``; ``device``:
    the drive's facts as the replay gives them (:meth:`HintPolicy.know_device`), none when not given;
    ``observe_ahead``: :meth:`HintPolicy.observe` runs on every batch before the first is assigned (as far ahead
    as it can be), its results handed to assign."""
    pol = policy_cls(n_classes, params, seed=seed, tier=tier)
    if device is not None:
        pol.know_device(device)
    if policy_cls.needs_future:
        if future is None and future_of is None:
            raise ValueError(f"{policy_cls.__name__} needs the future: give future_of (the trace)")
        if future is None:
            clock = getattr(pol.params, "clock", "bytes")
            future = scan_trace(S.TraceReader(future_of), tier, 1 << 20, record_future=True, clock=clock).future
        pol.prepare(future)
    lut = action_table(tier)
    out = [np.zeros(0, np.int16)]
    selected = ((b, *select(lut, b["op"], b["tier"])) for b in batches)
    steps = ((b, act, tidx[act[tidx] == A_WRITE]) for b, act, tidx in selected)
    if observe_ahead:
        steps = [(b, act, writes, pol.observe_batch(b, act, writes)) for b, act, writes in steps]
    for b, act, writes, *seen in steps:
        cls = pol.assign(b, act, writes, *seen)
        if not (isinstance(cls, np.ndarray) and cls.dtype == np.int16 and cls.shape == (len(writes),)):
            raise OnlineCheckFailed(f"{policy_cls.__name__}.assign: expected int16[{len(writes)}] (one class per "
                                    f"write), got {getattr(cls, 'dtype', type(cls))}{getattr(cls, 'shape', '')}")
        out.append(cls)
    classes = np.concatenate(out)
    if len(classes) and (classes.min() < 0 or classes.max() >= n_classes):
        raise OnlineCheckFailed(f"{policy_cls.__name__}: classes outside [0, {n_classes}): "
                                f"{sorted(set(np.unique(classes).tolist()) - set(range(n_classes)))}")
    try:
        json.dumps(pol.describe())
    except (TypeError, ValueError) as exc:
        raise OnlineCheckFailed(f"{policy_cls.__name__}.describe() is not JSON for result.json: {exc}") from None
    return classes


def demo_trace(directory: Path, duration_s: float = 240.0) -> Path:
    """A small synthetic trace (``kvbed trace synth`` defaults, shorter, a smaller SSD tier so copies die)."""
    import dataclasses

    from kvreplay.synth import SYNTH_TIER_DEFAULTS, SynthParams
    from kvreplay.tracegen import synth_trace

    out = Path(directory) / f"synth-{duration_s:g}s.parquet"
    if not out.exists():
        tier = dataclasses.replace(SYNTH_TIER_DEFAULTS, ssd_bytes=SYNTH_TIER_DEFAULTS.ssd_bytes // 64)
        synth_trace(SynthParams(duration_s=duration_s), tier, out)
    return out


def _first_difference(a: np.ndarray, b: np.ndarray) -> int:
    """The first write whose classes differ (the shorter length when the lengths differ)."""
    return int(np.flatnonzero(a != b)[0]) if len(a) == len(b) else min(len(a), len(b))


def check_online(policy_cls: type[HintPolicy], trace: str | Path | None = None, *, n_classes: int = 4,
                 params: Any = None, seed: int = 0, tier: int = S.TIER_SSD, cut: float = 0.55,
                 batch_rows: tuple[int, int] = (4096, 777), device: DeviceFacts | None = None) -> OnlineReport:
    """Check that ``policy_cls`` is a causal, well-formed online hint policy on ``trace`` (default: a small
    synthetic trace), told ``device`` (the drive's facts; default: the drive a replay at fill_ratio 1.0 would
    size, 1 MiB pages, no placement unit); :class:`OnlineCheckFailed` names what broke."""
    from kvreplay.hints.plugins import check_policy_class

    name = policy_cls.__name__
    try:
        check_policy_class(getattr(policy_cls, "name", name), policy_cls)
    except Exception as exc:
        raise OnlineCheckFailed(str(exc)) from None
    if policy_cls.needs_future:
        raise OnlineCheckFailed(f"{name}.needs_future is True: it reads the future, it is not online")
    if not 0 < cut < 1:
        raise ValueError("cut must be in (0, 1)")
    with tempfile.TemporaryDirectory(prefix="kvbed-check-online-") as tmp:
        path = Path(trace) if trace is not None else demo_trace(Path(tmp))
        cols = list(dict.fromkeys([*SCAN_COLUMNS, *policy_cls.columns]))
        reader = S.TraceReader(path)
        batch = S.EventBatch.concat(list(reader.iter_batches(cols)))
        if device is None:  # the drive a replay at fill_ratio 1.0 would size: its peak live pages, 1 MiB pages
            peak = scan_trace(reader, tier, 1 << 20).peak_live_pages
            device = DeviceFacts(page_bytes=1 << 20, unit_pages=0, logical_pages=max(1, peak))
    kw = dict(n_classes=n_classes, params=params, seed=seed, tier=tier, device=device)

    def classes(batches: Iterable[S.EventBatch], **more: Any) -> np.ndarray:
        try:  # what the replay refuses in one line (a class out of range, a float, an undeclared column...)
            return classes_of(policy_cls, batches, **kw, **more)
        except KvbedError as exc:
            raise OnlineCheckFailed(str(exc)) from None

    whole = classes(_batches(batch, batch_rows[0]))
    again = classes(_batches(batch, batch_rows[1]))
    prefix = classes(_batches(batch.take(slice(0, int(batch.n * cut))), batch_rows[0]))
    if len(whole) == 0:
        raise OnlineCheckFailed(f"{path}: no writes on tier {S.TIERS[tier]}: nothing to check")
    if not np.array_equal(whole, again):
        i = _first_difference(whole, again)
        raise OnlineCheckFailed(f"{name}: classes depend on batch boundaries (write {i}: {batch_rows[0]}-row "
                                f"batches vs {batch_rows[1]}-row batches)")
    if not np.array_equal(whole[: len(prefix)], prefix):
        i = int(np.flatnonzero(whole[: len(prefix)] != prefix)[0])
        raise OnlineCheckFailed(f"{name} is not causal: write {i} gets class {whole[i]} on the whole trace and "
                                f"{prefix[i]} when the trace ends after {cut:.0%} of its events")
    if not np.array_equal(whole, classes(_batches(batch, batch_rows[0]))):
        raise OnlineCheckFailed(f"{name}: two runs with seed {seed} give different classes")
    if policy_cls.observes():  # the replay runs observe ahead of assign, in another thread
        ahead = classes(_batches(batch, batch_rows[1]), observe_ahead=True)
        if not np.array_equal(whole, ahead):
            i = _first_difference(whole, ahead)
            raise OnlineCheckFailed(f"{name}: classes change when observe runs ahead of assign (write {i}, every "
                                    f"batch observed first): observe must touch nothing _assign reads or writes")
    return OnlineReport(getattr(policy_cls, "name", name), str(path), len(whole), len(prefix),
                        int(len(np.unique(whole))), n_classes)

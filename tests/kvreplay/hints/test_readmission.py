"""``readmission`` (issue 23, a cache-aware policy): a write of content the tier held before gets class 1, a first
admission class 0 - by hand, whatever the batching, causal; guarded by the survival test, it follows only where
readmitted copies outlive the horizon and first admissions do not."""

from __future__ import annotations

import numpy as np
import pytest

from kvreplay import schema as S
from kvreplay.hints import HINTS
from kvreplay.hints.abstain import SurvivalGuardParams
from kvreplay.hints.base import DeviceFacts
from kvreplay.hints.testing import classes_of

MIB = 1 << 20
W, E = S.OP_PERSIST, S.OP_EVICT
POLICY = HINTS.get("readmission")
UNGUARDED = SurvivalGuardParams(abstain=False)

# (op, object, content key): 1 (content 10) and 2 (content 20) written, 1 evicted, 3 holds content 10 again
# (readmitted), 4 has no content key (its object id stands in), 5 holds content 20 again, 4 is rewritten
HAND = [(W, 1, 10), (W, 2, 20), (E, 1, 10), (W, 3, 10), (W, 4, 0), (W, 5, 20), (W, 4, 0)]


def _batch(events):
    n = len(events)
    op, obj, ck = (np.array(c) for c in zip(*events))
    return S.make_batch(ts_ns=np.arange(n), op=op, obj_id=obj, tier=np.full(n, S.TIER_SSD),
                        nbytes=np.full(n, MIB), content_key=ck.astype(np.uint64))


def _cut(batch, rows):
    return [batch.take(slice(i, i + rows)) for i in range(0, batch.n, rows)]


@pytest.mark.parametrize("rows", [1, 2, 3, 7])
def test_readmitted_content_gets_class_1(rows):
    batches = _cut(_batch(HAND), rows)
    assert classes_of(POLICY, batches, n_classes=4, params=UNGUARDED).tolist() == [0, 0, 1, 0, 1, 1]
    assert classes_of(POLICY, batches, n_classes=1, params=UNGUARDED).tolist() == [0] * 6  # nothing to separate


def _cache(n=600, readmitted_die=False):
    """A tier where every content is first admitted and evicted two writes later (a probationary FIFO), and
    every third step the content admitted 50 steps before is written again: it stays (a main queue) - or, with
    ``readmitted_die``, is evicted two writes later too."""
    ev, fifo = [], []
    for i in range(n):
        ev.append((W, i + 1, 1000 + i))
        fifo.append(i + 1)
        if i % 3 == 0 and i >= 50:
            ev.append((W, 100_000 + i, 1000 + i - 50))
            if readmitted_die:
                fifo.append(100_000 + i)
        while len(fifo) > 2:
            ev.append((E, fifo.pop(0), 0))
    return _batch(ev)


DRIVE = DeviceFacts(page_bytes=MIB, unit_pages=0, logical_pages=16)  # horizon: 16 writes of 1 MiB
EAGER = SurvivalGuardParams(min_deaths=32, confirm=1)


@pytest.mark.parametrize("rows", [4096, 777, 50])
def test_guarded_it_follows_where_readmitted_copies_outlive_the_horizon(rows):
    batch = _cache()
    raw = classes_of(POLICY, _cut(batch, rows), params=UNGUARDED, device=DRIVE)
    cls = classes_of(POLICY, _cut(batch, rows), params=EAGER, device=DRIVE)
    assert raw.sum() == 183  # readmissions: steps 51, 54, ... 597
    diff = np.flatnonzero(cls != raw)
    start = int(diff.max()) + 1
    assert (cls[diff] == 0).all() and 50 < start < 150  # abstains only until the first decision
    assert np.array_equal(cls[start:], raw[start:]) and cls[start:].sum() > 150
    # the same store where readmitted copies are evicted as fast: no copy outlives the horizon, nothing separates
    batch = _cache(readmitted_die=True)
    assert (classes_of(POLICY, _cut(batch, rows), params=EAGER, device=DRIVE) == 0).all()


def test_it_is_causal():
    batch = _cache()
    whole = classes_of(POLICY, _cut(batch, 500), params=EAGER, device=DRIVE)
    prefix = classes_of(POLICY, _cut(batch.take(slice(0, batch.n // 2)), 500), params=EAGER, device=DRIVE)
    assert np.array_equal(whole[: len(prefix)], prefix) and 0 < len(prefix) < len(whole)

"""What the replay submits ops to, and how a target says it stopped part-way.

The embedded device models are targets as they are; so is the VM target (:mod:`testbed.vm.replay`), which
runs the ops through a guest kernel. A target that fails part-way raises :class:`TargetFailed` with the
completion of the leading ops that did complete: the run records that prefix and returns a result marked
incomplete, with the one-line error.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from devicemodels.base import Completion
from kvbed.core.errors import KvbedError


class Target(Protocol):
    """The device models' ``submit``/``counters``/``stats``; ``submit`` may raise :class:`TargetFailed`."""

    @property
    def page_bytes(self) -> int: ...

    @property
    def logical_pages(self) -> int: ...

    @property
    def n_placement_ids(self) -> int: ...

    def submit(self, ops: dict[str, np.ndarray]) -> Completion: ...

    def counters(self) -> dict[str, int]: ...

    def stats(self) -> dict[str, Any]: ...


class TargetFailed(KvbedError):
    """The target stopped inside a batch. ``partial``: the completion of the leading ops it ran (``done_ns``,
    and optionally a ``status`` column, where only the leading status-0 ops count), or None when nothing
    of the batch is known to have completed (the run then aborts with this error)."""

    def __init__(self, message: str, *, where: str | None = None, partial: Any = None):
        super().__init__(message, where=where)
        self.partial = partial

    def completed(self) -> np.ndarray | None:
        """done_ns of the leading ops that completed (None: no partial completion is known)."""
        if self.partial is None:
            return None
        done = np.asarray(self.partial.done_ns, np.int64)
        status = getattr(self.partial, "status", None)
        if status is not None and len(status):
            bad = np.flatnonzero(np.asarray(status) != 0)
            if len(bad):
                done = done[: int(bad[0])]
        return done

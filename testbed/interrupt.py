"""Ctrl-C during a long command: stop at the next safe point and keep a valid result marked incomplete.

The first SIGINT only records the phase the command was in (``scan``, ``replay``, ``writing results``,
``plotting``, ...); the command checks :class:`Interrupt` (a ``should_stop`` callable) between units of
work, finishes the unit at hand (a batch, a file, a plot), writes what it has with ``"incomplete": true``
and exits 130 through :class:`~kvbed.core.errors.Interrupted`. A second SIGINT aborts at once
(``KeyboardInterrupt``); the outputs are still never half files, since every writer renames whole files
into place.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator


class Interrupt:
    """Where the command is, and where it was when the user pressed Ctrl-C (``phase``, None if not)."""

    def __init__(self) -> None:
        self.current = "starting"
        self.phase: str | None = None

    def __call__(self) -> bool:
        return self.phase is not None

    def enter(self, phase: str) -> None:
        self.current = phase

    def mark(self) -> None:
        """The first Ctrl-C: remember the phase it came in (later ones change nothing)."""
        if self.phase is None:
            self.phase = self.current


@contextmanager
def interruptible() -> Iterator[Interrupt]:
    """Install the two-stage SIGINT handler for the block; the previous handler comes back afterwards.
    Outside the main thread (kvbed embedded in another program) no handler can be installed: the
    returned Interrupt then never fires and Ctrl-C behaves as that program decides."""
    intr = Interrupt()

    def handler(signum, frame):
        if intr.phase is not None:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        intr.mark()

    try:
        old = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread
        yield intr
        return
    try:
        yield intr
    finally:
        signal.signal(signal.SIGINT, old)

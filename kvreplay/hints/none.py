"""``none``: every write in one class - the baseline a drive without hints sees."""

from __future__ import annotations

import numpy as np

from kvreplay.hints.registry import HINTS
from kvreplay.hints.base import HintPolicy


@HINTS.register("none")
class NoHints(HintPolicy):
    knows = "nothing: every write gets class 0"

    def _assign(self, batch, actions, writes):
        return np.zeros(len(writes), np.int16)
